"""The numbers policy reasons about, read off the runtime framework's effective job.

GPUs come from the MERGED view (runtime template ⊕ runtimePatches ⊕ ``resourcesPerNode`` merged per resource),
which is what the reconciler builds; upstream derives them from the raw override (open bug #3974). GPUs are
counted under the policy's GPU resource name (default ``nvidia.com/gpu``), so a cluster with several GPU
resource names counts only the one the policy constrains.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from trainguard.webhook.api.quantity import Quantity, parse_quantity
from trainguard.webhook.api.views import replicated_jobs
from trainguard.webhook.policy.topology import JobShape


def quantity(value: Any) -> Quantity:
    return value if isinstance(value, Quantity) else parse_quantity(value)


def gpu_count(requests: Mapping[str, Any], resource: str) -> int:
    """Whole GPUs of ``resource`` one pod requests (``Quantity.value()`` rounds up, as Kubernetes' ``Value()``)."""
    value = requests.get(resource)
    return 0 if value is None else quantity(value).value()


def pods(pod_set: Any) -> int:
    return pod_set.pods


def trainer_pod_sets(effective: Any) -> list[Any]:
    names = set(effective.trainer_jobs)
    return [ps for ps in effective.pod_sets if ps.name in names]


def job_shape(effective: Any, gpu_resource: str) -> JobShape:
    """Trainer pods that hold GPUs (an MPI launcher without GPUs does not count), GPUs per trainer pod (the largest,
    if trainer pod sets differ) and GPUs of the whole job (every pod set, initializers included)."""
    trainers = trainer_pod_sets(effective)
    with_gpus = [ps for ps in trainers if gpu_count(ps.requests, gpu_resource) > 0] or trainers
    nodes = sum(pods(ps) for ps in with_gpus) if with_gpus else effective.num_nodes
    per_node = max((gpu_count(ps.requests, gpu_resource) for ps in trainers), default=0)
    total = sum(gpu_count(ps.requests, gpu_resource) * pods(ps) for ps in effective.pod_sets)
    return JobShape(nodes=nodes, gpus_per_node=per_node, total_gpus=total)


def images(spec: dict[str, Any], jobs: Iterable[str]) -> Iterable[tuple[str, str, str, str | None]]:
    """(replicatedJob, kind, container, image) for every container and initContainer of the named replicatedJobs."""
    wanted = set(jobs)
    for rjob in replicated_jobs(spec):
        if rjob.get("name") not in wanted:
            continue
        for kind, containers in (("initContainers", rjob.containers(init=True)), ("containers", rjob.containers())):
            for c in containers:
                yield rjob.name, kind, c.name, c.image
