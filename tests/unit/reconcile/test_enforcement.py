"""Defence in depth (``trainguard.controller.reconcile.enforcement``) and the runtime snapshot's garbage collection, on the
reconcile step with fake caches and a recording fake API (the real build and the real policy pipeline)."""

from __future__ import annotations

import pytest

from trainguard.controller.reconcile import enforcement
from trainguard.controller.reconcile import status as st
from trainguard.webhook.policy.verdict import ClusterSnapshot
from trainguard.webhook.runtime import build_runtime_snapshot

from tests.unit.reconcile.test_trainjob import NOW, SNAPSHOT, SNAPSHOTS, reconciler, runtime, trainjob


def policy(name: str = "limits", *, mode: str = "Enforce", selector: dict | None = None, **spec) -> dict:
    body = {"mode": mode, **spec}
    if selector is not None:
        body["selector"] = selector
    return {"apiVersion": "trainguard.io/v1alpha1", "kind": "TrainJobPolicy", "metadata": {"name": name}, "spec": body}


MAX_ONE_NODE = policy(limits={"maxNodes": 1})
KUEUE_QUEUE = policy("queue", scheduling={"kueue": {"queueName": "team"}})


@pytest.mark.parametrize(
    "jobset, expected",
    [
        (None, True),                       # create (suspended or not: a JobSet admission never saw)
        ({"spec": {"suspend": True}}, True),    # resume, or re-apply while suspended: the job is held either way
        ({"spec": {"suspend": False}}, False),  # running (or being suspended): never touched
    ],
    ids=["create", "suspended-jobset", "running"],
)
def test_when_the_policy_decides(jobset, expected) -> None:
    assert enforcement.checked(jobset) is expected


def state_label(kube) -> str | None:
    labels = [c[4]["metadata"]["labels"] for c in kube.calls if c[0] == "patch" and c[1] == "TrainJob" and c[3] is None]
    states = [patch[st.STATE_LABEL] for patch in labels if st.STATE_LABEL in patch]
    return states[-1] if states else None


def status_patches(kube) -> list[dict]:
    return [c[4]["status"] for c in kube.calls if c[0] == "patch" and c[3] == "status"]


def suspended_condition(status: dict) -> dict | None:
    return next((c for c in status.get("conditions") or [] if c["type"] == "Suspended"), None)


def denials(events) -> list[tuple[str, str, str]]:
    return [e for e in events.events if e[1] == "PolicyDenied"]


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
        (denied,) = denials(events)
        assert denied[0] == "Warning" and message in denied[2]
        assert denied[2].startswith("TrainJob is not materialized: a TrainJobPolicy in mode Enforce denies it: ")
        # Upstream's condition type, so the SDK and kubectl read it: held, with the denial as the message.
        (status,) = status_patches(kube)
        held = suspended_condition(status)
        assert held is not None and held["status"] == "True" and held["reason"] == "PolicyDenied", status
        assert held["message"] == denied[2]
    else:
        assert ("apply", "JobSet", "job") in kube.verbs() and ("create", "Secret", "job-mpi-ssh-auth") in kube.verbs()
        assert state_label(kube) == "Created"
        assert not denials(events)
        assert all(suspended_condition(s) is None for s in status_patches(kube))


RESUMED = {"type": "Suspended", "status": "True", "reason": "Suspended", "message": "TrainJob is suspended",
           "lastTransitionTime": "2026-01-01T11:00:00Z"}


async def test_a_job_kueue_admitted_but_a_policy_denies_is_held_not_resumed() -> None:
    """Kueue unsuspended the job (it was admitted): the controller refuses the resume, and the TrainJob must not
    lose its Suspended condition, nor get a Resumed event, for a job that does not run."""
    suspended = {"metadata": {"name": "job", "namespace": "ns"}, "spec": {"suspend": True}}
    job = trainjob(suspend=False, status={"conditions": [RESUMED]})
    r, kube, events = reconciler(job, rt=runtime(), jobsets=[suspended], policies=[MAX_ONE_NODE])
    await r.reconcile("ns", "job")
    assert ("apply", "JobSet", "job") not in kube.verbs() and state_label(kube) == "Blocked"
    (status,) = status_patches(kube)
    held = suspended_condition(status)
    assert held["status"] == "True" and held["reason"] == "PolicyDenied"
    assert held["lastTransitionTime"] == RESUMED["lastTransitionTime"], "still suspended: no transition"
    assert not [e for e in events.events if e[1] == "Resumed"]


async def test_a_blocked_job_has_no_running_deadline() -> None:
    """activeDeadlineSeconds counts only while the job runs: a blocked job is not failed for the time it was held."""
    r, kube, events = reconciler(trainjob(activeDeadlineSeconds=60), rt=runtime(), policies=[MAX_ONE_NODE])
    r._now = lambda: NOW.replace(hour=13)  # an hour after creation
    result = await r.reconcile("ns", "job")
    (status,) = status_patches(kube)
    assert not [c for c in status["conditions"] if c["type"] == "Failed"]
    assert result.requeue_after is None and ("delete", "JobSet", "job") not in kube.verbs()


async def test_a_suspended_job_an_enforce_policy_denies_is_blocked_too() -> None:
    """A job waiting in Kueue (TrainJob and JobSet suspended) that a policy now denies is Blocked at once (and its
    Workload deactivated, ``test_quota``), not only when Kueue admits it; its suspended JobSet is left as it is."""
    suspended = {"metadata": {"name": "job", "namespace": "ns"}, "spec": {"suspend": True}}
    r, kube, events = reconciler(trainjob(suspend=True), rt=runtime(), jobsets=[suspended], policies=[MAX_ONE_NODE])
    await r.reconcile("ns", "job")
    assert not [v for v in kube.verbs() if v[1] == "JobSet"] and state_label(kube) == "Blocked"
    assert len(denials(events)) == 1

    # Allowed: re-applied as before (patches made while suspended take effect; nothing runs).
    r, kube, events = reconciler(trainjob(suspend=True), rt=runtime(), jobsets=[suspended])
    await r.reconcile("ns", "job")
    assert ("apply", "JobSet", "job") in kube.verbs() and state_label(kube) == "Suspended"


async def test_a_running_jobset_is_never_touched_but_warned_about_once(monkeypatch) -> None:
    running = {"metadata": {"name": "job", "namespace": "ns"}, "spec": {"suspend": False}}
    job = trainjob(suspend=False, labels={st.STATE_LABEL: "Created"})
    r, kube, events = reconciler(job, rt=runtime(), jobsets=[running], policies=[MAX_ONE_NODE])
    asked = []
    real_check = enforcement.check
    monkeypatch.setattr(enforcement, "check", lambda *a: asked.append(1) or real_check(*a))
    for _ in range(3):
        await r.reconcile("ns", "job")
    assert not [v for v in kube.verbs() if v[1] in ("JobSet", "Workload")] and state_label(kube) is None
    (warned,) = denials(events)
    assert warned[0] == "Warning" and warned[2].startswith("TrainJob keeps running, but is not resumed once suspended")
    assert "2 nodes exceed maxNodes 1" in warned[2]
    # Asked once: the same policies and the same TrainJob generation give the same answer.
    assert len(asked) == 1
    assert all(suspended_condition(s) is None for s in status_patches(kube))


def snapshot_with(*policies: dict) -> ClusterSnapshot:
    return ClusterSnapshot(policies={p["metadata"]["name"]: p for p in policies}, namespace_labels={"ns": {}})


async def test_policy_denied_fires_once_per_denial_not_per_reconcile() -> None:
    r, kube, events = reconciler(trainjob(), rt=runtime(), policies=[MAX_ONE_NODE])
    await r.reconcile("ns", "job")
    await r.reconcile("ns", "job")
    assert len(denials(events)) == 1

    # A policy change that changes the denial: one more event.
    renamed = snapshot_with(policy("renamed", limits={"maxNodes": 1}))
    r._caches.cluster_snapshot = lambda: renamed
    await r.reconcile("ns", "job")
    await r.reconcile("ns", "job")
    assert [e[2].rsplit(" ", 1)[-1] for e in denials(events)] == ['"limits"', '"renamed"']

    # Allowed, then denied again with the first denial: it is news again.
    relaxed = snapshot_with(policy(limits={"maxNodes": 4}))
    r._caches.cluster_snapshot = lambda: relaxed
    await r.reconcile("ns", "job")
    again = snapshot_with(MAX_ONE_NODE)
    r._caches.cluster_snapshot = lambda: again
    await r.reconcile("ns", "job")
    assert len(denials(events)) == 3


async def test_a_blocked_job_is_built_once_the_policy_allows_it() -> None:
    job = trainjob(labels={st.STATE_LABEL: "Blocked"})
    r, kube, events = reconciler(job, rt=runtime(), policies=[MAX_ONE_NODE])
    await r.reconcile("ns", "job")
    assert ("apply", "JobSet", "job") not in kube.verbs()
    (held,) = status_patches(kube)

    relaxed_view = snapshot_with(policy(limits={"maxNodes": 4}))
    r._caches.cluster_snapshot = lambda: relaxed_view  # the policy informer saw an update
    r._caches.trainjobs.objs[("ns", "job")] = {**job, "status": held}  # the status written above
    await r.reconcile("ns", "job")
    assert ("apply", "JobSet", "job") in kube.verbs() and state_label(kube) == "Created"
    resumed = status_patches(kube)[-1]
    assert suspended_condition(resumed) is None and resumed["lastResumeTime"], resumed
    assert ("Normal", "Resumed", "TrainJob is resumed") in events.events


def violations(events) -> list[tuple[str, str, str]]:
    return [e for e in events.events if e[1] == "PolicyViolation"]


AUDIT_ONE_NODE = policy("watch", mode="Audit", limits={"maxNodes": 1})
AUDIT_NOTE = ('TrainJobPolicy "watch" in mode Audit would deny this TrainJob (it is allowed): '
              'spec.trainer.numNodes: Invalid value: 2: 2 nodes exceed maxNodes 1 of TrainJobPolicy "watch"')


async def test_an_audit_finding_is_one_policy_violation_event_and_the_job_is_built() -> None:
    r, kube, events = reconciler(trainjob(), rt=runtime(), policies=[AUDIT_ONE_NODE])
    for _ in range(3):
        await r.reconcile("ns", "job")
    assert violations(events) == [("Warning", "PolicyViolation", AUDIT_NOTE)]
    assert ("apply", "JobSet", "job") in kube.verbs() and not denials(events)


async def test_a_blocked_job_gets_its_audit_findings_too() -> None:
    r, kube, events = reconciler(trainjob(), rt=runtime(), policies=[MAX_ONE_NODE, AUDIT_ONE_NODE])
    await r.reconcile("ns", "job")
    await r.reconcile("ns", "job")
    assert ("apply", "JobSet", "job") not in kube.verbs()
    assert len(denials(events)) == 1 and violations(events) == [("Warning", "PolicyViolation", AUDIT_NOTE)]


async def test_a_new_audit_finding_is_news_and_a_deleted_job_is_forgotten() -> None:
    r, kube, events = reconciler(trainjob(), rt=runtime(), policies=[AUDIT_ONE_NODE])
    await r.reconcile("ns", "job")
    renamed = snapshot_with(policy("watch-2", mode="Audit", limits={"maxNodes": 1}))
    r._caches.cluster_snapshot = lambda: renamed
    await r.reconcile("ns", "job")
    await r.reconcile("ns", "job")
    assert [e[2].split('"')[1] for e in violations(events)] == ["watch", "watch-2"]
    r.forget("uid-1")
    await r.reconcile("ns", "job")
    assert len(violations(events)) == 3


def test_every_unfinished_job_is_rechecked_on_a_policy_change() -> None:
    failed = {"conditions": [{"type": "Failed", "status": "True"}]}
    jobs = {
        ("a", "blocked"): trainjob(labels={st.STATE_LABEL: "Blocked"}),
        ("b", "blocked"): trainjob(labels={st.STATE_LABEL: "Blocked"}),
        ("a", "running"): trainjob(labels={st.STATE_LABEL: "Running"}),
        ("a", "finished"): trainjob(labels={st.STATE_LABEL: "Blocked"}, status=failed),
    }
    assert enforcement.rechecked_trainjobs(jobs.items()) == [("a", "blocked"), ("b", "blocked"), ("a", "running")]
    assert enforcement.rechecked_trainjobs(jobs.items(), "b") == [("b", "blocked")]


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
