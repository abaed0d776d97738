"""The DatasetCache reconciler under the admin's source setting (issue 10, attack 9): a disallowed source gets no
agents (nothing applied, an existing agent DaemonSet deleted) and says why in status and an event; an allowed one
is built as before. A fake client records every call, so "nothing was created" is checked, not assumed."""

from __future__ import annotations

import copy
from datetime import datetime, timezone
from typing import Any

import pytest

from trainguard.controller.reconcile.cache_daemonset import agent_name
from trainguard.controller.reconcile.datasetcache import (
    REASON_SOURCE_NOT_ALLOWED,
    DatasetCacheReconciler,
    refused_status,
)
from trainguard.webhook.kube.errors import NotFound
from tests.unit.reconcile.test_gates import Store  # the same cache stand-in as the gate releaser tests
from trainguard.webhook.policy.dataset_cache import DatasetCacheSources

NOW = datetime(2026, 9, 1, 12, 0, tzinfo=timezone.utc)
LATER = datetime(2026, 9, 1, 13, 0, tzinfo=timezone.utc)
DATA = DatasetCacheSources.of(["/data"])


def cache(path: str = "/", **status: Any) -> dict:
    obj: dict[str, Any] = {
        "metadata": {"name": "imagenet", "namespace": "ns", "uid": "uid-1", "generation": 2, "resourceVersion": "7"},
        "spec": {"source": {"hostPath": {"path": path}, "shards": "*.arrow"}, "memoryBudget": "1Gi"},
    }
    if status:
        obj["status"] = status
    return obj


def agent_daemonset(owner: str = "imagenet") -> dict:
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": agent_name("imagenet"), "namespace": "ns",
                         "ownerReferences": [{"apiVersion": "trainguard.io/v1alpha1", "kind": "DatasetCache",
                                              "name": owner, "uid": "uid-1", "controller": True}]}}


class FakeKube:
    """Records applies, status patches and deletes; answers an apply with the object."""

    def __init__(self, *, delete_not_found: bool = False) -> None:
        self.applied: list[dict] = []
        self.status_patches: list[dict] = []
        self.deleted: list[tuple[str, str, str]] = []
        self.delete_not_found = delete_not_found

    async def apply(self, resource, obj, *, field_manager, force=False):  # type: ignore[no-untyped-def]
        self.applied.append(copy.deepcopy(obj))
        return obj

    async def merge_patch(self, resource, name, patch, namespace=None, *, subresource=None,  # type: ignore[no-untyped-def]
                          field_manager=None):
        assert resource.kind == "DatasetCache" and subresource == "status" and (namespace, name) == ("ns", "imagenet")
        self.status_patches.append(patch)
        return patch

    async def delete(self, resource, name, namespace=None, *, propagation="Background"):  # type: ignore[no-untyped-def]
        self.deleted.append((resource.kind, namespace, name))
        if self.delete_not_found:
            raise NotFound(404, "NotFound", "gone")
        return {}


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    async def record(self, regarding, type_, reason, note, action="Reconciling"):  # type: ignore[no-untyped-def]
        assert regarding["kind"] == "DatasetCache" and regarding["metadata"]["name"] == "imagenet"
        self.events.append((type_, reason, note))


def reconciler(obj: dict, kube: FakeKube, events: Recorder, sources: DatasetCacheSources,
               daemonsets: list[dict] = (), now: datetime = NOW) -> DatasetCacheReconciler:  # type: ignore[assignment]
    return DatasetCacheReconciler(kube, Store([obj]), Store(list(daemonsets)), Store([]), events,  # type: ignore[arg-type]
                                  agent_image="img", now=lambda: now, sources=sources)


def ready(patch: dict) -> dict:
    return next(c for c in patch["status"]["conditions"] if c["type"] == "Ready")


@pytest.mark.parametrize("path, sources, detail", [
    ("/", DATA, 'spec.source.hostPath.path: Invalid value: "/": must be one of, or lie below one of, the hostPath '
                "roots the cluster admin allows: /data"),
    ("/data/../etc", DATA, "spec.source.hostPath.path: Invalid value: \"/data/../etc\": must not contain '..'"),
    ("/database", DATA, 'Invalid value: "/database": must be one of'),
    ("/data/x", DatasetCacheSources(), "the cluster admin has allowed no hostPath roots"),
], ids=["root", "dotdot", "sibling-prefix", "nothing-configured"])
async def test_a_disallowed_source_gets_no_agents_and_status_and_an_event_say_why(
        path: str, sources: DatasetCacheSources, detail: str) -> None:
    kube, events = FakeKube(), Recorder()
    await reconciler(cache(path), kube, events, sources).reconcile("ns", "imagenet")
    assert kube.applied == [] and kube.deleted == []  # no ServiceAccount, Role, RoleBinding or DaemonSet
    [patch] = kube.status_patches
    assert patch["metadata"] == {"resourceVersion": "7"}
    assert {k: patch["status"][k] for k in ("nodesDesired", "nodesReady", "bytesResident", "observedGeneration")} \
        == {"nodesDesired": 0, "nodesReady": 0, "bytesResident": 0, "observedGeneration": 2}
    condition = ready(patch)
    assert (condition["status"], condition["reason"]) == ("False", REASON_SOURCE_NOT_ALLOWED)
    assert condition["message"].startswith("no cache agents run for this source: ") and detail in condition["message"]
    assert events.events == [("Warning", REASON_SOURCE_NOT_ALLOWED, condition["message"])]


async def test_once_status_says_so_a_later_reconcile_writes_and_records_nothing() -> None:
    kube, events = FakeKube(), Recorder()
    await reconciler(cache("/"), kube, events, DATA).reconcile("ns", "imagenet")
    stored = cache("/", **kube.status_patches[0]["status"])
    kube2, events2 = FakeKube(), Recorder()
    await reconciler(stored, kube2, events2, DATA, now=LATER).reconcile("ns", "imagenet")
    assert kube2.status_patches == [] and events2.events == [] and kube2.applied == []


async def test_an_existing_agent_daemonset_is_deleted_when_its_source_becomes_disallowed() -> None:
    # Built while the admin allowed /old; the admin has since narrowed the roots to /data.
    kube, events = FakeKube(), Recorder()
    stored = cache("/old/datasets", nodesDesired=3, nodesReady=3,
                   conditions=[{"type": "Ready", "status": "True", "reason": "Warm", "message": "3/3",
                                "lastTransitionTime": "2026-08-01T00:00:00Z"}])
    await reconciler(stored, kube, events, DATA, daemonsets=[agent_daemonset()]).reconcile("ns", "imagenet")
    assert kube.deleted == [("DaemonSet", "ns", agent_name("imagenet"))] and kube.applied == []
    condition = ready(kube.status_patches[0])
    assert condition["reason"] == REASON_SOURCE_NOT_ALLOWED
    assert condition["lastTransitionTime"] == "2026-09-01T12:00:00Z"  # True -> False is a transition
    [(type_, reason, note)] = events.events
    assert (type_, reason) == ("Warning", REASON_SOURCE_NOT_ALLOWED)
    assert note.endswith(f"; the agent DaemonSet {agent_name('imagenet')} was deleted")


async def test_a_daemonset_already_gone_is_not_an_error() -> None:
    kube, events = FakeKube(delete_not_found=True), Recorder()
    await reconciler(cache("/"), kube, events, DATA, daemonsets=[agent_daemonset()]).reconcile("ns", "imagenet")
    assert kube.deleted and len(kube.status_patches) == 1 and "was deleted" not in events.events[0][2]


async def test_a_daemonset_this_cache_does_not_control_is_left_alone() -> None:
    kube, events = FakeKube(), Recorder()
    await reconciler(cache("/"), kube, events, DATA, daemonsets=[agent_daemonset(owner="other")]).reconcile(
        "ns", "imagenet")
    assert kube.deleted == []


async def test_an_allowed_source_is_built_with_the_cleaned_path_as_before() -> None:
    kube, events = FakeKube(), Recorder()
    await reconciler(cache("/data//imagenet/"), kube, events, DATA).reconcile("ns", "imagenet")
    kinds = [o["kind"] for o in kube.applied]
    assert kinds == ["ServiceAccount", "Role", "RoleBinding", "DaemonSet"]
    volumes = {v["name"]: v for v in kube.applied[-1]["spec"]["template"]["spec"]["volumes"]}
    assert volumes["data"]["hostPath"] == {"path": "/data/imagenet", "type": "Directory"}
    assert ready(kube.status_patches[0])["reason"] != REASON_SOURCE_NOT_ALLOWED
    assert not any(reason == REASON_SOURCE_NOT_ALLOWED for _, reason, _ in events.events)


async def test_allowing_the_source_again_builds_the_agents() -> None:
    refused = FakeKube()
    await reconciler(cache("/mnt/ds"), refused, Recorder(), DATA).reconcile("ns", "imagenet")
    stored = cache("/mnt/ds", **refused.status_patches[0]["status"])
    kube = FakeKube()
    await reconciler(stored, kube, Recorder(), DatasetCacheSources.of(["/data", "/mnt/ds"]), now=LATER).reconcile(
        "ns", "imagenet")
    assert [o["kind"] for o in kube.applied][-1] == "DaemonSet"
    assert ready(kube.status_patches[0])["reason"] != REASON_SOURCE_NOT_ALLOWED


def test_refused_status_keeps_the_transition_time_while_ready_stays_false() -> None:
    before = {"conditions": [{"type": "Ready", "status": "False", "reason": "Warming",
                              "lastTransitionTime": "2026-08-01T00:00:00Z"}]}
    status = refused_status(cache("/"), "why", now=NOW, previous=before)
    assert status["conditions"][0]["lastTransitionTime"] == "2026-08-01T00:00:00Z"
    assert refused_status(cache("/"), "why", now=NOW)["conditions"][0]["lastTransitionTime"] == "2026-09-01T12:00:00Z"
