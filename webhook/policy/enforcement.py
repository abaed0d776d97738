"""What the matching TrainJobPolicies find wrong with a TrainJob as it stands: one implementation for the validating
webhook and the controller's defence-in-depth check (``pipeline.enforce_trainjob``).

Every finding is a ``Violation`` (the policy that raised it plus a field error in the upstream format) under a
reason: ``PolicyLimits`` (``limits``), ``Topology`` (the job fits no level of the policy that decides topology),
``QueueCapacity`` (its Kueue ClusterQueue could never admit it: ``capacity``),
``PolicyScheduling`` (a scheduling label a matching policy sets is missing, or a scheduling value it pins is
not one it allows: ``pinning``). The caller decides what a finding does: a denial under ``mode: Enforce``, a
warning under ``Audit``.

A job the runtime framework cannot build cannot be measured either. The webhook denies it earlier with upstream's
message; if it ever reaches this point (the controller's runtime snapshot, a framework change) a policy that limits
anything refuses it instead of waving it through unmeasured (fail closed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from trainguard.webhook.api.views import TrainJob
from trainguard.webhook.field import invalid, required
from trainguard.webhook.policy import framework
from trainguard.webhook.policy.capacity import QUEUE_CAPACITY, Queues, capacity_violations
from trainguard.webhook.policy.defaults import KAI_QUEUE_LABEL, KUEUE_PRIORITY_LABEL, KUEUE_QUEUE_LABEL, topology_outcome
from trainguard.webhook.policy.limits import Violation, limit_violations
from trainguard.webhook.policy.pinning import pin_violations
from trainguard.webhook.policy.policy_model import Policy
from trainguard.webhook.policy.runtime_ref import runtime_ref
from trainguard.webhook.policy.topology import NoFit

POLICY_LIMITS = "PolicyLimits"
TOPOLOGY = "Topology"
SCHEDULING = "PolicyScheduling"

# Scheduling labels a policy sets on the TrainJob: (label, picker of the policy's value).
SCHEDULING_LABELS: tuple[tuple[str, Any], ...] = (
    (KUEUE_QUEUE_LABEL, lambda p: p.spec.scheduling.kueue.queue_name if p.spec.scheduling.kueue else None),
    (KUEUE_PRIORITY_LABEL, lambda p: p.spec.scheduling.kueue.priority_class if p.spec.scheduling.kueue else None),
    (KAI_QUEUE_LABEL, lambda p: p.spec.scheduling.kai_queue),
)


@dataclass(frozen=True)
class Finding:
    reason: str
    violation: Violation

    @property
    def enforced(self) -> bool:
        return self.violation.policy.enforcing


def label_path(key: str) -> str:
    return f"metadata.labels[{key}]"


def _labels(obj: dict[str, Any]) -> Mapping[str, Any]:
    return TrainJob(obj).metadata.labels


def _nodes(obj: dict[str, Any]) -> Any:
    return TrainJob(obj).trainer.num_nodes


def _limits_anything(policy: Policy) -> bool:
    lim = policy.spec.limits
    return bool(lim.max_nodes is not None or lim.max_gpus_per_node is not None or lim.max_total_gpus is not None
                or lim.allowed_runtimes or lim.allowed_image_prefixes or lim.required_requests or lim.pod_security
                or (policy.spec.topology and policy.spec.topology.levels))


def scheduling_findings(obj: dict[str, Any], runtime: dict[str, Any], matched: Iterable[Policy],
                        effective: Any = None) -> list[Finding]:
    """A label a matching policy sets must be on the TrainJob, and every scheduling value the job runs with must
    be one the pinning policy allows (``pinning``; see ``updates`` for what an UPDATE may change). ``effective``:
    the built job (or None), read when a pinned scheduler's annotation is missing."""
    labels = _labels(obj)
    found: list[Finding] = []
    ordered = list(matched)
    for key, pick in SCHEDULING_LABELS:
        if labels.get(key):
            continue
        setters = [p for p in ordered if pick(p)]
        if not setters:
            continue
        owner = next((p for p in setters if p.enforcing), setters[0])
        found.append(Finding(SCHEDULING, Violation(owner, required(
            label_path(key), f'TrainJobPolicy "{owner.name}" schedules this job through {pick(owner)!r}; '
            "the label cannot be left out"))))
    found += [Finding(SCHEDULING, v) for v in pin_violations(obj, runtime, ordered, lambda: effective)]
    return found


UNSET: Any = object()  # "not computed by the caller" (None is a valid effective job: unbuildable)


def findings(obj: dict[str, Any], runtime: dict[str, Any], matched: list[Policy], *,
             scheduling: bool = True, effective: Any = UNSET, queues: Queues | None = None,
             namespace: str = "") -> list[Finding]:
    """Every policy finding for ``obj`` built from ``runtime``: limits of every matching policy, the topology fit of
    the policy that decides topology, (with ``queues``, Kueue's queues in ``namespace``) whether its ClusterQueue
    could ever admit it, and (with ``scheduling``) the scheduling labels and pinned values.
    ``effective``: the caller's ``framework.effective_job_or_none(obj, runtime)`` when it already has it (building
    the job is the costly part of a review), otherwise computed here."""
    if not matched:
        return []
    out: list[Finding] = []
    if effective is UNSET:
        effective = framework.effective_job_or_none(obj, runtime)
    if effective is None:
        for policy in matched:
            if _limits_anything(policy):
                out.append(Finding(POLICY_LIMITS, Violation(policy, invalid(
                    "spec.runtimeRef", runtime_ref(obj).as_dict(),
                    f'the job cannot be built from this runtime, so the limits of TrainJobPolicy "{policy.name}" '
                    "cannot be checked"))))
    else:
        for policy in matched:
            out += [Finding(POLICY_LIMITS, v) for v in limit_violations(obj, effective, policy)]
        outcome = topology_outcome(effective, matched)
        if outcome is not None and isinstance(outcome.result, NoFit):
            out.append(Finding(TOPOLOGY, Violation(outcome.policy, invalid(
                "spec.trainer", {"numNodes": _nodes(obj)},
                f'fits no topology level of TrainJobPolicy "{outcome.policy.name}": {outcome.result.reason}'))))
        out += [Finding(QUEUE_CAPACITY, v) for v in capacity_violations(obj, effective, matched, namespace, queues)]
    if scheduling:
        out += scheduling_findings(obj, runtime, matched, effective)
    return out
