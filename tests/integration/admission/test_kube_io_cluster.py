"""trainguard.webhook.kube against the real apiserver: verbs and their errors (404/409/422 with the Status message),
server-side apply, status patch, watch, and an informer that lists, watches and relists after a 410."""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator

import pytest

from trainguard.webhook.kube import resources as r
from trainguard.webhook.kube.client import KubeClient
from trainguard.webhook.kube.config import load_config
from trainguard.webhook.kube.errors import AlreadyExists, Conflict, Gone, Invalid, NotFound
from trainguard.webhook.kube.informer import Backoff, CacheEvent, Informer


@pytest.fixture
async def kube(cluster) -> AsyncIterator[KubeClient]:
    async with KubeClient(load_config(cluster.kubeconfig)) as k:
        yield k


def configmap(name: str, namespace: str, **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}, "data": data}


def jobset(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": name, "namespace": namespace},
        "spec": {"suspend": True, "replicatedJobs": [{"name": "node", "replicas": 1, "template": {"spec": {"template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "node", "image": "busybox:1.36"}]}}}}}]},
    }


async def test_verbs_and_errors(kube: KubeClient, namespace: str) -> None:
    created = await kube.create(r.CONFIGMAPS, configmap("a", namespace, k="1"))
    with pytest.raises(AlreadyExists):
        await kube.create(r.CONFIGMAPS, configmap("a", namespace))
    stale = {**created, "data": {"k": "2"}}
    await kube.replace(r.CONFIGMAPS, stale)
    with pytest.raises(Conflict) as conflict:
        await kube.replace(r.CONFIGMAPS, {**created, "data": {"k": "3"}})  # created's resourceVersion is now stale
    assert "the object has been modified" in conflict.value.message
    patched = await kube.merge_patch(r.CONFIGMAPS, "a", {"data": {"m": "x"}}, namespace)
    assert patched["data"] == {"k": "2", "m": "x"}
    await kube.delete(r.CONFIGMAPS, "a", namespace)
    with pytest.raises(NotFound) as missing:
        await kube.get(r.CONFIGMAPS, "a", namespace)
    assert missing.value.message == 'configmaps "a" not found'
    with pytest.raises(Invalid) as invalid:
        await kube.create(r.CONFIGMAPS, configmap("Not_A_Name", namespace))
    assert "metadata.name" in invalid.value.message


async def test_server_side_apply_and_status_patch(kube: KubeClient, namespace: str) -> None:
    applied = await kube.apply(r.JOBSETS, jobset("j", namespace), field_manager="trainguard-test")
    assert applied["spec"]["replicatedJobs"][0]["name"] == "node"
    managers = {m["manager"] for m in applied["metadata"]["managedFields"]}
    assert "trainguard-test" in managers
    again = await kube.apply(r.JOBSETS, jobset("j", namespace), field_manager="trainguard-test")
    assert again["metadata"]["resourceVersion"] == applied["metadata"]["resourceVersion"]  # no-op apply
    status = await kube.patch_status(r.JOBSETS, "j", {"restarts": 2}, namespace, field_manager="trainguard-test")
    assert status["status"]["restarts"] == 2
    dry = await kube.apply(r.JOBSETS, {**jobset("k", namespace)}, field_manager="trainguard-test", dry_run=True)
    assert dry["metadata"]["name"] == "k"
    with pytest.raises(NotFound):
        await kube.get(r.JOBSETS, "k", namespace)


async def test_watch_streams_events_and_bookmarks(kube: KubeClient, namespace: str) -> None:
    _, rv = await kube.list_all(r.CONFIGMAPS, namespace)
    await kube.create(r.CONFIGMAPS, configmap("w", namespace))
    events = []
    async for ev in kube.watch(r.CONFIGMAPS, namespace, resource_version=rv, timeout_seconds=5):
        events.append(ev)
        if ev.type == "ADDED" and ev.object["metadata"]["name"] == "w":
            break
    assert events[-1].object["metadata"]["name"] == "w"


class GoneOnNextWatch:
    """The real client, except that the next watch fails with 410 as if etcd had compacted past our position.

    A real 410 needs the apiserver's watch cache to roll past the resourceVersion (it replays from memory even
    after an etcd compaction, and keeps events at least 75 s), which a test cannot wait for; the relist that
    follows is real.
    """

    def __init__(self, kube: KubeClient) -> None:
        self.kube = kube
        self.armed = False

    async def list_all(self, *a: Any, **kw: Any):
        return await self.kube.list_all(*a, **kw)

    def watch(self, *a: Any, **kw: Any):
        if self.armed:
            self.armed = False
            return self._gone(kw.get("resource_version"))
        return self.kube.watch(*a, **kw)

    async def _gone(self, rv: str | None):
        raise Gone(410, "Expired", f"too old resource version: {rv}")
        yield  # pragma: no cover  (makes this an async generator)


async def test_informer_lists_watches_and_relists_after_gone(kube: KubeClient, namespace: str) -> None:
    source = GoneOnNextWatch(kube)
    seen: list[CacheEvent] = []
    inf = Informer(source, r.CONFIGMAPS, namespace=namespace, backoff=Backoff(jitter=0), watch_timeout_seconds=30)
    inf.add_handler(seen.append)
    await kube.create(r.CONFIGMAPS, configmap("before", namespace))
    await kube.create(r.CONFIGMAPS, configmap("kept", namespace))
    inf.start()
    try:
        await asyncio.wait_for(inf.synced.wait(), 30)
        assert inf.get("before", namespace) is not None
        await kube.create(r.CONFIGMAPS, configmap("after", namespace))
        await _until(lambda: inf.get("after", namespace) is not None)
        # While the informer is not watching, the cluster changes; its next watch is answered 410 and it relists.
        await inf.stop()
        await kube.delete(r.CONFIGMAPS, "before", namespace)
        await kube.merge_patch(r.CONFIGMAPS, "after", {"data": {"x": "1"}}, namespace)
        mark = len(seen)
        source.armed = True
        inf.start()
        await _until(lambda: inf.relists == 1 and inf.get("before", namespace) is None)
        after_relist = sorted((e.type, e.obj["metadata"]["name"]) for e in seen[mark:])
        assert after_relist == [("DELETED", "before"), ("MODIFIED", "after")]  # "kept" unchanged: no event
        assert inf.get("after", namespace)["data"] == {"x": "1"}
        # and it watches on from the relist
        await kube.create(r.CONFIGMAPS, configmap("later", namespace))
        await _until(lambda: inf.get("later", namespace) is not None)
    finally:
        await inf.stop()


async def _until(predicate, timeout: float = 30) -> None:
    async def poll() -> None:
        while not predicate():
            await asyncio.sleep(0.05)

    await asyncio.wait_for(poll(), timeout)
