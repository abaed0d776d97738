"""TrainJob: its runtimeRef (with the CRD's defaulting rule, see the package docstring), trainer and the rest of its spec."""

from __future__ import annotations

from typing import Any, Mapping

from trainguard.webhook.api import constants as c
from trainguard.webhook.api.views.base import KubeObject, View, _at2, _at3, _list


class RuntimeRef(View):
    """``spec.runtimeRef``; ``kind``/``apiGroup`` take the CRD default only when absent (see the module docstring)."""

    __slots__ = ()

    @property
    def name(self) -> str:
        return str(self._one("name", ""))

    @property
    def kind(self) -> str:
        return str(self._one("kind", c.DEFAULT_RUNTIME_REF_KIND))

    @property
    def api_group(self) -> str:
        return str(self._one("apiGroup", c.DEFAULT_RUNTIME_REF_API_GROUP))

    @property
    def registry_key(self) -> str:
        """``<kind>.<apiGroup>``, as upstream keys its runtime registry (``schema.GroupKind.String()``)."""
        return f"{self.kind}.{self.api_group}" if self.api_group else self.kind

    @property
    def is_training_runtime(self) -> bool:
        return self.api_group == c.TRAINER_GROUP and self.kind == c.TRAINING_RUNTIME_KIND

    @property
    def is_cluster_training_runtime(self) -> bool:
        return self.api_group == c.TRAINER_GROUP and self.kind == c.CLUSTER_TRAINING_RUNTIME_KIND

    def as_dict(self) -> dict[str, str]:
        """The defaulted reference as upstream quotes it in messages (Go field order)."""
        return {"name": self.name, "apiGroup": self.api_group, "kind": self.kind}


class Trainer(View):
    """``spec.trainer`` (a view of ``{}`` when absent: ask ``TrainJob.has_trainer`` where absence matters)."""

    __slots__ = ()

    @property
    def num_nodes(self) -> int | None:
        """``numNodes`` as written (None: the runtime decides)."""
        return self._one("numNodes")

    @property
    def num_proc_per_node(self) -> Any:
        return self._one("numProcPerNode")

    @property
    def image(self) -> str | None:
        return self._one("image")

    @property
    def command(self) -> list[str] | None:
        return self._one("command")

    @property
    def args(self) -> list[str] | None:
        return self._one("args")

    @property
    def env(self) -> list[Mapping[str, Any]]:
        return _list(self._one("env"))

    @property
    def resources_per_node(self) -> Mapping[str, Any] | None:
        return self._one("resourcesPerNode")


class TrainJob(KubeObject):
    __slots__ = ()

    @property
    def has_spec(self) -> bool:
        """Whether ``spec`` is an object: code that edits the spec in place (MultiKueue's ``managedBy``, the kept
        policy runtimePatch) has nowhere to write without one, and adding one would make a spec without runtimeRef."""
        return isinstance(self.raw.get("spec"), dict)

    @property
    def runtime_ref(self) -> RuntimeRef:
        return RuntimeRef(_at2(self.raw, "spec", "runtimeRef"))

    @property
    def raw_runtime_ref(self) -> Any:
        """``spec.runtimeRef`` exactly as sent (upstream quotes it undefaulted in some messages)."""
        return _at2(self.raw, "spec", "runtimeRef")

    @property
    def has_trainer(self) -> bool:
        """Whether ``spec.trainer`` is set: several plugins behave differently without it (upstream quirk)."""
        return _at2(self.raw, "spec", "trainer") is not None

    @property
    def trainer(self) -> Trainer:
        return Trainer(_at2(self.raw, "spec", "trainer"))

    @property
    def runtime_patches(self) -> list[Mapping[str, Any]]:
        return _list(_at2(self.raw, "spec", "runtimePatches"))

    def initializer(self, key: str) -> Mapping[str, Any] | None:
        """``spec.initializer.<key>`` (``dataset`` or ``model``); None when not configured."""
        return _at3(self.raw, "spec", "initializer", key)

    @property
    def suspend(self) -> bool:
        return bool(_at2(self.raw, "spec", "suspend"))

    @property
    def managed_by(self) -> str | None:
        return _at2(self.raw, "spec", "managedBy")

    @property
    def active_deadline_seconds(self) -> int | None:
        return _at2(self.raw, "spec", "activeDeadlineSeconds")

    @property
    def conditions(self) -> list[Mapping[str, Any]]:
        return _list(_at2(self.raw, "status", "conditions"))

    @property
    def last_resume_time(self) -> str | None:
        """``status.lastResumeTime`` (trainguard's): when the job was last resumed from suspension."""
        value = _at2(self.raw, "status", "lastResumeTime")
        return value if isinstance(value, str) else None

    @property
    def jobs_status(self) -> list[Mapping[str, Any]]:
        """``status.jobsStatus`` (per replicated job counts; on a MultiKueue manager, copied from the worker)."""
        return _list(_at2(self.raw, "status", "jobsStatus"))
