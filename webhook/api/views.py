"""Read-only typed views over wire objects: the one place that knows where each field of a TrainJob, a runtime
and the JobSet template inside it lives.

The webhook, the reconciler and ``render`` receive objects as JSON dicts (an AdmissionReview, a watch event, a
file), and what they write back (a JSON Patch, the built JobSet) is computed from those dicts, most of whose fields
are opaque to us; so the code keeps the dicts and reads them through these views. A view wraps the dict it is given
without copying it and without validating it (the CRD schema and the door check
``trainguard.webhook.policy.well_formed`` have done that before any rule runs): a missing or null field reads as
the documented default; a field of the wrong type is the door check's to refuse (the properties walk the CRD's shape
with plain ``dict.get`` chains, the cheapest reads Python has, since every rule reads through them; ``resolve``
also tolerates a wrong type). Views never write; code that builds or mutates an object (patches, merges, the draft
JobSet) works on dicts and may use a view to read them.

``TrainJob`` serves TrainJobs; ``Runtime`` serves TrainingRuntimes and ClusterTrainingRuntimes alike (same spec);
both share ``KubeObject`` / ``Meta``. ``JobSetTemplate`` reads a runtime's ``spec.template`` and a runtimePatch's
``trainingRuntimeSpec.template`` (same shape), ``ReplicatedJob`` one replicated job down to its pod spec.

The runtimeRef rule: a field that is ABSENT (or null) takes the CRD default (``kind: ClusterTrainingRuntime``,
``apiGroup: trainer.kubeflow.org``), as the apiserver's structural defaulting fills only missing fields; a field
present as ``""`` stays ``""``. Upstream v2.3 does the same: the CRD default applies to an absent field only, and
``RuntimeRefToRuntimeRegistryKey`` dereferences the pointer as sent, so ``kind: ""`` keys the runtime registry as
``.trainer.kubeflow.org``, which no runtime serves: the webhook answers "unsupported runtime" and the reconciler
marks the job ``TrainingRuntimeNotSupported``.
"""

from __future__ import annotations

from collections.abc import Mapping as _Mapping
from types import MappingProxyType
from typing import Any, Iterator, Mapping, Sequence

from trainguard.webhook.api import constants as c

EMPTY: Mapping[str, Any] = MappingProxyType({})
# "a.b.c" -> ("a", "b", "c"), split once per path (the views read a handful of fixed paths, many times).
_PATHS: dict[str, tuple[str, ...]] = {}


def _is_mapping(value: Any) -> bool:
    # Wire objects are dicts: test that first, the ABC check is an order of magnitude slower.
    return type(value) is dict or (value is not None and isinstance(value, _Mapping))


def resolve(obj: Any, path: str | Sequence[str], default: Any = None) -> Any:
    """``obj[a][b]...`` for ``path`` ``"a.b"`` (or a sequence of keys); ``default`` when a step is missing, null or
    not an object. Keys containing dots are passed as a sequence."""
    if isinstance(path, str):
        keys = _PATHS.get(path)
        if keys is None:
            keys = _PATHS[path] = tuple(path.split("."))
    else:
        keys = tuple(path)
    return _dig(obj, keys, default)


def _dig(obj: Any, keys: tuple[str, ...], default: Any = None) -> Any:
    current = obj
    for key in keys:
        # _is_mapping inlined: resolve runs for every field read.
        if type(current) is not dict and (current is None or not isinstance(current, _Mapping)):
            return default
        current = current.get(key)
        if current is None:
            return default
    return current


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if _is_mapping(value) else EMPTY


# The CRD's paths, walked with ``(x.get(k) or EMPTY)`` chains: a view's reads cost what the inline chains they
# replace cost, plus one call.
def _at2(d: Mapping[str, Any], k1: str, k2: str) -> Any:
    return (d.get(k1) or EMPTY).get(k2)


def _at3(d: Mapping[str, Any], k1: str, k2: str, k3: str) -> Any:
    return ((d.get(k1) or EMPTY).get(k2) or EMPTY).get(k3)


def _at4(d: Mapping[str, Any], k1: str, k2: str, k3: str, k4: str) -> Any:
    return (((d.get(k1) or EMPTY).get(k2) or EMPTY).get(k3) or EMPTY).get(k4)


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


class View:
    """A read-only window on one JSON object (``raw`` is the caller's dict, never copied)."""

    __slots__ = ("raw",)

    def __init__(self, raw: Mapping[str, Any] | None) -> None:
        self.raw: Mapping[str, Any] = raw if type(raw) is dict or _is_mapping(raw) else EMPTY

    def get(self, path: str | Sequence[str], default: Any = None) -> Any:
        return resolve(self.raw, path, default)

    def _one(self, key: str, default: Any = None) -> Any:
        # One level down, the common case: ``raw`` is always a mapping.
        value = self.raw.get(key)
        return default if value is None else value

    def __repr__(self) -> str:
        return f"{type(self).__name__}({dict(self.raw)!r})"


class Meta(View):
    """``metadata`` of any object."""

    __slots__ = ()

    @property
    def name(self) -> str:
        return self._one("name", "")

    @property
    def namespace(self) -> str:
        return self._one("namespace", "")

    @property
    def uid(self) -> str:
        return self._one("uid", "")

    @property
    def labels(self) -> Mapping[str, str]:
        return _mapping(self._one("labels"))

    @property
    def annotations(self) -> Mapping[str, str]:
        return _mapping(self._one("annotations"))


class KubeObject(View):
    """What every object has: apiVersion, kind, metadata, spec."""

    __slots__ = ()

    @property
    def kind(self) -> str:
        return self._one("kind", "")

    @property
    def metadata(self) -> Meta:
        return Meta(self._one("metadata"))

    @property
    def spec(self) -> Mapping[str, Any]:
        return _mapping(self._one("spec"))


# -- the JobSet template: replicated jobs -> pod spec -> containers -----------------------------------------


class Container(View):
    __slots__ = ()

    @property
    def name(self) -> str:
        return self._one("name", "")

    @property
    def image(self) -> str | None:
        return self._one("image")

    @property
    def command(self) -> list[str]:
        return _list(self._one("command"))

    @property
    def env(self) -> list[Mapping[str, Any]]:
        return _list(self._one("env"))

    @property
    def resources(self) -> Mapping[str, Any] | None:
        return self._one("resources")

    @property
    def volume_mounts(self) -> list[Mapping[str, Any]]:
        return _list(self._one("volumeMounts"))


class ReplicatedJob(View):
    """One ``replicatedJobs[]`` entry: ``template`` is a Job template whose ``spec.template`` is the pod template."""

    __slots__ = ()

    @property
    def name(self) -> str:
        return self._one("name", "")

    @property
    def replicas(self) -> int:
        """Replicas of the job (the CRD defaults it to 1; 0 or missing reads as 1, as the build treats it)."""
        return int(self._one("replicas") or 1)

    @property
    def labels(self) -> Mapping[str, str]:
        """Labels of the Job template (where the ancestor label lives)."""
        return _mapping(_at3(self.raw, "template", "metadata", "labels"))

    @property
    def ancestor(self) -> str | None:
        return job_ancestor(self.raw)

    @property
    def parallelism(self) -> int | None:
        return _at3(self.raw, "template", "spec", "parallelism")

    @property
    def pod_metadata(self) -> Meta:
        return Meta(_at4(self.raw, "template", "spec", "template", "metadata"))

    @property
    def pod_spec(self) -> Mapping[str, Any]:
        return _mapping(_at4(self.raw, "template", "spec", "template", "spec"))

    def containers(self, *, init: bool = False) -> list[Container]:
        return [Container(x) for x in _list(self.pod_spec.get("initContainers" if init else "containers"))]

    def all_containers(self) -> list[Container]:
        """Init containers then containers (a container name is unique across both in a pod)."""
        return self.containers(init=True) + self.containers()

    def container(self, name: str, *, init: bool = False) -> Container | None:
        return next((x for x in self.containers(init=init) if x.name == name), None)

    def names(self, *, init: bool = False) -> tuple[str, ...]:
        """Names of the containers (or init containers), in order."""
        return tuple(x.get("name", "") for x in _list(self.pod_spec.get("initContainers" if init else "containers")))

    def container_names(self) -> set[str | None]:
        return {x.get("name") for x in self.all_containers()}


_ANCESTOR = c.LABEL_TRAINJOB_ANCESTOR


def job_ancestor(rj: Mapping[str, Any]) -> str | None:
    """``ReplicatedJob(rj).ancestor`` without the view: the build asks it of every job at every step."""
    return (((rj.get("template") or EMPTY).get("metadata") or EMPTY).get("labels") or EMPTY).get(_ANCESTOR)


class JobSetTemplate(View):
    """A JobSet template (``metadata`` + ``spec``): a runtime's ``spec.template`` or a patch's."""

    __slots__ = ()

    @property
    def metadata(self) -> Meta:
        return Meta(self._one("metadata"))

    @property
    def spec(self) -> Mapping[str, Any]:
        return _mapping(self._one("spec"))

    def replicated_jobs(self) -> list[ReplicatedJob]:
        return [ReplicatedJob(rj) for rj in _list(self.spec.get("replicatedJobs"))]

    def job(self, name: str) -> ReplicatedJob | None:
        return next((rj for rj in self.replicated_jobs() if rj.name == name), None)


def replicated_jobs(jobset_spec: Mapping[str, Any] | None) -> list[ReplicatedJob]:
    """Views of the replicated jobs of a JobSet spec (a built JobSet, an effective job's spec)."""
    return [ReplicatedJob(rj) for rj in _list(_mapping(jobset_spec).get("replicatedJobs"))]


# -- runtimes ------------------------------------------------------------------------------------------------


class Runtime(KubeObject):
    """A TrainingRuntime or a ClusterTrainingRuntime (one spec for both)."""

    __slots__ = ()

    @property
    def ml_policy(self) -> Mapping[str, Any] | None:
        """``spec.mlPolicy``; None when absent (the trainer job is then counted by its own parallelism)."""
        return _at2(self.raw, "spec", "mlPolicy")

    def ml_policy_source(self, name: str) -> Mapping[str, Any] | None:
        """``spec.mlPolicy.<name>`` (``torch``, ``mpi``...); None when not configured."""
        return _at3(self.raw, "spec", "mlPolicy", name)

    @property
    def num_nodes(self) -> int | None:
        """``spec.mlPolicy.numNodes`` as written."""
        return _at3(self.raw, "spec", "mlPolicy", "numNodes")

    @property
    def pod_group_policy(self) -> Mapping[str, Any] | None:
        """``spec.podGroupPolicy``; None when absent."""
        return _at2(self.raw, "spec", "podGroupPolicy")

    def pod_group_policy_source(self, name: str) -> Mapping[str, Any] | None:
        """``spec.podGroupPolicy.<name>`` (``coscheduling``, ``volcano``); None when not configured."""
        return _at3(self.raw, "spec", "podGroupPolicy", name)

    @property
    def template(self) -> JobSetTemplate:
        return JobSetTemplate(_at2(self.raw, "spec", "template"))


# -- TrainJob --------------------------------------------------------------------------------------------------


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


def patch_template(patch: Mapping[str, Any]) -> JobSetTemplate:
    """The JobSet template of one runtimePatch (``trainingRuntimeSpec.template``)."""
    return JobSetTemplate(resolve(patch, "trainingRuntimeSpec.template"))


def iter_pod_specs(jobset_spec: Mapping[str, Any] | None) -> Iterator[tuple[ReplicatedJob, Mapping[str, Any]]]:
    """(replicated job, its pod spec) for every replicated job of a JobSet spec."""
    for rj in replicated_jobs(jobset_spec):
        yield rj, rj.pod_spec


__all__ = [
    "Container",
    "EMPTY",
    "JobSetTemplate",
    "KubeObject",
    "Meta",
    "ReplicatedJob",
    "Runtime",
    "RuntimeRef",
    "TrainJob",
    "Trainer",
    "View",
    "iter_pod_specs",
    "job_ancestor",
    "patch_template",
    "replicated_jobs",
    "resolve",
]
