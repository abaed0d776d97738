"""The job under construction: one TrainJob + runtime pair while the pipeline refines it.

``prepare`` does what every consumer needs before any policy runs (upstream's ``newRuntimeInfo``): runtime template
⊕ runtimePatches ⊕ ``resourcesPerNode``, template metadata ⊕ patch metadata, and the initial pod counts.
Validation reads the prepared draft (upstream validates "without running enforce plugins"); ``effective_job``
goes on to enforce policies on it. A ``Draft`` owns deep copies of everything, so policies may edit it in place
and the caller's objects are never touched.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping

from trainguard.webhook.api.views import ReplicatedJob, Runtime, RuntimeRef, TrainJob, Trainer, job_ancestor
from trainguard.webhook.runtime import merge
from trainguard.webhook.runtime.json_copy import deep_copy
from trainguard.webhook.runtime.names import ANCESTOR_TRAINER, COMPLETION_INDEX_FIELD_PATH, NODE


class BuildError(ValueError):
    """A TrainJob/runtime pair that cannot produce objects; the message says why (it reaches Events)."""


# Draft fact: the trainer's ``node`` container args before ``spec.trainer`` overrode them (Flux keeps them).
RUNTIME_NODE_ARGS = "runtime_node_args"


def as_object(obj: Any) -> dict:
    """A deep-copied JSON dict from a dict or a ``trainguard.webhook.api`` model (anything with ``dump()``)."""
    if obj is None:
        return {}
    if hasattr(obj, "dump"):
        obj = obj.dump()
    if not isinstance(obj, Mapping):
        raise TypeError(f"expected an object (dict or model), got {type(obj).__name__}")
    return deep_copy(dict(obj))


@dataclass
class Draft:
    trainjob: dict
    runtime: dict
    spec: dict  # the JobSet spec being built
    labels: dict[str, str]
    annotations: dict[str, str]
    counts: dict[str, int]  # replicatedJob name -> pods per replica
    # Values a policy derives during enforcement and an object builder needs later (MPI slots, ...).
    facts: dict[str, Any] = field(default_factory=dict)
    # Read once: the draft's TrainJob and runtime are its own copies and are never edited while the job is built
    # (policies edit ``spec``), and every step reads these.
    trainjob_view: TrainJob = field(init=False, repr=False, compare=False)
    runtime_view: Runtime = field(init=False, repr=False, compare=False)
    name: str = field(init=False, compare=False)
    namespace: str = field(init=False, compare=False)
    # ``spec.trainer`` (a view of {} when absent); ``has_trainer``: whether it is set, since several plugins behave
    # differently without it (upstream quirk).
    trainer: Trainer = field(init=False, repr=False, compare=False)
    has_trainer: bool = field(init=False, compare=False)

    def __post_init__(self) -> None:
        self.trainjob_view = TrainJob(self.trainjob)
        self.runtime_view = Runtime(self.runtime)
        meta = self.trainjob_view.metadata
        self.name, self.namespace = meta.name, meta.namespace
        self.trainer = self.trainjob_view.trainer
        self.has_trainer = self.trainjob_view.has_trainer

    # -- the TrainJob ------------------------------------------------------------------------------------

    @property
    def runtime_ref(self) -> RuntimeRef:
        return self.trainjob_view.runtime_ref

    @property
    def num_nodes_override(self) -> int | None:
        return self.trainer.num_nodes

    # -- the runtime -------------------------------------------------------------------------------------
    def ml_policy_source(self, name: str) -> Mapping[str, Any]:
        """``spec.mlPolicy.<name>`` of the runtime (empty when not configured)."""
        return self.runtime_view.ml_policy_source(name) or {}

    def pod_group_policy_source(self, name: str) -> Mapping[str, Any]:
        """``spec.podGroupPolicy.<name>`` of the runtime (empty when not configured)."""
        return self.runtime_view.pod_group_policy_source(name) or {}

    # -- replicated jobs ---------------------------------------------------------------------------------
    def jobs(self) -> list[dict]:
        return self.spec.setdefault("replicatedJobs", [])

    def job(self, name: str) -> dict | None:
        return next((rj for rj in self.jobs() if rj.get("name") == name), None)

    def trainer_job(self) -> dict | None:
        """The first replicatedJob labelled as the trainer ancestor."""
        return next((rj for rj in self.jobs() if ancestor_of(rj) == ANCESTOR_TRAINER), None)

    def node_job(self) -> dict | None:
        """The job whose pods are the training nodes: the one named ``node``, else the trainer ancestor."""
        return self.job(NODE) or self.trainer_job()

    def containers(self, rj: Mapping[str, Any] | None, *, init: bool = False) -> list[dict]:
        if rj is None:
            return []
        return pod_spec(rj).setdefault("initContainers" if init else "containers", [])

    def container(self, rj: Mapping[str, Any] | None, name: str, *, init: bool = False) -> dict | None:
        return next((c for c in self.containers(rj, init=init) if c.get("name") == name), None)

    def node_resources(self) -> Mapping[str, Any] | None:
        """``resources`` of the node job's ``node`` container, merged (template ⊕ patches ⊕ ``resourcesPerNode``):
        what one node pod really requests, where the policies read GPUs and CPUs per node."""
        return (self.container(self.node_job(), NODE) or {}).get("resources")

    def edit_container(self, rj: Mapping[str, Any] | None, name: str, edit: Callable[[dict], dict]) -> bool:
        """Replace container ``name`` of ``rj`` by ``edit(container)``; False when there is no such container."""
        containers = self.containers(rj)
        for i, c in enumerate(containers):
            if c.get("name") == name:
                containers[i] = edit(c)
                return True
        return False

    def all_pod_specs(self) -> Iterator[tuple[dict, dict]]:
        for rj in self.jobs():
            yield rj, pod_spec(rj)

    def endpoints(self, rj: Mapping[str, Any]) -> list[str]:
        """Stable pod DNS names ``<job>-<rjob>-<replica>-<pod>.<subdomain>`` in replica, then pod order."""
        subdomain = (self.spec.get("network") or {}).get("subdomain") or self.name
        job = ReplicatedJob(rj)
        count = self.counts.get(job.name, 1)
        return [f"{self.name}-{job.name}-{r}-{p}.{subdomain}" for r in range(job.replicas) for p in range(count)]


ancestor_of = job_ancestor  # the replicated job's ancestor label (trainer, dataset-/model-initializer) or None


def pod_spec(rj: Mapping[str, Any]) -> dict:
    """``rj.template.spec.template.spec`` for writing, created empty where missing (the draft owns ``rj``); read
    one through ``ReplicatedJob(rj).pod_spec``."""
    template = rj.setdefault("template", {})  # type: ignore[union-attr]
    job_spec = template.setdefault("spec", {})
    pod_template = job_spec.setdefault("template", {})
    return pod_template.setdefault("spec", {})


def pod_metadata(rj: Mapping[str, Any]) -> dict:
    pod_template = rj.setdefault("template", {}).setdefault("spec", {}).setdefault("template", {})  # type: ignore[union-attr]
    return pod_template.setdefault("metadata", {})


def runtime_patches(trainjob: Mapping[str, Any]) -> list[dict]:
    return list(TrainJob(trainjob).runtime_patches)  # type: ignore[arg-type]


def prepare(trainjob: Any, runtime: Any) -> Draft:
    """Template ⊕ runtimePatches ⊕ resourcesPerNode, merged metadata and initial counts (no policy has run).

    Raises ``merge.MergeError`` for a patch that cannot be merged.
    """
    tj, rt = as_object(trainjob), as_object(runtime)
    template = Runtime(rt).template
    patches = runtime_patches(tj)
    spec = merge.merge_runtime_patches(template.spec, patches)
    labels, annotations = merge.merge_template_metadata(template.metadata.raw, patches)
    draft = Draft(trainjob=tj, runtime=rt, spec=spec, labels=labels, annotations=annotations, counts={})
    for rj in draft.jobs():
        # The runtime CRDs' embedded JobSet schema defaults these; files given to `trainguard render` lack them.
        rj.setdefault("replicas", 1)
        rj.setdefault("groupName", "default")
    _merge_resources_per_node(draft)
    _initial_counts(draft)
    return draft


def resources_targets(draft: Draft) -> list[dict]:
    """Jobs whose ``node`` container runs the trainer: the trainer ancestor, plus (MPI runLauncherAsNode) ``node``."""
    targets = [rj for rj in [draft.trainer_job()] if rj is not None]
    if is_launcher_as_node(draft):
        worker = draft.job(NODE)
        if worker is not None and all(worker is not t for t in targets):
            targets.append(worker)
    return targets


def _merge_resources_per_node(draft: Draft) -> None:
    resources = draft.trainer.resources_per_node
    if not resources:
        return
    for rj in resources_targets(draft):
        draft.edit_container(rj, NODE, lambda c: merge.merge_resources(c, resources))


def _initial_counts(draft: Draft) -> None:
    """As upstream's ``newRuntimeInfo``: trainer ancestor -> mlPolicy.numNodes ?? 1 (when a mlPolicy exists);
    others -> parallelism ?? 1."""
    runtime = draft.runtime_view
    trainer_count = (runtime.num_nodes or 1) if runtime.ml_policy is not None else None
    for rj in draft.jobs():
        job = ReplicatedJob(rj)
        if trainer_count is not None and job.ancestor == ANCESTOR_TRAINER:
            count = trainer_count
        else:
            count = job.parallelism or 1
        draft.counts[rj.get("name")] = max(1, int(count))


def set_trainer_count(draft: Draft) -> None:
    """``trainer.numNodes`` sizes the trainer-ancestor job (Torch, PlainML, JAX, XGBoost, Flux) as upstream copies
    it: 0 builds a job of no pods (its envs say 0). A negative value, which admission denies (``validate``), counts
    as 0 here: a job that skipped admission must not offset its other jobs' GPUs in a policy's totals."""
    rj = draft.trainer_job()
    if rj is not None and draft.num_nodes_override is not None:
        draft.counts[rj["name"]] = max(0, int(draft.num_nodes_override))


def env(name: str, value: Any) -> dict:
    return {"name": name, "value": str(value)}


def completion_index_env(name: str) -> dict:
    """An env var holding the pod's Job completion index, i.e. its rank among the job's pods."""
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": COMPLETION_INDEX_FIELD_PATH}}}


def upsert_into_container(draft: Draft, rj: Mapping[str, Any] | None, name: str, *, env_vars=(), ports=(), mounts=()) -> bool:
    """Upsert env (by name), ports (by containerPort or name) and volumeMounts (by mountPath) into one container."""

    def edit(c: dict) -> dict:
        out = dict(c)
        if env_vars:
            out["env"] = merge.upsert(out.get("env"), env_vars, "name")
        if ports:
            out["ports"] = merge.upsert_ports(out.get("ports"), ports)
        if mounts:
            out["volumeMounts"] = merge.upsert(out.get("volumeMounts"), mounts, "mountPath")
        return out

    return draft.edit_container(rj, name, edit)


def upsert_volumes(rj: Mapping[str, Any], volumes: list[dict]) -> None:
    spec = pod_spec(rj)
    spec["volumes"] = merge.upsert(spec.get("volumes"), volumes, "name")


def is_launcher_as_node(draft: Draft) -> bool:
    return bool(draft.ml_policy_source("mpi").get("runLauncherAsNode"))


__all__ = [
    "RUNTIME_NODE_ARGS",
    "BuildError",
    "Draft",
    "ancestor_of",
    "as_object",
    "completion_index_env",
    "env",
    "upsert_into_container",
    "upsert_volumes",
    "is_launcher_as_node",
    "pod_metadata",
    "pod_spec",
    "prepare",
    "resources_targets",
    "runtime_patches",
    "set_trainer_count",
]
