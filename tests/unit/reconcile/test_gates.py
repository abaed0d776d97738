"""Releasing trainer pods held for a DatasetCache: the decision table, the patch, events, and the wiring."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from trainguard.controller.reconcile.controller import DATASET_CACHE, Controller, Settings
from trainguard.controller.reconcile.gates import (
    CACHE_MISSING,
    NOT_REQUESTED,
    REASON_RELEASED,
    REASON_WAITING,
    UNGATED,
    WAITING,
    WARM,
    GateReleaser,
    gate_decision,
    gated_pod_view,
    remove_gate_patch,
)
from trainguard.controller.reconcile.metrics import Metrics
from trainguard.controller.reconcile.trainjob import ReconcileError
from trainguard.webhook.kube.errors import Invalid, NotFound
from trainguard.webhook.kube.informer import CacheEvent
from trainguard.webhook.runtime.dataset_cache import WAITS_FOR_LABEL, WARM_GATE

KUEUE = {"name": "kueue.x-k8s.io/topology"}


def dataset_cache(ready: int, desired: int, *, hold: bool = True, deleting: bool = False) -> dict:
    meta: dict[str, Any] = {"name": "imagenet", "namespace": "ns"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"holdTrainersUntilWarm": hold},
            "status": {"nodesReady": ready, "nodesDesired": desired,
                       "conditions": [{"type": "Ready", "status": "True" if desired and ready >= desired else "False",
                                       "reason": "Warm" if desired and ready >= desired else "Warming"}]}}


def pod(name: str = "job-node-0-0", gates: list[dict] | None = None, job: str = "job") -> dict:
    return {"metadata": {"name": name, "namespace": "ns",
                         "labels": {WAITS_FOR_LABEL: "imagenet", "jobset.sigs.k8s.io/jobset-name": job}},
            "spec": {"schedulingGates": [{"name": WARM_GATE}] if gates is None else gates}}


@pytest.mark.parametrize("the_pod, cache, release, why", [
    (pod(), dataset_cache(0, 2), False, WAITING),
    (pod(), dataset_cache(1, 2), False, WAITING),
    (pod(), dataset_cache(0, 0), False, WAITING),  # no node selected: nothing can be warm, keep holding
    (pod(), dataset_cache(2, 2), True, WARM),
    (pod(), None, True, CACHE_MISSING),
    (pod(), dataset_cache(0, 2, deleting=True), True, CACHE_MISSING),
    (pod(), dataset_cache(0, 2, hold=False), True, NOT_REQUESTED),
    (pod(gates=[]), dataset_cache(2, 2), False, UNGATED),
    (pod(gates=[KUEUE]), dataset_cache(0, 2), False, UNGATED),
], ids=["none-warm", "partly-warm", "no-nodes", "ready", "cache-missing", "cache-deleting", "opted-out",
        "already-ungated", "only-other-gates"])
def test_decision_table(the_pod: dict, cache: dict | None, release: bool, why: str) -> None:
    decision = gate_decision(the_pod, cache)
    assert (decision.release, decision.why) == (release, why)


def test_patch_removes_exactly_our_gate() -> None:
    p = pod(gates=[KUEUE, {"name": WARM_GATE}, {"name": "example.com/other"}])
    assert remove_gate_patch(p) == [
        {"op": "test", "path": "/spec/schedulingGates/1/name", "value": WARM_GATE},
        {"op": "remove", "path": "/spec/schedulingGates/1"},
    ]
    assert remove_gate_patch(pod(gates=[KUEUE])) == []


def test_pod_cache_keeps_metadata_and_gates_only() -> None:
    full = copy.deepcopy(pod(gates=[KUEUE, {"name": WARM_GATE}]))
    full["metadata"].update(annotations={"big": "x" * 1000}, managedFields=[{"manager": "kubelet"}], uid="u1",
                            resourceVersion="7")
    full["spec"].update(containers=[{"name": "node", "env": [{"name": "TOKEN", "value": "secret"}]}])
    full["status"] = {"phase": "Pending"}
    view = gated_pod_view(full)
    assert view == {"metadata": {"name": "job-node-0-0", "namespace": "ns", "uid": "u1", "resourceVersion": "7",
                                 "labels": full["metadata"]["labels"]},
                    "spec": {"schedulingGates": [KUEUE, {"name": WARM_GATE}]}}


# ---- GateReleaser ------------------------------------------------------------------------------------------------
class Store:
    def __init__(self, objs: list[dict]) -> None:
        self.objs = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in objs}

    def get(self, name: str, namespace: str = "") -> dict | None:
        return self.objs.get((namespace, name))

    def items(self):  # type: ignore[no-untyped-def]
        return list(self.objs.items())


class FakeKube:
    def __init__(self, fail: dict[str, Exception] | None = None) -> None:
        self.patches: list[tuple[str, list]] = []
        self.fail = fail or {}

    async def json_patch(self, resource, name, ops, namespace=None):  # type: ignore[no-untyped-def]
        assert resource.kind == "Pod" and namespace == "ns"
        if name in self.fail:
            raise self.fail[name]
        self.patches.append((name, ops))
        return {}


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str, str]] = []

    async def record(self, regarding, type_, reason, note, action="Reconciling"):  # type: ignore[no-untyped-def]
        assert regarding["kind"] == "TrainJob" and regarding["apiVersion"].startswith("trainer.kubeflow.org/")
        self.events.append((regarding["metadata"]["name"], type_, reason, note))


TRAINJOB = {"metadata": {"name": "job", "namespace": "ns", "uid": "tj"}}


def releaser(pods: list[dict], kube: FakeKube, events: Recorder, live: dict | None = None) -> GateReleaser:
    async def confirm(namespace: str, name: str) -> dict | None:
        return live

    return GateReleaser(kube, Store(pods), Store([TRAINJOB]), events, confirm)  # type: ignore[arg-type]


async def test_waiting_pods_keep_their_gate_and_the_trainjob_says_why() -> None:
    kube, events = FakeKube(), Recorder()
    pods = [pod("job-node-0-0"), pod("job-node-0-1"), pod("other", gates=[KUEUE])]
    await releaser(pods, kube, events).reconcile("ns", "imagenet", dataset_cache(1, 3))
    assert kube.patches == []
    assert len(events.events) == 1
    name, type_, reason, note = events.events[0]
    assert (name, type_, reason) == ("job", "Normal", REASON_WAITING)
    assert "1 of 3 nodes warm" in note and "imagenet" in note and WARM_GATE in note


async def test_ready_cache_releases_every_gated_pod_of_that_cache_only() -> None:
    kube, events = FakeKube(), Recorder()
    other_cache = pod("x-node-0-0", job="x")
    other_cache["metadata"]["labels"][WAITS_FOR_LABEL] = "other"
    pods = [pod("job-node-0-0", gates=[KUEUE, {"name": WARM_GATE}]), pod("job-node-0-1"), other_cache,
            pod("done", gates=[])]
    await releaser(pods, kube, events).reconcile("ns", "imagenet", dataset_cache(2, 2))
    assert kube.patches == [
        ("job-node-0-0", [{"op": "test", "path": "/spec/schedulingGates/1/name", "value": WARM_GATE},
                          {"op": "remove", "path": "/spec/schedulingGates/1"}]),
        ("job-node-0-1", [{"op": "test", "path": "/spec/schedulingGates/0/name", "value": WARM_GATE},
                          {"op": "remove", "path": "/spec/schedulingGates/0"}]),
    ]
    assert [(e[1], e[2]) for e in events.events] == [("Normal", REASON_RELEASED)]
    assert "2 of 2 nodes warm" in events.events[0][3]


async def test_missing_cache_is_confirmed_live_before_releasing() -> None:
    kube, events = FakeKube(), Recorder()
    # The watch cache lost it but the apiserver still has it (not ready): keep holding.
    await releaser([pod()], kube, events, live=dataset_cache(0, 2)).reconcile("ns", "imagenet", None)
    assert kube.patches == [] and events.events[0][2] == REASON_WAITING
    # Really gone: release, so no pod waits forever for a cache that will never warm.
    kube, events = FakeKube(), Recorder()
    await releaser([pod()], kube, events, live=None).reconcile("ns", "imagenet", None)
    assert [p[0] for p in kube.patches] == ["job-node-0-0"]
    assert events.events[0][2] == REASON_RELEASED and "does not exist" in events.events[0][3]


async def test_a_pod_deleted_meanwhile_is_skipped_and_moved_gates_are_retried() -> None:
    kube = FakeKube(fail={"job-node-0-0": NotFound(404, "NotFound", "gone")})
    await releaser([pod("job-node-0-0"), pod("job-node-0-1")], kube, Recorder()).reconcile(
        "ns", "imagenet", dataset_cache(2, 2))
    assert [p[0] for p in kube.patches] == ["job-node-0-1"]

    kube = FakeKube(fail={"job-node-0-0": Invalid(422, "Invalid", "testing value failed")})
    with pytest.raises(ReconcileError) as err:
        await releaser([pod("job-node-0-0"), pod("job-node-0-1")], kube, Recorder()).reconcile(
            "ns", "imagenet", dataset_cache(2, 2))
    assert err.value.reason == "StaleSchedulingGates"
    assert [p[0] for p in kube.patches] == ["job-node-0-1"]  # the others were still released


async def test_no_gated_pods_costs_nothing() -> None:
    kube, events = FakeKube(), Recorder()

    async def confirm(namespace: str, name: str) -> dict | None:
        raise AssertionError("no live GET without gated pods")

    await GateReleaser(kube, Store([pod(gates=[])]), Store([TRAINJOB]), events, confirm).reconcile(  # type: ignore[arg-type]
        "ns", "imagenet", None)
    assert kube.patches == [] and events.events == []


# ---- wiring: a gated pod enqueues its cache ---------------------------------------------------------------------
class NoKube:
    pass


async def test_gated_pod_events_enqueue_the_cache_it_waits_for() -> None:
    c = Controller(NoKube(), Settings(workers=1, watch_podgroups=False), Metrics(), "test")  # type: ignore[arg-type]
    assert c.gated_pods.label_selector == WAITS_FOR_LABEL and c.gated_pods in c._required
    assert c.cache_reconciler._gates is not None  # an empty informer is falsy: wired all the same
    c.gated_pods._emit(CacheEvent("ADDED", pod()))
    c.gated_pods._emit(CacheEvent("MODIFIED", pod("released", gates=[KUEUE])))
    c.gated_pods._emit(CacheEvent("DELETED", pod("gone")))
    assert list(c.queue._order) == [(DATASET_CACHE, "ns", "imagenet")]  # type: ignore[attr-defined]
