"""Policy limits: max nodes, GPUs per node, total GPUs, allowed runtimes, image prefixes, required requests.

Each violation names the field the user can change, the value found, the limit and the policy that set it. The
caller decides what a violation does: a denial under ``mode: Enforce``, an admission warning under ``Audit``.

What is measured is the job the reconciler will build (runtime template + runtimePatches + trainer overrides), and
every part of it, because a namespace user can write the runtime too (a TrainingRuntime of their own, issue 10):

* ``allowedImagePrefixes``: EVERY container and initContainer of EVERY replicatedJob (initializers and any extra
  job of the runtime included), not only the trainer's;
* ``maxGpusPerNode``: the GPUs of one pod of ANY replicatedJob (a GPU-hungry side job is no way around it);
  ``maxTotalGpus``: all pods of all jobs; ``maxNodes``: the training nodes (trainer pods holding GPUs);
* ``allowedRuntimes``: kind AND name (``runtime_ref.allowed_runtime_entry``: a plain name means the
  ClusterTrainingRuntime of that name only, ``TrainingRuntime/<name>`` must be listed as such);
* ``requiredResourceRequests``: the trainer pods, as the API documents ("every trainer node");
* ``podSecurity: Baseline``: every pod template (``pod_security``).

Limits are measured on CREATE; on UPDATE only violations the update introduces are refused (``updates``), so a
policy tightened later does not block status-like updates (Kueue's unsuspend, a finalizer removal) of jobs
admitted before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainguard.webhook.api.views import TrainJob, Trainer, replicated_jobs
from trainguard.webhook.field import FieldError, invalid, required
from trainguard.webhook.policy.pod_security import BASELINE, baseline_errors
from trainguard.webhook.policy.policy_model import Policy
from trainguard.webhook.policy.runtime_ref import allowed_runtime_entry, runtime_ref
from trainguard.webhook.policy.shape import gpu_count, images, job_shape, quantity, trainer_pod_sets


@dataclass(frozen=True)
class Violation:
    policy: Policy
    error: FieldError

    def warning(self) -> str:
        return f'{self.error} (TrainJobPolicy "{self.policy.name}" is in Audit mode: allowed)'


def _trainer(trainjob: dict[str, Any]) -> Trainer:
    return TrainJob(trainjob).trainer


def _of(policy: Policy) -> str:
    return f'TrainJobPolicy "{policy.name}"'


def _allowed_runtime_error(trainjob: dict[str, Any], policy: Policy) -> FieldError | None:
    allowed = [e for e in (allowed_runtime_entry(x) for x in policy.spec.limits.allowed_runtimes) if e is not None]
    ref = runtime_ref(trainjob)
    if (ref.kind, ref.name) in allowed:
        return None
    shown = ", ".join(f"{k}/{n}" for k, n in allowed) or "none"
    detail = f'{ref.kind} "{ref.name}" is not allowed by {_of(policy)}; allowed: {shown}'
    if any(n == ref.name for _, n in allowed):  # the name is allowed, as another kind: a shadowing runtime
        return invalid("spec.runtimeRef.kind", ref.kind, detail)
    return invalid("spec.runtimeRef.name", ref.name, detail)


def gpu_resource(policy: Policy) -> str:
    """The GPU resource a policy counts (its topology's, else ``nvidia.com/gpu``)."""
    return policy.spec.topology.gpu_resource_name if policy.spec.topology else "nvidia.com/gpu"


def _from_runtime(trainjob: dict[str, Any], fix: str) -> str:
    """What a user who never wrote the value reads: where it comes from, and what they can change."""
    ref = runtime_ref(trainjob)
    owner = "an admin's runtime" if ref.is_cluster_training_runtime else "a runtime of this namespace"
    return f'; the value comes from {ref.kind} "{ref.name}" ({owner}), not from your TrainJob: {fix}'


def limit_violations(trainjob: dict[str, Any], effective: Any, policy: Policy) -> list[Violation]:
    limits = policy.spec.limits
    gpu = gpu_resource(policy)
    shape = job_shape(effective, gpu)
    trainer = _trainer(trainjob)
    runtime_name = runtime_ref(trainjob).name
    found: list[FieldError] = []

    if limits.allowed_runtimes:
        error = _allowed_runtime_error(trainjob, policy)
        if error is not None:
            found.append(error)

    if limits.max_nodes is not None and shape.nodes > limits.max_nodes:
        path = "spec.trainer.numNodes" if trainer.num_nodes is not None else "spec.runtimeRef"
        detail = f"{shape.nodes} nodes exceed maxNodes {limits.max_nodes} of {_of(policy)}"
        if path == "spec.runtimeRef":
            detail += _from_runtime(trainjob, f"set spec.trainer.numNodes to at most {limits.max_nodes}")
        found.append(invalid(path, shape.nodes if path.endswith("numNodes") else runtime_name, detail))

    resources_path = "spec.trainer.resourcesPerNode" if trainer.resources_per_node is not None else "spec.runtimeRef"
    if limits.max_gpus_per_node is not None and shape.gpus_per_node > limits.max_gpus_per_node:
        detail = f"{shape.gpus_per_node} {gpu} per node exceed maxGpusPerNode {limits.max_gpus_per_node} of {_of(policy)}"
        if resources_path == "spec.runtimeRef":
            detail += _from_runtime(trainjob, f"set spec.trainer.resourcesPerNode limits of {gpu} to at most "
                                              f"{limits.max_gpus_per_node}")
        found.append(invalid(
            resources_path, shape.gpus_per_node if resources_path != "spec.runtimeRef" else runtime_name, detail))

    if limits.max_gpus_per_node is not None:
        trainers = set(effective.trainer_jobs)
        for ps in effective.pod_sets:
            per_pod = gpu_count(ps.requests, gpu)
            if ps.name in trainers or per_pod <= limits.max_gpus_per_node:
                continue
            found.append(invalid(
                "spec.runtimeRef", runtime_name,
                f"pods of replicatedJob {ps.name} request {per_pod} {gpu} each, more than maxGpusPerNode "
                f"{limits.max_gpus_per_node} of {_of(policy)}"
                + _from_runtime(trainjob, "a TrainJob cannot change that replicated job: use another runtime, or ask "
                                          "the runtime's owner to change it"),
            ))

    if limits.max_total_gpus is not None and shape.total_gpus > limits.max_total_gpus:
        found.append(invalid(
            "spec.trainer", {"numNodes": shape.nodes, "gpusPerNode": shape.gpus_per_node},
            f"the job requests {shape.total_gpus} {gpu} in total ({shape.nodes} nodes x {shape.gpus_per_node}"
            f"{'' if shape.total_gpus == shape.nodes * shape.gpus_per_node else ' plus other replicated jobs'}), "
            f"more than maxTotalGpus {limits.max_total_gpus} of {_of(policy)}",
        ))

    if limits.allowed_image_prefixes:
        every_job = [rj.get("name") for rj in replicated_jobs(effective.spec)]
        for job, kind, container, image in images(effective.spec, every_job):
            if image is not None and any(image.startswith(p) for p in limits.allowed_image_prefixes):
                continue
            trainer_container = job in effective.trainer_jobs and container == "node"
            path = "spec.trainer.image" if trainer_container and trainer.image is not None else "spec.runtimeRef"
            detail = (f"image of {kind[:-1]} {container!s} in replicatedJob {job!s} must start with one of "
                      f"[{', '.join(limits.allowed_image_prefixes)}] ({_of(policy)})")
            if path == "spec.runtimeRef":
                detail += _from_runtime(trainjob, "set spec.trainer.image to an allowed image" if trainer_container
                                        else "a TrainJob cannot change that container's image: use another runtime, "
                                             "or ask the runtime's owner to change it")
            found.append(invalid(path, image, detail))

    if limits.pod_security == BASELINE:
        found += baseline_errors(dict(effective.spec), _of(policy))

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
