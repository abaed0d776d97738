"""Defence in depth (``trainguard.controller.reconcile.enforcement``) and the runtime snapshot's garbage collection, on the
reconcile step with fake caches and a recording fake API (the real build and the real policy pipeline)."""

from __future__ import annotations

import pytest

from trainguard.controller.reconcile import enforcement
from trainguard.controller.reconcile import status as st
from trainguard.webhook.policy.verdict import ClusterSnapshot
from trainguard.webhook.runtime import build_runtime_snapshot

from tests.unit.reconcile.test_trainjob import SNAPSHOT, SNAPSHOTS, reconciler, runtime, trainjob


def policy(name: str = "limits", *, mode: str = "Enforce", selector: dict | None = None, **spec) -> dict:
    body = {"mode": mode, **spec}
    if selector is not None:
        body["selector"] = selector
    return {"apiVersion": "trainguard.io/v1alpha1", "kind": "TrainJobPolicy", "metadata": {"name": name}, "spec": body}


MAX_ONE_NODE = policy(limits={"maxNodes": 1})
KUEUE_QUEUE = policy("queue", scheduling={"kueue": {"queueName": "team"}})


@pytest.mark.parametrize(
    "job_suspended, jobset, expected",
    [
        (False, None, True),                      # create
        (True, None, True),                       # create, suspended: still a JobSet that admission never saw
        (False, {"spec": {"suspend": True}}, True),   # resume
        (True, {"spec": {"suspend": True}}, False),   # re-apply while suspended: runs nothing
        (False, {"spec": {"suspend": False}}, False),  # running: never touched
        (True, {"spec": {"suspend": False}}, False),   # being suspended
    ],
    ids=["create", "create-suspended", "resume", "suspended-reapply", "running", "suspending"],
)
def test_when_the_policy_is_asked(job_suspended, jobset, expected) -> None:
    assert enforcement.materializes(trainjob(suspend=job_suspended), jobset) is expected


def state_label(kube) -> str | None:
    patches = [c[4] for c in kube.calls if c[0] == "patch" and c[1] == "TrainJob" and c[3] is None]
    return patches[-1]["metadata"]["labels"][st.STATE_LABEL] if patches else None


@pytest.mark.parametrize(
    "policies, job, blocked, message",
    [
        ([MAX_ONE_NODE], trainjob(), True, 'spec.trainer.numNodes: Invalid value: 3: 3 nodes exceed maxNodes 1'),
        ([KUEUE_QUEUE], trainjob(), True, "metadata.labels[kueue.x-k8s.io/queue-name]: Required value"),
        ([policy(limits={"maxNodes": 3})], trainjob(), False, None),
        ([policy(mode="Audit", limits={"maxNodes": 1})], trainjob(), False, None),
        ([policy(selector={"namespaceSelector": {"matchLabels": {"tier": "gpu"}}}, limits={"maxNodes": 1})],
         trainjob(), False, None),
        ([KUEUE_QUEUE], trainjob(labels={"kueue.x-k8s.io/queue-name": "team"}), False, None),
        ([], trainjob(), False, None),
    ],
    ids=["over-limit", "missing-kueue-label", "within-limit", "audit", "other-namespaces", "labelled", "no-policy"],
)
async def test_a_job_an_enforce_policy_denies_is_not_built(policies, job, blocked, message) -> None:
    r, kube, events = reconciler(job, rt=runtime(mpi=True), policies=policies)
    await r.reconcile("ns", "job")  # no exception: a blocked job is not retried with backoff
    built = [v for v in kube.verbs() if v[0] in ("apply", "create") and v != ("create", "ConfigMap", SNAPSHOT)]
    if blocked:
        assert built == [], "nothing but the runtime snapshot may be written for a blocked job"
        assert state_label(kube) == "Blocked"
        (denied,) = [e for e in events.events if e[1] == "PolicyDenied"]
        assert denied[0] == "Warning" and message in denied[2]
        assert denied[2].startswith("TrainJob is not materialized: a TrainJobPolicy in mode Enforce denies it: ")
        assert not [c for c in kube.calls if c[0] == "patch" and c[3] == "status"], "no condition is added"
    else:
        assert ("apply", "JobSet", "job") in kube.verbs() and ("create", "Secret", "job-mpi-ssh-auth") in kube.verbs()
        assert state_label(kube) == "Created"
        assert not [e for e in events.events if e[1] == "PolicyDenied"]


async def test_a_resume_is_checked_and_a_running_jobset_is_never_touched() -> None:
    suspended = {"metadata": {"name": "job", "namespace": "ns"}, "spec": {"suspend": True}}
    r, kube, events = reconciler(trainjob(suspend=False), rt=runtime(), jobsets=[suspended], policies=[MAX_ONE_NODE])
    await r.reconcile("ns", "job")
    assert ("apply", "JobSet", "job") not in kube.verbs() and state_label(kube) == "Blocked"

    # Still suspended: re-applied as before (patches made while suspended take effect; nothing runs).
    r, kube, events = reconciler(trainjob(suspend=True), rt=runtime(), jobsets=[suspended], policies=[MAX_ONE_NODE])
    await r.reconcile("ns", "job")
    assert ("apply", "JobSet", "job") in kube.verbs() and state_label(kube) == "Suspended"

    running = {"metadata": {"name": "job", "namespace": "ns"}, "spec": {"suspend": False}}
    r, kube, events = reconciler(trainjob(suspend=False), rt=runtime(), jobsets=[running], policies=[MAX_ONE_NODE])
    await r.reconcile("ns", "job")
    assert not [v for v in kube.verbs() if v[1] == "JobSet"] and state_label(kube) != "Blocked"
    assert not [e for e in events.events if e[1] == "PolicyDenied"]


async def test_a_blocked_job_is_built_once_the_policy_allows_it() -> None:
    job = trainjob(labels={st.STATE_LABEL: "Blocked"})
    r, kube, events = reconciler(job, rt=runtime(), policies=[MAX_ONE_NODE])
    await r.reconcile("ns", "job")
    assert ("apply", "JobSet", "job") not in kube.verbs()

    relaxed = policy(limits={"maxNodes": 4})
    relaxed_view = ClusterSnapshot(policies={"limits": relaxed}, namespace_labels={"ns": {}})
    r._caches.cluster_snapshot = lambda: relaxed_view  # the policy informer saw an update
    await r.reconcile("ns", "job")
    assert ("apply", "JobSet", "job") in kube.verbs() and state_label(kube) == "Created"


def test_blocked_trainjobs_are_the_ones_a_policy_change_requeues() -> None:
    failed = {"conditions": [{"type": "Failed", "status": "True"}]}
    jobs = {
        ("a", "blocked"): trainjob(labels={st.STATE_LABEL: "Blocked"}),
        ("b", "blocked"): trainjob(labels={st.STATE_LABEL: "Blocked"}),
        ("a", "running"): trainjob(labels={st.STATE_LABEL: "Running"}),
        ("a", "finished"): trainjob(labels={st.STATE_LABEL: "Blocked"}, status=failed),
    }
    assert enforcement.blocked_trainjobs(jobs.items()) == [("a", "blocked"), ("b", "blocked")]
    assert enforcement.blocked_trainjobs(jobs.items(), "b") == [("b", "blocked")]


# ---- snapshot garbage collection ----------------------------------------------------------------------------------


def snapshot_of(job: dict) -> dict:
    return build_runtime_snapshot(job, runtime(), SNAPSHOTS)


async def test_snapshot_of_a_live_trainjob_is_kept_without_an_api_call() -> None:
    job = trainjob()
    r, kube, _ = reconciler(job, snapshots=[snapshot_of(job)])
    await r.collect_snapshot(SNAPSHOT)
    assert kube.calls == []


@pytest.mark.parametrize("live_uid, deleted", [(None, True), ("uid-2", True), ("uid-1", False)],
                         ids=["gone", "same-name-successor", "cache-behind"])
async def test_snapshot_is_deleted_only_when_the_apiserver_says_its_trainjob_is_gone(live_uid, deleted) -> None:
    job = trainjob()
    r, kube, _ = reconciler(None, snapshots=[snapshot_of(job)])
    if live_uid:
        kube.existing[("TrainJob", "job")] = trainjob() | {"metadata": {**job["metadata"], "uid": live_uid}}
    await r.collect_snapshot(SNAPSHOT)
    assert ("get", "TrainJob", "job") in kube.verbs()
    assert (("delete", "ConfigMap", SNAPSHOT) in kube.verbs()) is deleted


async def test_snapshot_of_a_trainjob_outside_the_controllers_namespace_is_left_alone() -> None:
    job = trainjob()
    r, kube, _ = reconciler(None, snapshots=[snapshot_of(job)], scope="other")
    await r.collect_snapshot(SNAPSHOT)
    assert kube.calls == []


async def test_unlabelled_or_missing_snapshot_is_not_touched() -> None:
    foreign = {"metadata": {"name": SNAPSHOT, "namespace": SNAPSHOTS, "labels": {}}, "data": {}}
    r, kube, _ = reconciler(None, snapshots=[foreign])
    await r.collect_snapshot(SNAPSHOT)
    await r.collect_snapshot("runtime-snapshot-nope")
    assert kube.calls == []


async def test_deleting_a_trainjob_forgets_its_secrets() -> None:
    r, kube, _ = reconciler(trainjob(), rt=runtime(mpi=True))
    await r.reconcile("ns", "job")
    r.forget("uid-1")
    kube.calls.clear()
    await r.reconcile("ns", "job")
    assert ("create", "Secret", "job-mpi-ssh-auth") in kube.verbs()
