"""ClusterCaches: the ClusterSnapshot fields built from informers, rebuilt only when a cache changed."""

from __future__ import annotations

import asyncio
from typing import Any

from trainguard.webhook.kube import resources as r
from trainguard.webhook.kube.informer import Backoff
from trainguard.webhook.kube.snapshot import ClusterCaches
from trainguard.webhook.policy.verdict import ClusterSnapshot

from fake_source import FakeSource, ev, obj


class PerResourceSource:
    """Routes list/watch calls to one FakeSource per resource plural."""

    def __init__(self) -> None:
        self.by_plural: dict[str, FakeSource] = {}

    def of(self, resource: r.Resource) -> FakeSource:
        return self.by_plural.setdefault(resource.plural, FakeSource())

    async def list_all(self, resource: r.Resource, *a: Any, **kw: Any):
        return await self.of(resource).list_all(resource, *a, **kw)

    def watch(self, resource: r.Resource, *a: Any, **kw: Any):
        return self.of(resource).watch(resource, *a, **kw)


def scripted() -> PerResourceSource:
    src = PerResourceSource()
    src.of(r.TRAINING_RUNTIMES).lists.append(([obj("torch", "1", "team-a", spec={"k": 1})], "1"))
    src.of(r.CLUSTER_TRAINING_RUNTIMES).lists.append(([obj("torch-distributed", "2")], "2"))
    src.of(r.TRAINJOB_POLICIES).lists.append(([obj("limits", "3")], "3"))
    src.of(r.NAMESPACES).lists.append(([obj("team-a", "4", meta={"labels": {"tier": "gold"}}, spec={"finalizers": ["kubernetes"]})], "4"))
    src.of(r.DATASET_CACHES).lists.append(([obj("imagenet", "5", "team-a")], "5"))
    src.of(r.JOBSETS).lists.append(([obj("job", "6", "team-a", status={"replicatedJobsStatus": []})], "6"))
    src.of(r.PRIORITY_CLASSES).lists.append(([obj("high", "7"), obj("low", "8")], "8"))
    src.of(r.LOCAL_QUEUES).lists.append(([obj("gpu", "9", "team-a", spec={"clusterQueue": "cq", "stopPolicy": "None"})], "9"))
    src.of(r.CLUSTER_QUEUES).lists.append(([obj("cq", "10", spec={"admissionChecksStrategy": {"admissionChecks": [
        {"name": "mk"}, {"name": "prov", "onFlavors": ["a"]}]}, "cohortName": "org", "resourceGroups": [
        {"coveredResources": ["cpu", "nvidia.com/gpu"], "flavors": [
            {"name": "h100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "48", "borrowingLimit": "8",
                                            "lendingLimit": "4"}, {"name": "cpu", "nominalQuota": 96}]},
            "not-a-flavor"]}, 5]})], "10"))
    src.of(r.ADMISSION_CHECKS).lists.append(([obj("mk", "11", spec={"controllerName": "kueue.x-k8s.io/multikueue",
                                                                    "parameters": {"name": "cfg"}})], "11"))
    return src


async def test_snapshot_fields_come_from_the_caches() -> None:
    src = scripted()
    caches = ClusterCaches(src, ClusterSnapshot, backoff=lambda: Backoff(jitter=0))
    assert not caches.synced
    caches.start()
    await asyncio.wait_for(caches.wait_synced(), 10)
    snap = caches.snapshot()
    await caches.stop()
    assert caches.synced and all(caches.sync_state().values())
    assert snap.training_runtimes[("team-a", "torch")]["spec"] == {"k": 1}
    assert set(snap.cluster_training_runtimes) == {"torch-distributed"}
    assert set(snap.policies) == {"limits"}
    assert dict(snap.namespace_labels["team-a"]) == {"tier": "gold"}
    assert ("team-a", "imagenet") in snap.dataset_caches
    assert ("team-a", "job") in snap.jobsets
    assert snap.priority_classes == frozenset({"high", "low"})
    assert dict(snap.kueue_local_queues) == {("team-a", "gpu"): "cq"}
    assert dict(snap.kueue_cluster_queues) == {"cq": ("mk", "prov")}
    assert dict(snap.kueue_admission_checks) == {"mk": "kueue.x-k8s.io/multikueue"}
    # The quotas, from the same ClusterQueue watch (one informer for both fields); malformed entries skipped.
    assert snap.kueue_quotas["cq"]["cohort"] == "org"
    assert {f: dict(q) for f, q in snap.kueue_quotas["cq"]["flavors"].items()} == {
        "h100": {"nvidia.com/gpu": ("48", "8"), "cpu": (96, None)}}
    assert caches.informers["kueue_quotas"] is caches.informers["kueue_cluster_queues"]
    assert "kueue_quotas" not in caches.owned


async def test_snapshot_is_reused_until_a_cache_changes() -> None:
    src = scripted()
    src.of(r.PRIORITY_CLASSES).watches.append([ev("ADDED", obj("urgent", "9"))])
    gate = asyncio.Event()
    pc = src.of(r.PRIORITY_CLASSES)
    original_watch = pc.watch

    async def gated_watch(*a: Any, **kw: Any):
        await gate.wait()
        async for e in original_watch(*a, **kw):
            yield e

    pc.watch = gated_watch  # type: ignore[method-assign]
    caches = ClusterCaches(src, ClusterSnapshot, backoff=lambda: Backoff(jitter=0))
    caches.start()
    await asyncio.wait_for(caches.wait_synced(), 10)
    first = caches.snapshot()
    assert caches.snapshot() is first
    gate.set()
    await asyncio.wait_for(pc.idle.wait(), 10)
    second = caches.snapshot()
    await caches.stop()
    assert second is not first
    assert second.priority_classes == frozenset({"high", "low", "urgent"})
    # fields whose cache did not change are the very same objects
    assert second.training_runtimes is first.training_runtimes
    assert first.priority_classes == frozenset({"high", "low"})  # the old snapshot did not move


async def test_namespace_cache_keeps_only_labels() -> None:
    src = scripted()
    caches = ClusterCaches(src, ClusterSnapshot, backoff=lambda: Backoff(jitter=0))
    caches.start()
    await asyncio.wait_for(caches.wait_synced(), 10)
    stored = caches.informers["namespace_labels"].get("team-a")
    await caches.stop()
    assert stored == {"metadata": {"name": "team-a", "labels": {"tier": "gold"}, "resourceVersion": "4"}}


async def test_kueue_kinds_not_served_are_empty_and_do_not_hold_readiness() -> None:
    """A cluster without Kueue: 404 for its kinds is an empty, synced cache that keeps looking."""
    from trainguard.webhook.kube.errors import NotFound

    src = scripted()
    for res in (r.LOCAL_QUEUES, r.CLUSTER_QUEUES, r.ADMISSION_CHECKS):
        src.of(res).lists.clear()
        src.of(res).lists.extend([NotFound(404, "NotFound", "the server could not find the requested resource")] * 50)
    caches = ClusterCaches(src, ClusterSnapshot, backoff=lambda: Backoff(initial=0.01, maximum=0.01, jitter=0))
    caches.start()
    await asyncio.wait_for(caches.wait_synced(), 10)
    snap = caches.snapshot()
    await asyncio.sleep(0.1)
    retried = src.of(r.LOCAL_QUEUES).list_calls
    await caches.stop()
    assert caches.synced and all(caches.sync_state().values())
    assert caches.informers["kueue_local_queues"].absent
    assert snap.kueue_local_queues == {} and snap.kueue_admission_checks == {}
    assert retried > 1, "an absent kind is looked for again (Kueue installed later)"
    assert not caches.informers["priority_classes"].absent_ok, "only Kueue's kinds are optional"


async def test_kueue_installed_later_is_picked_up() -> None:
    """The CRD appears after the webhook started: the next look lists it and the snapshot has the queue."""
    from trainguard.webhook.kube.errors import NotFound

    src = scripted()
    lq = src.of(r.LOCAL_QUEUES)
    lq.lists.clear()
    lq.lists.extend([NotFound(404, "NotFound", "the server could not find the requested resource"),
                     ([obj("gpu", "12", "team-a", spec={"clusterQueue": "cq"})], "12")])
    caches = ClusterCaches(src, ClusterSnapshot, backoff=lambda: Backoff(initial=0.01, maximum=0.01, jitter=0))
    caches.start()
    await asyncio.wait_for(caches.wait_synced(), 10)
    await asyncio.wait_for(lq.idle.wait(), 10)
    snap = caches.snapshot()
    await caches.stop()
    assert not caches.informers["kueue_local_queues"].absent
    assert dict(snap.kueue_local_queues) == {("team-a", "gpu"): "cq"}
