"""The informer against a real 410: an apiserver of its own serves ConfigMap watches from etcd (its watch cache off for
them, ``--watch-cache-sizes=configmaps#0``) and compacts etcd every 2 s, so a watch from a position the informer held
before it stopped is answered ``410 Expired`` by the apiserver itself, and the informer relists.

(The shared session cluster keeps its watch cache, which replays from memory for at least 75 s after a compaction: a
real 410 there needs a wait no test can afford. ``test_kube_io_cluster.py`` injects one on it instead.)
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path
from typing import Any, AsyncIterator, Iterator

import pytest

from trainguard.webhook.kube import resources as r
from trainguard.webhook.kube.client import KubeClient
from trainguard.webhook.kube.config import load_config
from trainguard.webhook.kube.errors import Gone
from trainguard.webhook.kube.informer import Backoff, CacheEvent, Informer

REPO = Path(__file__).resolve().parents[3]
NAMESPACE = "default"
FLAGS = "--watch-cache-sizes=configmaps#0 --etcd-compaction-interval=2s"


@pytest.fixture(scope="module")
def compacting_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    state = tmp_path_factory.mktemp("compacting-cluster")
    env = {**os.environ, "TRAINGUARD_CLUSTER_DIR": str(state), "TRAINGUARD_APISERVER_FLAGS": FLAGS}
    up = subprocess.run([str(REPO / "hack" / "cluster.sh"), "up"], env=env, capture_output=True, text=True,
                        timeout=300)
    assert up.returncode == 0, up.stderr[-4000:]
    try:
        yield up.stdout.strip().splitlines()[-1]
    finally:
        subprocess.run([str(REPO / "hack" / "cluster.sh"), "down"], env=env, capture_output=True, timeout=120)


@pytest.fixture
async def kube(compacting_cluster: str) -> AsyncIterator[KubeClient]:
    async with KubeClient(load_config(compacting_cluster)) as k:
        yield k


class HeldSecondWatch:
    """The real client, except that the informer's second watch waits until the test lets it go: it stays away from
    the apiserver while etcd compacts past its position (nothing is injected: the 410 it then gets is the
    apiserver's)."""

    def __init__(self, kube: KubeClient) -> None:
        self.kube, self.watches, self.release = kube, 0, asyncio.Event()
        self.held = asyncio.Event()

    async def list_all(self, *a: Any, **kw: Any):
        return await self.kube.list_all(*a, **kw)

    async def watch(self, *a: Any, **kw: Any):
        self.watches += 1
        if self.watches == 2:
            self.held.set()
            await self.release.wait()
        async for event in self.kube.watch(*a, **kw):
            yield event


def configmap(name: str, **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NAMESPACE}, "data": data}


async def _until(predicate, timeout: float = 30) -> None:
    async def poll() -> None:
        while not predicate():
            await asyncio.sleep(0.05)

    await asyncio.wait_for(poll(), timeout)


async def _compacted_past(kube: KubeClient, rv: str, timeout: float = 30) -> None:
    """Until a watch from ``rv`` is refused with 410 by the apiserver (etcd compacted past it)."""
    async def probe() -> None:
        while True:
            try:
                async for _ in kube.watch(r.CONFIGMAPS, NAMESPACE, resource_version=rv, timeout_seconds=1):
                    pass
            except Gone:
                return
            await kube.merge_patch(r.CONFIGMAPS, "kept", {"data": {"tick": str(asyncio.get_running_loop().time())}},
                                   NAMESPACE)  # new revisions, so the next compaction moves past rv
            await asyncio.sleep(0.5)

    await asyncio.wait_for(probe(), timeout)


async def test_informer_relists_after_the_apiservers_own_410(kube: KubeClient) -> None:
    source = HeldSecondWatch(kube)
    seen: list[CacheEvent] = []
    # a short watch, so the first one ends by itself and the second is the one held back
    inf = Informer(source, r.CONFIGMAPS, namespace=NAMESPACE, backoff=Backoff(jitter=0), watch_timeout_seconds=1)
    inf.add_handler(seen.append)
    await kube.create(r.CONFIGMAPS, configmap("before"))
    await kube.create(r.CONFIGMAPS, configmap("kept"))
    inf.start()
    try:
        await asyncio.wait_for(inf.synced.wait(), 30)
        await kube.create(r.CONFIGMAPS, configmap("after"))
        await _until(lambda: inf.get("after", NAMESPACE) is not None)
        await asyncio.wait_for(source.held.wait(), 30)
        stale = inf.resource_version
        # While its watch is held back, the cluster changes and etcd compacts past the position it holds.
        await kube.delete(r.CONFIGMAPS, "before", NAMESPACE)
        await kube.merge_patch(r.CONFIGMAPS, "after", {"data": {"x": "1"}}, NAMESPACE)
        await _compacted_past(kube, stale)
        mark = len(seen)
        source.release.set()
        await _until(lambda: inf.relists == 1 and inf.get("before", NAMESPACE) is None)
        names = sorted((e.type, e.obj["metadata"]["name"]) for e in seen[mark:])
        assert ("DELETED", "before") in names and ("MODIFIED", "after") in names, names
        assert inf.get("after", NAMESPACE)["data"] == {"x": "1"}
        await kube.create(r.CONFIGMAPS, configmap("later"))
        await _until(lambda: inf.get("later", NAMESPACE) is not None)  # and it watches on from the relist
        assert inf.relists == 1 and inf.failures == 0
    finally:
        await inf.stop()
