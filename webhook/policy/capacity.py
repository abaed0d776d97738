"""Capacity at the door: a TrainJob that its Kueue ClusterQueue could never admit is refused (or warned) at apply.

Kueue admits a job only when each of its pod sets fits one flavor of the ClusterQueue, within that flavor's
``nominalQuota`` plus what it may borrow from its cohort (``borrowingLimit``). A job asking for more sits
suspended forever with the reason in its Workload. This check says so at ``kubectl apply``, with the numbers:

* the job's queue is its ``kueue.x-k8s.io/queue-name`` label (as the policies set it); the LocalQueue names the
  ClusterQueue (the webhook's cache of Kueue's queues, ``ClusterSnapshot.kueue_local_queues`` / ``kueue_quotas``);
* the check belongs to the matching policies that set the Kueue queue (``scheduling.kueue.queueName``): the first
  enforcing one denies (reason ``QueueCapacity``), else the first one warns; with no such policy nothing is checked;
* GPUs are counted under the policy's GPU resource name, on the effective job (runtime template and overrides
  merged): each pod set's GPUs (pods x GPUs per pod) must fit the largest flavor, and the whole job the sum of the
  flavors;
* it never refuses a job Kueue might admit: a flavor whose ClusterQueue is in a cohort and sets no
  ``borrowingLimit`` may borrow without a known bound, so then nothing is checked; an unknown LocalQueue or
  ClusterQueue is Kueue's to report. A ClusterQueue that covers no such resource holds none of it.

Pure: the queues come in the snapshot, the job as the effective job the other policy checks read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from trainguard.webhook.api.quantity import parse_quantity
from trainguard.webhook.api.views import TrainJob
from trainguard.webhook.field import invalid
from trainguard.webhook.policy.defaults import KUEUE_QUEUE_LABEL
from trainguard.webhook.policy.limits import Violation, gpu_resource
from trainguard.webhook.policy.policy_model import Policy
from trainguard.webhook.policy.shape import gpu_count

QUEUE_CAPACITY = "QueueCapacity"


@dataclass(frozen=True)
class Queues:
    """What the check reads of Kueue: (namespace, LocalQueue) -> ClusterQueue, and each ClusterQueue's quotas."""

    local_queues: Mapping[tuple[str, str], str]
    quotas: Mapping[str, Mapping[str, Any]]


@dataclass(frozen=True)
class FlavorCapacity:
    flavor: str
    nominal: int
    borrowing: int

    @property
    def most(self) -> int:
        return self.nominal + self.borrowing


def _whole(value: Any) -> int | None:
    """A quota quantity in whole units (rounded down: a fraction of a GPU holds no GPU); None when unreadable."""
    try:
        return math.floor(parse_quantity(value).amount)
    except (TypeError, ValueError):
        return None


def flavor_capacities(quota: Mapping[str, Any], resource: str) -> list[FlavorCapacity] | None:
    """Each flavor's most of ``resource``; None when some flavor's bound is unknown (borrowing unbounded in a
    cohort, or a quantity that does not parse)."""
    cohort = quota.get("cohort")
    out: list[FlavorCapacity] = []
    for flavor, resources in (quota.get("flavors") or {}).items():
        if resource not in resources:
            continue
        nominal_raw, borrowing_raw = resources[resource]
        nominal = _whole(nominal_raw)
        if nominal is None:
            return None
        if cohort is None:
            borrowing = 0  # Kueue refuses a borrowingLimit without a cohort
        elif borrowing_raw is None:
            return None
        else:
            borrowing = _whole(borrowing_raw)
            if borrowing is None:
                return None
        out.append(FlavorCapacity(flavor, nominal, borrowing))
    return out


def queues_of(snapshot: Any) -> Queues:
    """The check's view of a ``ClusterSnapshot``."""
    return Queues(snapshot.kueue_local_queues, snapshot.kueue_quotas)


def _queue_setters(matched: Iterable[Policy]) -> list[Policy]:
    return [p for p in matched if p.spec.scheduling.kueue and p.spec.scheduling.kueue.queue_name]


def capacity_violations(obj: dict[str, Any], effective: Any, matched: list[Policy], namespace: str,
                        queues: Queues | None) -> list[Violation]:
    """At most one violation: the job's GPUs exceed what its ClusterQueue could ever admit."""
    setters = _queue_setters(matched)
    if queues is None or effective is None or not setters:
        return []
    owner = next((p for p in setters if p.enforcing), setters[0])
    job = TrainJob(obj)
    queue = job.metadata.labels.get(KUEUE_QUEUE_LABEL)
    cluster_queue = queues.local_queues.get((namespace, queue)) if isinstance(queue, str) else None
    quota = queues.quotas.get(cluster_queue) if cluster_queue else None
    if quota is None:
        return []
    resource = gpu_resource(owner)
    flavors = flavor_capacities(quota, resource)
    if flavors is None:
        return []
    per_set = {ps.name: gpu_count(ps.requests, resource) * ps.pods for ps in effective.pod_sets}
    total = sum(per_set.values())
    if total == 0:
        return []
    largest = max(flavors, key=lambda f: f.most, default=None)
    widest_set, widest = max(per_set.items(), key=lambda kv: kv[1])
    holds = sum(f.most for f in flavors)
    where = f'ClusterQueue "{cluster_queue}" (LocalQueue "{queue}")'
    if largest is None:
        reason = f"{where} has no quota for {resource}"
    elif widest > largest.most:
        reason = (f'replicated job "{widest_set}" needs {widest} {resource} in one flavor, and the largest flavor of '
                  f'{where} holds {largest.most} ("{largest.flavor}": nominal {largest.nominal} + borrowing '
                  f"{largest.borrowing})")
    elif total > holds:
        reason = f"the job needs {total} {resource}, and {where} holds {holds} in all its flavors"
    else:
        return []
    return [Violation(owner, invalid(
        "spec.trainer", {"numNodes": job.trainer.num_nodes, resource: total},
        f"Kueue can never admit this job: {reason}; ask for fewer nodes or GPUs per node, or another queue "
        f'(TrainJobPolicy "{owner.name}" puts the job in this queue)'))]
