"""Stopping the workers: graceful shutdown finishes in-flight reconciles within a grace period; losing
leadership cancels them at once (another replica may already be reconciling the same objects)."""

from __future__ import annotations

import asyncio

from trainguard.controller.reconcile.controller import TRAINJOB, Controller, Settings
from trainguard.controller.reconcile.metrics import Metrics


class NoKube:
    """Nothing here talks to the apiserver: caches are never started and ``_process`` is replaced."""


def controller_with(process) -> Controller:  # type: ignore[no-untyped-def]
    c = Controller(NoKube(), Settings(workers=2, watch_podgroups=False), Metrics(), "test")  # type: ignore[arg-type]
    c._process = process  # type: ignore[method-assign]
    return c


async def test_abort_cancels_in_flight_reconciles_at_once() -> None:
    started, finished, cancelled = asyncio.Event(), [], []

    async def slow(key) -> None:  # type: ignore[no-untyped-def]
        started.set()
        try:
            await asyncio.sleep(30)
            finished.append(key)
        except asyncio.CancelledError:
            cancelled.append(key)
            raise

    c = controller_with(slow)
    c.start_workers()
    c.queue.add((TRAINJOB, "ns", "a"))
    await asyncio.wait_for(started.wait(), 5)
    await asyncio.wait_for(c.abort_workers(), 2)
    assert cancelled == [(TRAINJOB, "ns", "a")] and not finished
    assert c.queue.shutting_down and not c.queue.in_flight


async def test_graceful_shutdown_lets_in_flight_work_finish() -> None:
    started, finished = asyncio.Event(), []

    async def short(key) -> None:  # type: ignore[no-untyped-def]
        started.set()
        await asyncio.sleep(0.05)
        finished.append(key)

    c = controller_with(short)
    c.start_workers()
    c.queue.add((TRAINJOB, "ns", "a"))
    await asyncio.wait_for(started.wait(), 5)
    await asyncio.wait_for(c.shutdown_workers(grace=5), 5)
    assert finished == [(TRAINJOB, "ns", "a")]


async def test_graceful_shutdown_cancels_what_outlives_the_grace_period() -> None:
    started = asyncio.Event()

    async def stuck(key) -> None:  # type: ignore[no-untyped-def]
        started.set()
        await asyncio.sleep(3600)

    c = controller_with(stuck)
    c.start_workers()
    c.queue.add((TRAINJOB, "ns", "a"))
    await asyncio.wait_for(started.wait(), 5)
    await asyncio.wait_for(c.shutdown_workers(grace=0.1), 5)
    assert not c.queue.in_flight and not c._workers


async def test_leading_again_after_a_lost_lease_starts_from_every_object_in_the_caches() -> None:
    from trainguard.controller.reconcile.controller import DATASET_CACHE, RUNTIME_SNAPSHOT
    from trainguard.webhook.kube.informer import WatchEvent

    seen: list = []
    done = asyncio.Event()

    async def record(key) -> None:  # type: ignore[no-untyped-def]
        seen.append(key)
        if len(seen) == 3:
            done.set()

    c = controller_with(record)
    c.trainjobs._apply(WatchEvent("ADDED", {"metadata": {"name": "a", "namespace": "ns", "uid": "u", "resourceVersion": "1"}}))
    c.dataset_caches._apply(WatchEvent("ADDED", {"metadata": {"name": "d", "namespace": "ns", "resourceVersion": "1"}}))
    c.snapshots._apply(WatchEvent("ADDED", {"metadata": {"name": "runtime-snapshot-u", "namespace": "trainguard-system",
                                                         "resourceVersion": "1"}}))
    c.start_workers()
    await asyncio.wait_for(done.wait(), 5)
    await c.abort_workers()  # the Lease is lost: the old queue is shut down
    seen.clear()
    done.clear()
    c.start_workers()  # leading again
    await asyncio.wait_for(done.wait(), 5)
    assert sorted(seen) == sorted([(TRAINJOB, "ns", "a"), (DATASET_CACHE, "ns", "d"),
                                   (RUNTIME_SNAPSHOT, "trainguard-system", "runtime-snapshot-u")])
    # The watch handlers feed the new queue, not the one that was shut down.
    c.trainjobs._apply(WatchEvent("ADDED", {"metadata": {"name": "b", "namespace": "ns", "uid": "v", "resourceVersion": "2"}}))
    await asyncio.sleep(0.05)
    assert seen[-1] == (TRAINJOB, "ns", "b")
    await c.shutdown_workers(grace=1)


async def test_a_lost_lease_means_campaigning_again_not_exiting() -> None:
    from trainguard.controller.reconcile.main import lead

    calls: list[str] = []
    stop = asyncio.Event()

    class Elector:
        terms = 0

        async def acquire(self, stop_: asyncio.Event) -> bool:
            calls.append("acquire")
            return True

        async def keep(self, stop_: asyncio.Event) -> bool:
            self.terms += 1
            if self.terms == 1:
                return True  # the renew deadline passed (an apiserver outage)
            stop.set()  # second term: SIGTERM
            return False

        async def release(self) -> None:
            calls.append("release")

    class Workers:
        def start_workers(self) -> None:
            calls.append("start")

        async def abort_workers(self) -> None:
            calls.append("abort")

        async def shutdown_workers(self, grace: float | None = None) -> None:
            calls.append("shutdown")

    metrics = Metrics()
    assert await asyncio.wait_for(lead(Workers(), Elector(), stop, metrics, 1.0), 5) == 0
    assert calls == ["acquire", "start", "abort", "acquire", "start", "shutdown", "release"]
    assert metrics.leadership_lost._value.get() == 1 and metrics.leader._value.get() == 0
