"""What a pod asks the scheduler for, read from a (merged) pod spec.

Two readings live here because two different consumers need them:

* ``pod_requests``: the effective requests of one pod (``PodSet.requests``), used for PodGroup ``minResources``
  and the policy engine's limits. Like Kubernetes' ``PodRequests``: the sum over containers (plus restartable
  init containers, i.e. sidecars), raised to the largest regular init container. Deliberately unlike upstream
  Trainer, a container that sets only a limit counts its limit as its request, because that is what the API
  server defaults the real pod to and what the scheduler will reserve (upstream ignores limit-only GPUs when
  sizing PodGroups, issues #2980/#2549).
* ``gpu_count`` / ``cpu_count``: the counts the framework plugins derive process numbers from, with upstream's
  rules: a GPU is the first resource whose name contains "gpu" (case-insensitive), requests preferred over
  limits, whole units rounded up; CPU is the request if non-zero else the limit, rounded up.
"""

from __future__ import annotations

from typing import Any, Mapping

from trainguard.webhook.api.quantity import Quantity, ResourceList, parse_resource_list, sum_resources


def container_requests(container: Mapping[str, Any]) -> ResourceList:
    """Requests of one container, with limits standing in for missing requests (API-server defaulting)."""
    resources = container.get("resources") or {}
    requests = parse_resource_list(resources.get("requests"))
    for name, limit in parse_resource_list(resources.get("limits")).items():
        requests.setdefault(name, limit)
    return requests


def pod_requests(pod_spec: Mapping[str, Any]) -> ResourceList:
    """Effective requests of one pod: max(Σ containers + Σ sidecars, each regular init container + sidecars before it)."""
    running = sum_resources(container_requests(c) for c in pod_spec.get("containers") or [])
    sidecars: ResourceList = {}
    peak_init: ResourceList = {}
    for init in pod_spec.get("initContainers") or []:
        reqs = container_requests(init)
        if init.get("restartPolicy") == "Always":
            sidecars = sum_resources([sidecars, reqs])
            continue
        # A regular init container runs alongside the sidecars started before it.
        peak_init = _max_resources(peak_init, sum_resources([reqs, sidecars]))
    total = sum_resources([running, sidecars])
    return _max_resources(total, peak_init)


def _max_resources(a: Mapping[str, Quantity], b: Mapping[str, Quantity]) -> ResourceList:
    out = dict(a)
    for name, q in b.items():
        if name not in out or out[name] < q:
            out[name] = q
    return out


def is_gpu_resource(name: str) -> bool:
    return "gpu" in name.lower()


def gpu_count(resources: Mapping[str, Any] | None) -> int:
    """GPUs in a ResourceRequirements dict (upstream ``GetNumGPUPerNode``): requests first, then limits."""
    resources = resources or {}
    for key in ("requests", "limits"):
        for name, value in parse_resource_list(resources.get(key)).items():
            if is_gpu_resource(name):
                return value.value()
    return 0


def gpus_of(requests: Mapping[str, Quantity]) -> int:
    """GPUs in an already-effective resource list (first GPU-named resource)."""
    for name, value in requests.items():
        if is_gpu_resource(name):
            return value.value()
    return 0


def cpu_count(resources: Mapping[str, Any] | None) -> int:
    """Whole CPUs for process counts: request if non-zero else limit, rounded up, at least 1 (3.7 -> 4, none -> 1)."""
    resources = resources or {}
    for key in ("requests", "limits"):
        cpu = parse_resource_list(resources.get(key)).get("cpu")
        if cpu is not None and not cpu.is_zero():
            return max(1, cpu.value())
    return 1
