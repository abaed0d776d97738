"""A TrainJob the controller blocks gives its Kueue quota back, through Kueue's own API (pure decisions).

Kueue v0.17 documents ``spec.active`` on a Workload: ``false`` "indicates that a workload should never be admitted
and evicts running workloads". Its workload controller (``pkg/controller/core/workload_controller.go``) evicts an
inactive Workload with reason ``Deactivated``, which releases its quota (the ClusterQueue's ``flavorsReservation`` and
``flavorsUsage``), and its TrainJob integration then suspends the TrainJob and clears its ``kueue.x-k8s.io/manager``
runtimePatch itself; the next waiting workload is admitted in its place. Suspending the TrainJob ourselves would fight
Kueue: its job reconciler unsuspends a suspended job whose Workload is admitted.

So the Workloads (not finished) of a Blocked TrainJob are deactivated, whether Kueue has admitted them yet or not: a
blocked job must neither hold quota nor compete for it (or preempt a compliant job to get it). The patch marks the
Workload with ``trainguard.io/deactivated-by-policy``. Reactivation is automatic and only undoes what the controller
did: once the policies allow the job (a policy or Namespace change re-checks it), a Workload carrying the annotation
gets ``spec.active: true`` back and loses the annotation; Kueue requeues it (``Requeued``, reason ``Reactivated``) and
admits it when quota allows. A Workload someone else deactivated (no annotation) is left as it is, and one
reactivated by hand while its job is still blocked is deactivated again.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Protocol

from trainguard.webhook.api.constants import TRAINER_GROUP, TRAINJOB_KIND
from trainguard.webhook.api.views import Condition, Workload, find_condition
from trainguard.webhook.kube.informer import strip_managed_fields

DEACTIVATED_ANNOTATION = "trainguard.io/deactivated-by-policy"
# The Normal events on the TrainJob when its Workload's spec.active is changed.
REASON_DEACTIVATED = "WorkloadDeactivated"
REASON_REACTIVATED = "WorkloadReactivated"
# Kueue labels every Workload it creates for a job with the job's UID (pkg/controller/constants).
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"

Object = dict[str, Any]


# Kueue's reason for not admitting a Workload: its QuotaReserved=False message, e.g. "couldn't assign flavors to pod
# set node: insufficient quota for nvidia.com/gpu in flavor h100, request > maximum capacity (64 > 48)".
QUOTA_RESERVED = "QuotaReserved"
# A Kueue message is a sentence or a few; cut there so a cached Workload stays small whatever Kueue writes.
MAX_PENDING_MESSAGE = 1024


def workload_view(obj: Object) -> Object:
    """What the controller caches of a Workload: identity, labels, annotations, owners, ``spec.active``, the
    condition types, and QuotaReserved's reason and message (the pod sets, often most of the object, are never
    read)."""
    view = Workload(strip_managed_fields(obj))
    kept = view.metadata.only(("name", "namespace", "uid", "resourceVersion", "labels", "annotations",
                               "ownerReferences"))
    conditions: list[Object] = []
    for c in map(Condition, view.conditions):
        if not isinstance(c.raw, dict):
            continue
        entry: Object = {"type": c.type, "status": c.status}
        if c.type == QUOTA_RESERVED:
            entry.update(reason=c.reason, message=str(c.message or "")[:MAX_PENDING_MESSAGE])
        conditions.append(entry)
    return {"metadata": kept, "spec": {"active": view.active}, "status": {"conditions": conditions}}


def pending_message(workloads: Iterable[Mapping[str, Any]]) -> str | None:
    """Why Kueue holds the job: the QuotaReserved=False message of its first active, unfinished Workload (quota,
    topology, an inadmissible queue), as Kueue wrote it; None when Kueue says nothing (or has reserved quota)."""
    for wl in workloads:
        view = Workload(wl)
        if is_finished(wl) or not view.active:
            continue
        reserved = find_condition(view.conditions, QUOTA_RESERVED)
        if reserved is not None and reserved.status == "False" and reserved.message:
            return f"Kueue has not admitted its Workload {view.metadata.name} ({reserved.reason}): {reserved.message}"
    return None


def is_finished(workload: Mapping[str, Any]) -> bool:
    found = find_condition(Workload(workload).conditions, "Finished")
    return found is not None and found.is_true


def activation_patches(workloads: Iterable[Mapping[str, Any]], blocked: bool) -> list[tuple[str, Object]]:
    """(Workload name, JSON merge patch) for each of a TrainJob's Workloads whose ``spec.active`` must change."""
    out: list[tuple[str, Object]] = []
    for wl in workloads:
        view = Workload(wl)
        if is_finished(wl):
            continue
        ours = DEACTIVATED_ANNOTATION in view.metadata.annotations
        if blocked and view.active:
            out.append((view.metadata.name, {"metadata": {"annotations": {DEACTIVATED_ANNOTATION: "true"}},
                                             "spec": {"active": False}}))
        elif not blocked and ours:
            out.append((view.metadata.name, {"metadata": {"annotations": {DEACTIVATED_ANNOTATION: None}},
                                             "spec": {"active": True}}))
    return out


def _controlled_by_trainjob(owners: list[Mapping[str, Any]], uid: str) -> bool:
    return any(ref.get("controller") and ref.get("uid") == uid and ref.get("kind") == TRAINJOB_KIND
               and str(ref.get("apiVersion", "")).split("/")[0] == TRAINER_GROUP for ref in owners)


class Cache(Protocol):
    def get(self, name: str, namespace: str = "") -> Object | None: ...


class WorkloadIndex:
    """TrainJob UID -> its Workloads (Kueue's ``kueue.x-k8s.io/job-uid`` label and a controlling ownerReference to
    that TrainJob, both as Kueue writes them), fed by the Workload cache's events; lookups go back to the cache, so a
    key whose DELETED was missed just reads as absent."""

    def __init__(self, cache: Cache) -> None:
        self._cache = cache
        self._by_uid: dict[str, set[tuple[str, str]]] = {}
        self._uid_of: dict[tuple[str, str], str] = {}

    def update(self, event_type: str, workload: Mapping[str, Any]) -> None:
        meta = Workload(workload).metadata
        key = (meta.namespace, meta.name)
        old = self._uid_of.pop(key, None)
        if old is not None:
            keys = self._by_uid.get(old)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._by_uid[old]
        uid = meta.labels.get(JOB_UID_LABEL)
        if event_type != "DELETED" and uid and _controlled_by_trainjob(meta.owner_references, uid):
            self._uid_of[key] = uid
            self._by_uid.setdefault(uid, set()).add(key)

    def of(self, job_uid: str) -> list[Object]:
        found = []
        for namespace, name in sorted(self._by_uid.get(job_uid, ())):
            wl = self._cache.get(name, namespace)
            if wl is not None:
                found.append(wl)
        return found
