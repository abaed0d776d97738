"""The effective job: exactly what the reconciler will build, for the policy engine to reason about.

Pipeline (upstream's ``TrainingRuntime.NewObjects``: runtime info, ML and pod-group plugins, builders;
each step a function of the module that owns the concept):

1. ``draft.prepare``: runtime template ⊕ runtimePatches ⊕ ``resourcesPerNode``; metadata; initial counts.
2. ``jobset.apply_trainer``: image/command/args/env of ``spec.trainer`` into the ``node`` container.
3. The ML policy (exactly one of torch, mpi, jax, xgboost, flux, plain) sets counts, env, volumes, command.
4. ``jobset.apply_initializers``: STORAGE_URI, env and secretRef into the initializer containers.
5. The pod-group policy (coscheduling or volcano) labels/annotates every pod template.
6. ``jobset.sync_counts``: parallelism = completions = pod count per replicatedJob.
7. ``extras.apply``: trainguard effects (pod ``schedulerName``) and their record.

GPU numbers are computed from the MERGED view, i.e. from the pod specs of step 7, what the pods will really
request. Upstream Trainer derives process counts from the raw ``trainer.resourcesPerNode`` (open bug #3974): a
TrainJob that overrides only CPU on a runtime declaring 8 GPUs per node counts 0 GPUs there; here it counts 8.
``gpus_per_node`` is the GPU request of one pod of the node pod set (the job named ``node``, else the trainer
ancestor); ``total_gpus`` sums GPUs per pod × pods over every pod set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from trainguard.webhook.api.quantity import Quantity
from trainguard.webhook.api.views import ReplicatedJob
from trainguard.webhook.runtime import extras, jobset, registry
from trainguard.webhook.runtime.draft import BuildError, Draft, prepare, resources_targets
from trainguard.webhook.runtime.merge import MergeError
from trainguard.webhook.runtime.plugin import CountsNodes, RuntimePlugin
from trainguard.webhook.runtime.resources import gpus_of, pod_requests


@dataclass(frozen=True)
class PodSet:
    """One replicatedJob as the scheduler sees it."""

    name: str
    ancestor: str | None
    count: int  # pods per replica (parallelism)
    replicas: int
    requests: Mapping[str, Quantity]  # effective requests of ONE pod
    gpus: int  # GPUs one pod requests
    containers: tuple[str, ...]
    init_containers: tuple[str, ...]

    @property
    def pods(self) -> int:
        return self.count * self.replicas


@dataclass(frozen=True)
class EffectiveJob:
    name: str
    namespace: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    spec: Mapping[str, Any]  # the JobSet spec as it will be applied (without spec.suspend); do not mutate
    pod_sets: tuple[PodSet, ...]
    ml_policy: str
    pod_group_policy: str | None
    trainer_jobs: tuple[str, ...]
    num_nodes: int
    gpus_per_node: int
    total_gpus: int

    def pod_set(self, name: str) -> PodSet | None:
        return next((ps for ps in self.pod_sets if ps.name == name), None)


def effective_job(trainjob: Any, runtime: Any) -> EffectiveJob:
    """TrainJob + runtime -> the job that will run. Raises ``BuildError`` when they cannot produce one."""
    return compute(trainjob, runtime)[0]


def compute(trainjob: Any, runtime: Any) -> tuple[EffectiveJob, Draft]:
    """The effective job and the finished draft (object builders read the draft's facts)."""
    try:
        draft = prepare(trainjob, runtime)
    except MergeError as e:
        raise BuildError(f"cannot merge runtimePatches: {e}") from e
    jobset.apply_trainer(draft)
    ml = registry.ml_policy_of(draft.runtime_view)
    ml.enforce(draft)
    jobset.apply_initializers(draft)
    pod_group = registry.pod_group_policy_of(draft.runtime_view)
    if pod_group is not None:
        pod_group.enforce(draft)
    jobset.sync_counts(draft)
    extras.apply(draft)
    return _summarise(draft, ml, pod_group), draft


def pod_group_policy(draft: Draft) -> str | None:
    plugin = registry.pod_group_policy_of(draft.runtime_view)
    return plugin.NAME if plugin is not None else None


def pod_sets(draft: Draft) -> tuple[PodSet, ...]:
    out = []
    for rj in draft.jobs():
        job = ReplicatedJob(rj)
        requests = pod_requests(job.pod_spec)
        out.append(
            PodSet(
                name=job.name,
                ancestor=job.ancestor,
                count=draft.counts.get(rj.get("name"), 1),
                replicas=job.replicas,
                requests=requests,
                gpus=gpus_of(requests),
                containers=job.names(),
                init_containers=job.names(init=True),
            )
        )
    return tuple(out)


def _summarise(draft: Draft, ml: RuntimePlugin, pod_group: RuntimePlugin | None) -> EffectiveJob:
    sets = pod_sets(draft)
    by_name = {ps.name: ps for ps in sets}
    node_rj = draft.node_job()
    node_set = by_name.get(node_rj["name"]) if node_rj is not None else None
    # Training processes run in the trainer job (its ``node`` container), unless the ML policy says otherwise.
    trainer_jobs = tuple(rj["name"] for rj in resources_targets(draft))
    num_nodes = node_set.pods if node_set else 0
    if registry.offers(ml, CountsNodes):
        trainer_jobs = ml.trainer_jobs(draft)
        counted = ml.num_nodes(draft, {ps.name: ps.pods for ps in sets})
        num_nodes = num_nodes if counted is None else counted
    return EffectiveJob(
        name=draft.name,
        namespace=draft.namespace,
        labels=dict(draft.labels),
        annotations=dict(draft.annotations),
        spec=draft.spec,
        pod_sets=sets,
        ml_policy=ml.NAME,
        pod_group_policy=pod_group.NAME if pod_group is not None else None,
        trainer_jobs=trainer_jobs,
        num_nodes=num_nodes,
        gpus_per_node=node_set.gpus if node_set else 0,
        total_gpus=sum(ps.gpus * ps.pods for ps in sets),
    )


__all__ = ["EffectiveJob", "PodSet", "compute", "effective_job", "pod_sets"]
