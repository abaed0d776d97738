"""Stopping the workers: graceful shutdown finishes in-flight reconciles within a grace period; losing
leadership cancels them at once (another replica may already be reconciling the same objects)."""

from __future__ import annotations

import asyncio

from controller.reconcile.controller import TRAINJOB, Controller, Settings
from controller.reconcile.metrics import Metrics


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
