"""Work-queue semantics: dedup, one worker per key, backoff, global bucket, graceful shutdown."""

from __future__ import annotations

import asyncio

import pytest

from trainguard.controller.reconcile.queue import ExponentialBackoff, RateLimiter, ShutDown, TokenBucket, WorkQueue


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


# ---- rate limiters (pure, injected clock) ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "failures, expected",
    [(0, 0.005), (1, 0.01), (2, 0.02), (10, 5.12), (17, 655.36), (18, 1000.0), (200, 1000.0)],
)
def test_exponential_backoff_doubles_from_5ms_and_caps_at_1000s(failures: int, expected: float) -> None:
    backoff: ExponentialBackoff[str] = ExponentialBackoff()
    for _ in range(failures):
        backoff.when("a")
    assert backoff.when("a") == pytest.approx(expected)


def test_exponential_backoff_is_per_key_and_forget_resets() -> None:
    backoff: ExponentialBackoff[str] = ExponentialBackoff()
    for _ in range(5):
        backoff.when("a")
    assert backoff.when("b") == pytest.approx(0.005)
    assert backoff.retries("a") == 5
    backoff.forget("a")
    assert backoff.retries("a") == 0
    assert backoff.when("a") == pytest.approx(0.005)


def test_token_bucket_grants_burst_then_spreads_at_qps() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=10, burst=100, clock=clock)
    assert [bucket.when() for _ in range(100)] == [0.0] * 100
    # The 101st waits one token (0.1 s), the 102nd two.
    assert bucket.when() == pytest.approx(0.1)
    assert bucket.when() == pytest.approx(0.2)
    # Time refills the bucket at qps: after 1 s, 10 tokens came back, the debt of 2 is paid, 8 free.
    clock.now = 1.0
    assert [bucket.when() for _ in range(8)] == [0.0] * 8
    assert bucket.when() == pytest.approx(0.1)


def test_token_bucket_never_exceeds_burst_after_idle() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=10, burst=3, clock=clock)
    clock.now = 1e6
    assert [bucket.when() for _ in range(3)] == [0.0] * 3
    assert bucket.when() > 0


def test_rate_limiter_takes_the_larger_delay() -> None:
    clock = FakeClock()
    limiter: RateLimiter[str] = RateLimiter(ExponentialBackoff(), TokenBucket(qps=10, burst=1, clock=clock))
    assert limiter.when("a") == pytest.approx(0.005)  # bucket free, backoff 5 ms
    assert limiter.when("b") == pytest.approx(0.1)  # bucket empty: 0.1 s beats b's 5 ms
    limiter.forget("a")
    assert limiter.retries("a") == 0


# ---- queue ---------------------------------------------------------------------------------------------------
async def test_add_deduplicates_waiting_keys() -> None:
    q: WorkQueue[str] = WorkQueue()
    for key in ["a", "b", "a", "a", "b", "c"]:
        q.add(key)
    assert len(q) == 3
    assert [await q.get() for _ in range(3)] == ["a", "b", "c"]


async def test_key_added_while_processing_is_requeued_on_done_not_handed_out_twice() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("a")
    first = await q.get()
    q.add("a")  # a watch event while a worker holds "a"
    assert len(q) == 0, "must not be handed to a second worker"
    q.done(first)
    assert len(q) == 1
    assert await q.get() == "a"


async def test_no_key_is_reconciled_concurrently_by_many_workers() -> None:
    q: WorkQueue[int] = WorkQueue()
    active: set[int] = set()
    overlaps: list[int] = []
    handled: list[int] = []

    async def worker() -> None:
        while True:
            try:
                key = await q.get()
            except ShutDown:
                return
            if key in active:
                overlaps.append(key)
            active.add(key)
            await asyncio.sleep(0)  # yield so other workers run while we hold the key
            handled.append(key)
            # Re-adding the same keys while they are held must not start a second reconcile of them.
            q.add(key % 5)
            active.discard(key)
            q.done(key)

    workers = [asyncio.create_task(worker()) for _ in range(8)]
    for i in range(200):
        q.add(i % 5)
    while len(handled) < 100:
        await asyncio.sleep(0)
    await q.shutdown()
    await asyncio.gather(*workers)
    assert overlaps == []
    assert set(handled) == {0, 1, 2, 3, 4}


async def test_add_after_keeps_earliest_request_and_delivers() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add_after("a", 3600)
    q.add_after("a", 0.001)
    q.add_after("a", 7200)
    assert q.delayed == 1
    assert await asyncio.wait_for(q.get(), timeout=30) == "a"
    assert q.delayed == 0


async def test_add_rate_limited_uses_growing_backoff_until_forget() -> None:
    clock = FakeClock()
    limiter: RateLimiter[str] = RateLimiter(ExponentialBackoff(), TokenBucket(clock=clock))
    q: WorkQueue[str] = WorkQueue(limiter)
    for _ in range(3):
        q.add_rate_limited("a")
    assert q.retries("a") == 3
    q.forget("a")
    assert q.retries("a") == 0
    await q.shutdown()


async def test_shutdown_finishes_in_flight_work_and_stops_handing_out() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("busy")
    q.add("never")
    key = await q.get()
    release = asyncio.Event()
    finished: list[str] = []

    async def slow_worker() -> None:
        await release.wait()
        finished.append(key)
        q.done(key)

    task = asyncio.create_task(slow_worker())
    stopping = asyncio.create_task(q.shutdown())
    await asyncio.sleep(0)
    assert not stopping.done(), "shutdown must wait for the in-flight key"
    release.set()
    await stopping
    await task
    assert finished == ["busy"]
    with pytest.raises(ShutDown):
        await q.get()
    q.add("late")
    assert len(q) == 1  # "never" stays unprocessed; "late" is refused
