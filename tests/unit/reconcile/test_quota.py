"""A blocked TrainJob gives its Kueue quota back (``trainguard.controller.reconcile.quota``): the pure decisions, the
Workload index, and the reconcile step with fake caches and a recording fake API (the real policy pipeline)."""

from __future__ import annotations

import pytest

from trainguard.controller.reconcile import quota
from trainguard.controller.reconcile import status as st
from trainguard.webhook.kube.errors import ApiError, NotFound

from tests.unit.reconcile.test_enforcement import MAX_ONE_NODE, policy, snapshot_with, state_label
from tests.unit.reconcile.test_trainjob import Store, reconciler, runtime, trainjob

OWNER = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "job", "uid": "uid-1",
         "controller": True}
OURS = {quota.DEACTIVATED_ANNOTATION: "true"}


def workload(name: str = "trainjob-job-1a2b3", *, active: bool | None = True, annotations: dict | None = None,
             conditions: list | None = None, uid: str = "uid-1", owners: list | None = None) -> dict:
    wl = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
          "metadata": {"name": name, "namespace": "ns", "uid": f"wl-{name}", "resourceVersion": "3",
                       "labels": {quota.JOB_UID_LABEL: uid}, "annotations": annotations or {},
                       "ownerReferences": [dict(OWNER, uid=uid)] if owners is None else owners,
                       "managedFields": [{"manager": "kueue"}]},
          "spec": {"queueName": "team", "podSets": [{"name": "node", "count": 2, "template": {"spec": {}}}]},
          "status": {"conditions": conditions or []}}
    if active is not None:
        wl["spec"]["active"] = active
    return wl


ADMITTED = [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "x"},
            {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "x"}]
FINISHED = [{"type": "Finished", "status": "True", "reason": "Succeeded", "message": "done"}]


# ---- the decisions ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "wl, blocked, expected",
    [
        (workload(conditions=ADMITTED), True, False),        # admitted: deactivated, Kueue evicts and frees the quota
        (workload(), True, False),                           # pending: it must not compete for quota either
        (workload(active=None), True, False),                # absent spec.active is the CRD default, true
        (workload(active=False, annotations=OURS), True, None),  # done already
        (workload(active=False), True, None),                # someone else deactivated it: not ours to mark
        (workload(conditions=FINISHED), True, None),         # finished: no quota to give back
        (workload(active=False, annotations=OURS), False, True),  # allowed again: ours is reactivated
        (workload(active=False), False, None),               # allowed, but deactivated by someone else: left alone
        (workload(), False, None),                           # allowed and active: nothing to do
    ],
    ids=["admitted", "pending", "default-active", "already-ours", "someone-elses", "finished", "reactivate",
         "not-ours-to-reactivate", "nothing"],
)
def test_which_workloads_change(wl, blocked, expected) -> None:
    patches = quota.activation_patches([wl], blocked)
    if expected is None:
        assert patches == []
        return
    ((name, patch),) = patches
    assert name == wl["metadata"]["name"] and patch["spec"] == {"active": expected}
    assert patch["metadata"]["annotations"] == {quota.DEACTIVATED_ANNOTATION: "true" if expected is False else None}


def test_the_cached_workload_keeps_only_what_is_read() -> None:
    wl = workload(active=False, annotations=OURS, conditions=ADMITTED)
    view = quota.workload_view(wl)
    assert view["spec"] == {"active": False}
    assert view["status"] == {"conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
                                              "message": "x"},
                                             {"type": "Admitted", "status": "True"}]}
    assert "managedFields" not in view["metadata"] and view["metadata"]["annotations"] == OURS
    assert view["metadata"]["labels"] == {quota.JOB_UID_LABEL: "uid-1"}
    # Malformed spec/status (nobody checked this object at our door) read as empty, never raise.
    odd = quota.workload_view({"metadata": {"name": "w", "namespace": "ns"}, "spec": "x", "status": {"conditions": 5}})
    assert odd["spec"] == {"active": True} and odd["status"] == {"conditions": []}
    assert quota.activation_patches([quota.workload_view(workload(conditions=FINISHED))], True) == []


def test_the_index_finds_a_jobs_workloads_by_kueues_label_and_owner() -> None:
    mine, other = workload("wl-a"), workload("wl-b", uid="uid-2")
    forged = workload("wl-forged", owners=[dict(OWNER, uid="uid-9")])  # label says uid-1, owner says otherwise
    unowned = workload("wl-unowned", owners=[])
    cache = Store(mine, other, forged, unowned)
    index = quota.WorkloadIndex(cache)
    for wl in (mine, other, forged, unowned):
        index.update("ADDED", wl)
    assert [w["metadata"]["name"] for w in index.of("uid-1")] == ["wl-a"]
    assert [w["metadata"]["name"] for w in index.of("uid-2")] == ["wl-b"]

    # Relabelled to another job, then deleted: it moves, then goes.
    moved = workload("wl-a", uid="uid-2")
    cache.objs[("ns", "wl-a")] = moved
    index.update("MODIFIED", moved)
    assert index.of("uid-1") == [] and {w["metadata"]["name"] for w in index.of("uid-2")} == {"wl-a", "wl-b"}
    index.update("DELETED", moved)
    assert [w["metadata"]["name"] for w in index.of("uid-2")] == ["wl-b"]
    # A key whose DELETED was missed reads as absent once the cache no longer holds it.
    del cache.objs[("ns", "wl-b")]
    assert index.of("uid-2") == []


# ---- the reconcile step ---------------------------------------------------------------------------------------------
def with_workloads(r, *workloads: dict) -> Store:
    cache = Store(*workloads)
    index = quota.WorkloadIndex(cache)
    for wl in workloads:
        index.update("ADDED", wl)
    r._caches.workloads = index
    return cache


def workload_patches(kube) -> list[tuple[str, dict]]:
    return [(c[2], c[4]) for c in kube.calls if c[0] == "patch" and c[1] == "Workload"]


async def test_a_blocked_job_kueue_admitted_gives_its_quota_back() -> None:
    suspended = {"metadata": {"name": "job", "namespace": "ns"}, "spec": {"suspend": True}}
    r, kube, events = reconciler(trainjob(suspend=False), rt=runtime(), jobsets=[suspended], policies=[MAX_ONE_NODE])
    with_workloads(r, workload(conditions=ADMITTED), workload("old", conditions=FINISHED))
    await r.reconcile("ns", "job")
    assert state_label(kube) == "Blocked"
    assert workload_patches(kube) == [("trainjob-job-1a2b3", {"metadata": {"annotations": OURS},
                                                             "spec": {"active": False}})]
    (note,) = [e for e in events.events if e[1] == "WorkloadDeactivated"]
    assert note[0] == "Normal" and "trainjob-job-1a2b3" in note[2]


async def test_an_allowed_job_gets_the_workload_it_deactivated_back() -> None:
    held = {"conditions": [{"type": "Suspended", "status": "True", "reason": "PolicyDenied", "message": "m",
                            "lastTransitionTime": "2026-01-01T11:00:00Z"}]}
    job = trainjob(suspend=True, status=held, labels={st.STATE_LABEL: "Blocked"})
    r, kube, events = reconciler(job, rt=runtime(), policies=[policy(limits={"maxNodes": 4})])
    with_workloads(r, workload(active=False, annotations=OURS), workload("manual", active=False))
    await r.reconcile("ns", "job")
    assert workload_patches(kube) == [("trainjob-job-1a2b3", {"metadata": {"annotations": {quota.DEACTIVATED_ANNOTATION: None}},
                                                             "spec": {"active": True}})]
    assert [e[1] for e in events.events if e[1].startswith("Workload")] == ["WorkloadReactivated"]
    assert state_label(kube) == "Suspended"


async def test_a_running_job_a_policy_now_denies_keeps_its_workload() -> None:
    running = {"metadata": {"name": "job", "namespace": "ns"}, "spec": {"suspend": False}}
    r, kube, _ = reconciler(trainjob(suspend=False), rt=runtime(), jobsets=[running], policies=[MAX_ONE_NODE])
    with_workloads(r, workload(conditions=ADMITTED))
    await r.reconcile("ns", "job")
    assert workload_patches(kube) == []


async def test_a_workload_kueue_creates_after_the_block_is_deactivated_when_it_appears() -> None:
    r, kube, _ = reconciler(trainjob(suspend=True), rt=runtime(), policies=[MAX_ONE_NODE])
    cache = with_workloads(r)
    await r.reconcile("ns", "job")
    assert workload_patches(kube) == []
    late = workload()
    cache.objs[("ns", late["metadata"]["name"])] = late
    r._caches.workloads.update("ADDED", late)
    await r.reconcile("ns", "job")  # queued by the Workload's event (its controlling owner)
    assert [p["spec"] for _, p in workload_patches(kube)] == [{"active": False}]


async def test_a_refused_workload_patch_is_retried_and_a_vanished_one_is_not() -> None:
    from trainguard.controller.reconcile.trainjob import ReconcileError

    r, kube, _ = reconciler(trainjob(), rt=runtime(), policies=[MAX_ONE_NODE])
    with_workloads(r, workload())

    async def refuse(resource, name, patch, namespace=None, *, subresource=None, field_manager=None):
        if resource.kind == "Workload":
            raise error
        return patch

    kube.merge_patch = refuse
    error = ApiError(403, "Forbidden", "workloads is forbidden")
    with pytest.raises(ReconcileError, match="workloads is forbidden"):
        await r.reconcile("ns", "job")
    error = NotFound(404, "NotFound", "gone")
    await r.reconcile("ns", "job")


async def test_a_policy_change_is_seen_by_the_workload_too() -> None:
    """Blocked, then allowed by a policy edit, then denied again: deactivated, reactivated, deactivated."""
    r, kube, _ = reconciler(trainjob(suspend=True), rt=runtime(), policies=[MAX_ONE_NODE])
    cache = with_workloads(r, workload())
    for view, _expected in ((None, False), (snapshot_with(policy(limits={"maxNodes": 4})), True), (snapshot_with(MAX_ONE_NODE), False)):
        if view is not None:
            r._caches.cluster_snapshot = lambda view=view: view
        kube.calls.clear()
        await r.reconcile("ns", "job")
        (name, patch), = workload_patches(kube)
        assert patch["spec"] == {"active": _expected}
        # What Kueue's cache would then hold.
        wl = workload(active=_expected, annotations=None if _expected else OURS)
        cache.objs[("ns", name)] = wl
        r._caches.workloads.update("MODIFIED", wl)


PENDING = [{"type": "QuotaReserved", "status": "False", "reason": "Pending",
            "message": "couldn't assign flavors to pod set node: insufficient quota for nvidia.com/gpu in flavor h100, "
                       "request > maximum capacity (64 > 48)"}]


@pytest.mark.parametrize(("workloads", "expected"), [
    ([workload(conditions=PENDING)],
     "Kueue has not admitted its Workload trainjob-job-1a2b3 (Pending): couldn't assign flavors to pod set node: "
     "insufficient quota for nvidia.com/gpu in flavor h100, request > maximum capacity (64 > 48)"),
    ([workload(conditions=ADMITTED)], None),
    ([workload(conditions=[{"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": ""}])], None),
    ([workload(active=False, annotations=OURS, conditions=PENDING)], None),  # deactivated: the policy's reason
    ([workload(conditions=FINISHED + PENDING)], None),
    ([], None),
], ids=["pending", "admitted", "no message", "deactivated", "finished", "no workload"])
def test_kueues_reason_for_holding_a_job(workloads, expected) -> None:
    assert quota.pending_message([quota.workload_view(w) for w in workloads]) == expected


def test_a_huge_kueue_message_is_cut_in_the_cache() -> None:
    wl = workload(conditions=[{**PENDING[0], "message": "x" * 100_000}])
    (reserved,) = quota.workload_view(wl)["status"]["conditions"]
    assert len(reserved["message"]) == quota.MAX_PENDING_MESSAGE
