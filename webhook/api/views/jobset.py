"""A JobSet template (a runtime's ``spec.template``, a runtimePatch's) down to its containers."""

from __future__ import annotations

from typing import Any, Iterator, Mapping

from trainguard.webhook.api import constants as c
from trainguard.webhook.api.views.base import EMPTY, Meta, View, _at3, _at4, _list, _mapping, resolve


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


def patch_template(patch: Mapping[str, Any]) -> JobSetTemplate:
    """The JobSet template of one runtimePatch (``trainingRuntimeSpec.template``)."""
    return JobSetTemplate(resolve(patch, "trainingRuntimeSpec.template"))


def iter_pod_specs(jobset_spec: Mapping[str, Any] | None) -> Iterator[tuple[ReplicatedJob, Mapping[str, Any]]]:
    """(replicated job, its pod spec) for every replicated job of a JobSet spec."""
    for rj in replicated_jobs(jobset_spec):
        yield rj, rj.pod_spec
