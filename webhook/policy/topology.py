"""GPU topology hints: the narrowest topology level whose domain holds the whole job.

Input is the job's shape from the merged (effective) view -- trainer pods, GPUs per pod, total GPUs -- and a
policy's ordered levels (narrowest first, each a node label key and the GPUs one domain at that level holds).

* A level holds the job when the total GPUs fit in one domain AND the trainer pods, which cannot be split, do:
  ``nodes <= gpusPerDomain // gpusPerNode``.
* The hint names that level (Kueue TAS ``podset-required-topology`` / ``podset-preferred-topology``; KAI
  ``topology-required-placement`` / ``topology-preferred-placement`` plus ``kai.scheduler/topology``).
* When the job spans several domains of the next narrower level and that level holds more than one pod, Kueue
  slice annotations group the pods: ``podset-slice-required-topology`` = the next narrower level and
  ``podset-slice-size`` = the largest divisor of the pod count that fits one such domain (Kueue needs the pod
  count to be a multiple of the slice size). One slice level only: Kueue supports one.
* A job no level holds gets no hint and a ``NoFit`` with the numbers; the caller turns it into a denial or a
  warning according to the policy's mode.
* Jobs without GPUs get no hint.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainguard.webhook.api.views import PolicyTopology, TopologyLevel

KUEUE_REQUIRED = "kueue.x-k8s.io/podset-required-topology"
KUEUE_PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
KUEUE_UNCONSTRAINED = "kueue.x-k8s.io/podset-unconstrained-topology"
KUEUE_SLICE_REQUIRED = "kueue.x-k8s.io/podset-slice-required-topology"
KUEUE_SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"
KUEUE_GROUP_NAME = "kueue.x-k8s.io/podset-group-name"
# Kueue 0.17 (feature gate TASMultiLayerTopology): up to 3 slice layers as JSON; its webhook forbids it beside the
# two-level slice annotations, so a template or patch that carries it has declared its topology.
KUEUE_SLICE_CONSTRAINTS = "kueue.x-k8s.io/podset-slice-required-topology-constraints"
# Any of these on the replicatedJob's pod template (runtime or another manager's patch): trainguard adds no Kueue hint.
KUEUE_TOPOLOGY_KEYS = (KUEUE_REQUIRED, KUEUE_PREFERRED, KUEUE_UNCONSTRAINED, KUEUE_SLICE_REQUIRED, KUEUE_SLICE_SIZE,
                       KUEUE_SLICE_CONSTRAINTS)
KAI_TOPOLOGY = "kai.scheduler/topology"
KAI_REQUIRED = "kai.scheduler/topology-required-placement"
KAI_PREFERRED = "kai.scheduler/topology-preferred-placement"
KAI_TOPOLOGY_KEYS = (KAI_TOPOLOGY, KAI_REQUIRED, KAI_PREFERRED)


@dataclass(frozen=True)
class JobShape:
    """What topology reasons about: trainer pods, GPUs each requests, GPUs of the whole job."""

    nodes: int
    gpus_per_node: int
    total_gpus: int


@dataclass(frozen=True)
class Placement:
    level: TopologyLevel
    slice_level: TopologyLevel | None = None
    slice_size: int | None = None


@dataclass(frozen=True)
class NoFit:
    reason: str


def _pods_per_domain(level: TopologyLevel, gpus_per_node: int) -> int:
    return level.gpus_per_domain // gpus_per_node if gpus_per_node > 0 else 0


def _holds(level: TopologyLevel, shape: JobShape) -> bool:
    return shape.total_gpus <= level.gpus_per_domain and shape.nodes <= _pods_per_domain(level, shape.gpus_per_node)


def _largest_divisor_at_most(n: int, bound: int) -> int:
    return max(d for d in range(1, min(n, bound) + 1) if n % d == 0)


def place(shape: JobShape, levels: tuple[TopologyLevel, ...]) -> Placement | NoFit | None:
    """The placement for ``shape`` on ``levels`` (narrowest first); None when there is nothing to place."""
    if shape.total_gpus <= 0 or shape.gpus_per_node <= 0 or not levels:
        return None
    if shape.gpus_per_node > levels[0].gpus_per_domain:
        return NoFit(
            f"{shape.gpus_per_node} GPUs per node exceed the {levels[0].gpus_per_domain} GPUs one "
            f"{levels[0].node_label} domain holds"
        )
    for i, level in enumerate(levels):
        if not _holds(level, shape):
            continue
        if i > 0:
            narrower = levels[i - 1]
            per_domain = _pods_per_domain(narrower, shape.gpus_per_node)
            if per_domain > 1 and shape.nodes > per_domain:
                size = _largest_divisor_at_most(shape.nodes, per_domain)
                if size > 1:
                    return Placement(level, narrower, size)
        return Placement(level)
    widest = levels[-1]
    return NoFit(
        f"the job needs {shape.total_gpus} GPUs ({shape.nodes} nodes x {shape.gpus_per_node} GPUs) but the widest "
        f"topology level {widest.node_label} holds {widest.gpus_per_domain} GPUs "
        f"({_pods_per_domain(widest, shape.gpus_per_node)} such nodes) per domain"
    )


@dataclass(frozen=True)
class Hints:
    """Annotations for the trainer replicatedJobs: Kueue on the pod template, KAI on the Job template."""

    pod_annotations: dict[str, str]
    job_annotations: dict[str, str]


def hints(placement: Placement, topology: PolicyTopology) -> Hints:
    required = topology.placement == "Required"
    pod: dict[str, str] = {}
    job: dict[str, str] = {}
    if "Kueue" in topology.schedulers:
        pod[KUEUE_REQUIRED if required else KUEUE_PREFERRED] = placement.level.node_label
        if placement.slice_level is not None and placement.slice_size is not None:
            pod[KUEUE_SLICE_REQUIRED] = placement.slice_level.node_label
            pod[KUEUE_SLICE_SIZE] = str(placement.slice_size)
    if "KAI" in topology.schedulers:
        if topology.kai_topology:
            job[KAI_TOPOLOGY] = topology.kai_topology
        job[KAI_REQUIRED if required else KAI_PREFERRED] = placement.level.node_label
    return Hints(pod, job)
