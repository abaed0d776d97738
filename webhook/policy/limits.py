"""Policy limits: max nodes, GPUs per node, total GPUs, allowed runtimes, image prefixes, required requests.

Each violation names the field the user can change, the value found, the limit and the policy that set it. The
caller decides what a violation does: a denial under ``mode: Enforce``, an admission warning under ``Audit``.
Images and required requests concern the trainer replicatedJobs' pods (the API documents the limits as "the
trainer image" and "every trainer node"): initializer images come from the runtime, which the platform team owns.
Limits are checked on CREATE only: the TrainJob's trainer and runtimeRef are immutable, so an UPDATE cannot change
what a limit measures, and a policy tightened later must not block status-like updates (Kueue's unsuspend, a
finalizer removal) of jobs admitted before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from webhook.field import FieldError, invalid, required
from webhook.policy.policy_model import Policy
from webhook.policy.shape import images, job_shape, quantity, trainer_pod_sets


@dataclass(frozen=True)
class Violation:
    policy: Policy
    error: FieldError

    def warning(self) -> str:
        return f'{self.error} (TrainJobPolicy "{self.policy.name}" is in Audit mode: allowed)'


def _trainer(trainjob: dict[str, Any]) -> dict[str, Any]:
    return (trainjob.get("spec") or {}).get("trainer") or {}


def _of(policy: Policy) -> str:
    return f'TrainJobPolicy "{policy.name}"'


def limit_violations(trainjob: dict[str, Any], runtime_name: str, effective: Any, policy: Policy) -> list[Violation]:
    limits = policy.spec.limits
    gpu = policy.spec.topology.gpu_resource_name if policy.spec.topology else "nvidia.com/gpu"
    shape = job_shape(effective, gpu)
    trainer = _trainer(trainjob)
    found: list[FieldError] = []

    if limits.allowed_runtimes and runtime_name not in limits.allowed_runtimes:
        found.append(invalid("spec.runtimeRef.name", runtime_name,
                             f"runtime is not allowed by {_of(policy)}; allowed: {', '.join(limits.allowed_runtimes)}"))

    if limits.max_nodes is not None and shape.nodes > limits.max_nodes:
        path = "spec.trainer.numNodes" if trainer.get("numNodes") is not None else "spec.runtimeRef"
        found.append(invalid(path, shape.nodes if path.endswith("numNodes") else runtime_name,
                             f"{shape.nodes} nodes exceed maxNodes {limits.max_nodes} of {_of(policy)}"))

    resources_path = "spec.trainer.resourcesPerNode" if trainer.get("resourcesPerNode") is not None else "spec.runtimeRef"
    if limits.max_gpus_per_node is not None and shape.gpus_per_node > limits.max_gpus_per_node:
        found.append(invalid(
            resources_path, shape.gpus_per_node if resources_path != "spec.runtimeRef" else runtime_name,
            f"{shape.gpus_per_node} {gpu} per node exceed maxGpusPerNode {limits.max_gpus_per_node} of {_of(policy)}",
        ))

    if limits.max_total_gpus is not None and shape.total_gpus > limits.max_total_gpus:
        found.append(invalid(
            "spec.trainer", {"numNodes": shape.nodes, "gpusPerNode": shape.gpus_per_node},
            f"the job requests {shape.total_gpus} {gpu} in total ({shape.nodes} nodes x {shape.gpus_per_node}"
            f"{'' if shape.total_gpus == shape.nodes * shape.gpus_per_node else ' plus other replicated jobs'}), "
            f"more than maxTotalGpus {limits.max_total_gpus} of {_of(policy)}",
        ))

    if limits.allowed_image_prefixes:
        for job, kind, container, image in images(effective.spec, effective.trainer_jobs):
            if image is not None and any(image.startswith(p) for p in limits.allowed_image_prefixes):
                continue
            trainer_image = trainer.get("image") is not None and job in effective.trainer_jobs and container == "node"
            path = "spec.trainer.image" if trainer_image else "spec.runtimeRef"
            found.append(invalid(
                path, image,
                f"image of {kind[:-1]} {container!s} in replicatedJob {job!s} must start with one of "
                f"[{', '.join(limits.allowed_image_prefixes)}] ({_of(policy)})",
            ))

    for resource in limits.required_requests:
        for ps in trainer_pod_sets(effective):
            value = ps.requests.get(resource)
            if value is not None and not quantity(value).is_zero():
                continue
            found.append(required(
                "spec.trainer.resourcesPerNode.requests",
                f"trainer pods of replicatedJob {ps.name} must request {resource} ({_of(policy)} requires it; "
                "set it here or in the runtime)",
            ))
    return [Violation(policy, e) for e in found]
