"""TrainJobPolicy status (``trainguard.controller.reconcile.policy_status``): the counts come from the reconciler's
own check (``PolicyResult`` per matching policy), Ready says whether the policy can be read, and writes go through
``/status`` only when something changed, at most one per policy per interval however many TrainJob events come."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone

from trainguard.controller.reconcile.policy_status import (
    Counts, PolicyStatusReconciler, PolicyTally, desired_status, only_status_changed, readable,
)
from trainguard.controller.reconcile.queue import ShutDown, WorkQueue
from trainguard.webhook.policy.pipeline import FAIL, PASS, WARN, PolicyResult

from tests.unit.reconcile.test_enforcement import policy
from tests.unit.reconcile.test_trainjob import NOW, Store, reconciler, runtime, trainjob

LATER = datetime(2026, 1, 1, 13, 0, tzinfo=timezone.utc)


def stored(p: dict, generation: int = 1, **meta) -> dict:
    return {**p, "metadata": {**p["metadata"], "generation": generation, **meta}}


# ---- the tally ------------------------------------------------------------------------------------------------------

def test_the_tally_counts_each_jobs_latest_result_per_policy() -> None:
    t = PolicyTally()
    assert t.record("a", [PolicyResult("p", PASS), PolicyResult("q", WARN)]) == {"p", "q"}
    assert t.record("b", [PolicyResult("p", FAIL)]) == {"p"}
    assert t.counts("p") == Counts(passed=1, failed=1) and t.counts("p").selected == 2
    assert t.counts("q") == Counts(warned=1)
    assert t.record("a", [PolicyResult("p", PASS), PolicyResult("q", WARN)]) == set(), "nothing changed"
    assert t.record("a", [PolicyResult("p", WARN)]) == {"p", "q"}  # p moved, q no longer selects a
    assert t.counts("p") == Counts(warned=1, failed=1) and t.counts("q") == Counts()
    assert t.forget("b") == {"p"} and t.counts("p") == Counts(warned=1)
    assert t.forget("b") == set() and t.forget("never-seen") == set()


# ---- the status -----------------------------------------------------------------------------------------------------

def test_a_readable_policy_is_ready_with_its_counts_and_generation() -> None:
    p = stored(policy("watch", mode="Audit", limits={"maxNodes": 1}), generation=3)
    status = desired_status(p, Counts(passed=2, warned=1), readable(p), NOW)
    assert status["observedGeneration"] == 3
    assert status["trainJobs"] == {"selected": 3, "pass": 2, "warn": 1, "fail": 0}
    (ready,) = status["conditions"]
    assert (ready["type"], ready["status"], ready["reason"], ready["observedGeneration"]) == ("Ready", "True",
                                                                                             "InForce", 3)
    assert "mode Audit" in ready["message"] and ready["lastTransitionTime"] == "2026-01-01T12:00:00Z"


def test_a_policy_the_model_refuses_is_not_ready_and_the_message_names_the_field() -> None:
    bad = stored(policy("typo", limits={"maxNodes": "four"}), generation=2)
    status = desired_status(bad, Counts(), readable(bad), NOW)
    (ready,) = status["conditions"]
    assert ready["status"] == "False" and ready["reason"] == "Unreadable"
    assert ready["message"].startswith("spec.limits.maxNodes: ") and "ignore this policy" in ready["message"]
    assert status["trainJobs"]["selected"] == 0


def test_ready_keeps_its_transition_time_until_it_flips() -> None:
    p = stored(policy("watch"))
    first = desired_status(p, Counts(), None, NOW)
    again = desired_status({**p, "status": first}, Counts(passed=5), None, LATER)
    assert again["conditions"][0]["lastTransitionTime"] == first["conditions"][0]["lastTransitionTime"]
    bad = stored(policy("watch", limits={"maxNodes": "x"}))
    flipped = desired_status({**bad, "status": first}, Counts(), readable(bad), LATER)
    assert flipped["conditions"][0]["lastTransitionTime"] == "2026-01-01T13:00:00Z"


def test_only_a_status_write_is_only_status_changed() -> None:
    p = stored(policy("watch"), generation=4)
    assert only_status_changed(p, {**p, "status": {"observedGeneration": 4}})
    assert not only_status_changed(p, stored(policy("watch"), generation=5))  # the spec changed
    assert not only_status_changed(p, stored(policy("watch"), generation=4, annotations={"a": "b"}))
    assert not only_status_changed(p, stored(policy("watch"), generation=4, labels={"a": "b"}))
    assert not only_status_changed(None, p)


# ---- the writes -----------------------------------------------------------------------------------------------------

class StatusKube:
    def __init__(self, policies: Store) -> None:
        self.policies = policies
        self.writes: list[tuple[str, str | None, dict]] = []

    async def merge_patch(self, resource, name, patch, namespace=None, *, subresource=None, field_manager=None):
        assert resource.kind == "TrainJobPolicy" and field_manager == "trainguard"
        self.writes.append((name, subresource, patch))
        # What the watch brings back: the stored policy with its new status.
        obj = self.policies.get(name)
        self.policies.objs[("", name)] = {**obj, "status": patch["status"]}
        return obj


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


async def test_status_is_written_through_the_subresource_only_when_it_changes() -> None:
    store = Store(stored(policy("watch", mode="Audit")))
    kube, scheduled = StatusKube(store), []
    r = PolicyStatusReconciler(kube, store, PolicyTally(), lambda n, d: scheduled.append((n, d)), now=lambda: NOW)
    await r.reconcile("watch")
    await r.reconcile("watch")
    (write,) = kube.writes
    assert write[0] == "watch" and write[1] == "status" and set(write[2]) == {"status"}
    assert write[2]["status"]["trainJobs"]["selected"] == 0
    r.record("uid-1", [PolicyResult("watch", WARN)])
    await r.reconcile("watch")
    assert len(kube.writes) == 2 and kube.writes[-1][2]["status"]["trainJobs"]["warn"] == 1
    await r.reconcile("gone")  # deleted: nothing to write
    assert len(kube.writes) == 2


async def test_changed_counts_mark_a_policy_once_and_no_sooner_than_the_interval() -> None:
    store = Store(stored(policy("watch")))
    clock, scheduled = Clock(), []
    r = PolicyStatusReconciler(StatusKube(store), store, PolicyTally(), lambda n, d: scheduled.append((n, d)),
                               interval=2.0, clock=clock, now=lambda: NOW)
    for i in range(1000):
        r.record(f"uid-{i}", [PolicyResult("watch", PASS)])
    assert scheduled == [("watch", 0.0)], "a thousand changes, one pending reconcile"
    await r.reconcile("watch")
    clock.t += 0.5
    r.record("uid-0", [PolicyResult("watch", FAIL)])
    r.record("uid-1", [PolicyResult("watch", FAIL)])
    assert scheduled[1:] == [("watch", 1.5)], "the next write waits for the interval since the last one"
    r.record("uid-0", [PolicyResult("other", PASS)])  # another policy's first change: not held back by this one
    assert scheduled[2:] == [("other", 0.0), ]
    r.record("uid-2", [])  # unchanged results of a job no policy selects: nothing to do
    assert len(scheduled) == 3


async def test_a_burst_of_trainjob_results_gives_a_handful_of_writes_through_the_work_queue() -> None:
    """A thousand TrainJobs' results arriving while the worker drains the real work queue: the last counts are
    written, in a few writes, not one per event."""
    store = Store(stored(policy("watch")))
    kube = StatusKube(store)
    queue: WorkQueue[str] = WorkQueue()
    r = PolicyStatusReconciler(kube, store, PolicyTally(), queue.add_after, interval=0.05, now=lambda: NOW)

    async def worker() -> None:
        while True:
            try:
                key = await queue.get()
            except ShutDown:
                return
            try:
                await r.reconcile(key)
            finally:
                queue.done(key)

    task = asyncio.create_task(worker())
    started = asyncio.get_running_loop().time()
    for i in range(1000):
        r.record(f"uid-{i}", [PolicyResult("watch", WARN if i % 4 == 0 else PASS)])
        if i % 50 == 0:
            await asyncio.sleep(0.01)
    elapsed = asyncio.get_running_loop().time() - started
    await asyncio.sleep(0.2)
    await queue.shutdown()
    await task
    assert kube.writes[-1][2]["status"]["trainJobs"] == {"selected": 1000, "pass": 750, "warn": 250, "fail": 0}
    assert 2 <= len(kube.writes) <= elapsed / 0.05 + 3, (len(kube.writes), elapsed)


# ---- the TrainJob reconciler feeds the tally ----------------------------------------------------------------------

class Sink:
    def __init__(self) -> None:
        self.tally = PolicyTally()

    def record(self, uid, results):
        self.tally.record(uid, results)

    def forget(self, uid):
        self.tally.forget(uid)


def with_sink(*args, **kw):
    r, kube, events = reconciler(*args, **kw)
    sink = Sink()
    r._policy_results = sink
    return r, sink


async def test_each_reconcile_records_the_jobs_result_per_matching_policy() -> None:
    policies = [policy("hard", limits={"maxNodes": 1}), policy("watch", mode="Audit", limits={"maxNodes": 1}),
                policy("loose", limits={"maxNodes": 10}),
                policy("elsewhere", selector={"namespaceSelector": {"matchLabels": {"tier": "gpu"}}})]
    r, sink = with_sink(trainjob(), rt=runtime(), policies=policies)
    await r.reconcile("ns", "job")  # blocked by "hard": still counted
    assert {p: sink.tally.counts(p) for p in ("hard", "watch", "loose", "elsewhere")} == {
        "hard": Counts(failed=1), "watch": Counts(warned=1), "loose": Counts(passed=1), "elsewhere": Counts()}


async def test_a_finished_or_deleted_job_leaves_the_counts() -> None:
    r, sink = with_sink(trainjob(), rt=runtime(), policies=[policy("loose", limits={"maxNodes": 10})])
    await r.reconcile("ns", "job")
    assert sink.tally.counts("loose").selected == 1
    r._caches.trainjobs.objs[("ns", "job")] = trainjob(status={"conditions": [{"type": "Complete", "status": "True"}]})
    await r.reconcile("ns", "job")
    assert sink.tally.counts("loose").selected == 0

    r, sink = with_sink(trainjob(), rt=runtime(), policies=[policy("loose", limits={"maxNodes": 10})])
    await r.reconcile("ns", "job")
    r.forget("uid-1")  # the snapshot collector's word: the job is gone
    assert sink.tally.counts("loose").selected == 0


async def test_a_job_deleted_during_its_reconcile_is_not_counted_again() -> None:
    """The DELETED handler forgot it while the reconcile waited on the API: the late result must not bring it back."""
    r, sink = with_sink(trainjob(), rt=runtime(), policies=[policy("loose", limits={"maxNodes": 10})])
    kube = r._kube
    create = kube.create

    async def create_then_delete(resource, obj, namespace=None):
        out = await create(resource, obj, namespace)
        r._caches.trainjobs.objs.pop(("ns", "job"), None)
        return out

    kube.create = create_then_delete  # the runtime snapshot's create, before the policy check
    await r.reconcile("ns", "job")
    assert sink.tally.counts("loose").selected == 0


# ---- the metric -----------------------------------------------------------------------------------------------------

def policy_result_samples(metrics) -> dict[tuple[str, str], float]:
    from prometheus_client.parser import text_string_to_metric_families

    return {(s.labels["policy"], s.labels["result"]): s.value
            for family in text_string_to_metric_families(metrics.render().decode())
            for s in family.samples if s.name == "trainguard_policy_results"}


async def test_policy_results_are_the_tallys_counts_per_existing_policy_while_leading() -> None:
    """``trainguard_policy_results{policy,result}``: the same counts the status shows, three series per policy that
    exists, none left once it is deleted, and none from a replica that is not leading (it evaluates nothing)."""
    from trainguard.controller.reconcile.controller import Controller, Settings
    from trainguard.controller.reconcile.metrics import Metrics
    from trainguard.webhook.kube.client import WatchEvent

    metrics = Metrics()
    controller = Controller(None, Settings(snapshot_namespace="tg-system"), metrics, "me")  # type: ignore[arg-type]
    for i, name in enumerate(("p", "q", "idle")):
        controller.policies._apply(WatchEvent("ADDED", {"metadata": {"name": name, "resourceVersion": str(i + 1)}}))
    tally = controller.policy_status.tally
    tally.record("a", [PolicyResult("p", PASS), PolicyResult("q", FAIL)])
    tally.record("b", [PolicyResult("p", WARN), PolicyResult("q", FAIL)])
    tally.record("c", [PolicyResult("gone", FAIL)])  # a policy the cache no longer has: not exported
    assert policy_result_samples(metrics) == {}, "a standby exports nothing"
    controller.start_workers()
    try:
        assert policy_result_samples(metrics) == {
            ("p", "pass"): 1, ("p", "warn"): 1, ("p", "fail"): 0,
            ("q", "pass"): 0, ("q", "warn"): 0, ("q", "fail"): 2,
            ("idle", "pass"): 0, ("idle", "warn"): 0, ("idle", "fail"): 0}
        tally.forget("b")
        assert policy_result_samples(metrics)[("q", "fail")] == 1 and policy_result_samples(metrics)[("p", "warn")] == 0
        controller.policies._apply(WatchEvent("DELETED", {"metadata": {"name": "q", "resourceVersion": "9"}}))
        assert {p for p, _ in policy_result_samples(metrics)} == {"p", "idle"}, "a deleted policy leaves no series"
    finally:
        await controller.abort_workers()
    assert policy_result_samples(metrics) == {}, "leadership lost: nothing exported"
