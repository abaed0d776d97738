"""The numbers policy reasons about, read off the runtime framework's effective job.

GPUs come from the MERGED view (runtime template ⊕ runtimePatches ⊕ ``resourcesPerNode`` merged per resource),
which is what the reconciler builds; upstream derives them from the raw override (open bug #3974). GPUs are
counted under the policy's GPU resource name (default ``nvidia.com/gpu``), so a cluster with several GPU
resource names counts only the one the policy constrains.
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any, Iterable

from webhook.policy.topology import JobShape


def gpu_count(requests: dict[str, Any], resource: str) -> int:
    value = requests.get(resource)
    if value is None:
        return 0
    return math.ceil(Decimal(str(value)))  # Quantity.Value() rounds up


def trainer_pod_sets(effective: Any) -> list[Any]:
    names = set(effective.trainer_jobs)
    return [ps for ps in effective.pod_sets if ps.name in names]


def job_shape(effective: Any, gpu_resource: str) -> JobShape:
    """Trainer pods, GPUs per trainer pod (the largest, if trainer pod sets differ) and GPUs of the whole job."""
    trainers = trainer_pod_sets(effective)
    nodes = sum(ps.count for ps in trainers) if trainers else effective.num_nodes
    per_node = max((gpu_count(ps.requests, gpu_resource) for ps in trainers), default=0)
    total = sum(gpu_count(ps.requests, gpu_resource) * ps.count for ps in effective.pod_sets)
    return JobShape(nodes=nodes, gpus_per_node=per_node, total_gpus=total)


def images(spec: dict[str, Any], jobs: Iterable[str]) -> Iterable[tuple[str, str, str, str | None]]:
    """(replicatedJob, kind, container, image) for every container and initContainer of the named replicatedJobs."""
    wanted = set(jobs)
    for rjob in spec.get("replicatedJobs") or []:
        if rjob.get("name") not in wanted:
            continue
        pod = (((rjob.get("template") or {}).get("spec") or {}).get("template") or {}).get("spec") or {}
        for kind in ("initContainers", "containers"):
            for c in pod.get(kind) or []:
                yield rjob.get("name", ""), kind, c.get("name", ""), c.get("image")
