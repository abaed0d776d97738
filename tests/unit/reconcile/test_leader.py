"""Lease election rounds against an in-memory Lease with resourceVersion checks and injected clocks."""

from __future__ import annotations

import asyncio
import copy
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from trainguard.controller.reconcile.leader import Conflict, ElectionConfig, LeaderElector


class MemoryLease:
    """One Lease object with optimistic concurrency, as the apiserver enforces it."""

    def __init__(self) -> None:
        self.obj: dict[str, Any] | None = None
        self.version = 0
        self.fail = False

    async def get(self) -> dict[str, Any] | None:
        if self.fail:
            raise OSError("apiserver unreachable")
        return copy.deepcopy(self.obj)

    async def create(self, lease: dict[str, Any]) -> dict[str, Any]:
        if self.obj is not None:
            raise Conflict("exists")
        self.version += 1
        self.obj = copy.deepcopy(lease)
        self.obj["metadata"]["resourceVersion"] = str(self.version)
        return copy.deepcopy(self.obj)

    async def replace(self, lease: dict[str, Any]) -> dict[str, Any]:
        assert self.obj is not None
        if lease["metadata"].get("resourceVersion") != self.obj["metadata"]["resourceVersion"]:
            raise Conflict("stale")
        self.version += 1
        self.obj = copy.deepcopy(lease)
        self.obj["metadata"]["resourceVersion"] = str(self.version)
        return copy.deepcopy(self.obj)

    @property
    def holder(self) -> str | None:
        return None if self.obj is None else self.obj["spec"]["holderIdentity"]


class Clock:
    def __init__(self) -> None:
        self.mono = 0.0

    def advance(self, seconds: float) -> None:
        self.mono += seconds

    def wall(self) -> datetime:
        return datetime(2026, 1, 1, tzinfo=timezone.utc) + timedelta(seconds=self.mono)


def candidate(lease: MemoryLease, clock: Clock, identity: str) -> LeaderElector:
    cfg = ElectionConfig(name="trainguard", namespace="ns", identity=identity)
    return LeaderElector(cfg, lease, wall=clock.wall, monotonic=lambda: clock.mono)


@pytest.mark.parametrize("durations", [(15, 10, 2), (3, 2, 0.5)])
def test_config_accepts_ordered_durations(durations: tuple[float, float, float]) -> None:
    ElectionConfig("l", "ns", "me", *durations)


@pytest.mark.parametrize("durations", [(10, 10, 2), (15, 10, 9), (15, 10, 0)])
def test_config_rejects_unordered_durations(durations: tuple[float, float, float]) -> None:
    with pytest.raises(ValueError, match="lease-duration > renew-deadline"):
        ElectionConfig("l", "ns", "me", *durations)


async def test_first_candidate_creates_the_lease_and_second_stays_standby() -> None:
    lease, clock = MemoryLease(), Clock()
    a, b = candidate(lease, clock, "a"), candidate(lease, clock, "b")
    assert await a.try_acquire_or_renew()
    assert not await b.try_acquire_or_renew()
    assert lease.holder == "a"
    assert lease.obj["spec"]["leaseDurationSeconds"] == 15
    assert lease.obj["spec"]["leaseTransitions"] == 0


async def test_renewal_keeps_acquire_time_and_transitions() -> None:
    lease, clock = MemoryLease(), Clock()
    a = candidate(lease, clock, "a")
    await a.try_acquire_or_renew()
    acquired = lease.obj["spec"]["acquireTime"]
    clock.advance(2)
    assert await a.try_acquire_or_renew()
    assert lease.obj["spec"]["acquireTime"] == acquired
    assert lease.obj["spec"]["renewTime"] != acquired
    assert lease.obj["spec"]["leaseTransitions"] == 0


async def test_standby_takes_over_only_after_the_lease_expires_on_its_own_clock() -> None:
    lease, clock = MemoryLease(), Clock()
    a, b = candidate(lease, clock, "a"), candidate(lease, clock, "b")
    await a.try_acquire_or_renew()
    assert not await b.try_acquire_or_renew()  # b first sees the record at t=0
    clock.advance(14.9)  # a has died; the record is unchanged
    assert not await b.try_acquire_or_renew()
    clock.advance(0.2)
    assert await b.try_acquire_or_renew()
    assert lease.holder == "b"
    assert lease.obj["spec"]["leaseTransitions"] == 1


async def test_renewals_by_the_leader_keep_the_standby_out() -> None:
    lease, clock = MemoryLease(), Clock()
    a, b = candidate(lease, clock, "a"), candidate(lease, clock, "b")
    await a.try_acquire_or_renew()
    for _ in range(20):
        clock.advance(2)
        assert await a.try_acquire_or_renew()
        assert not await b.try_acquire_or_renew()
    assert lease.holder == "a"


async def test_release_lets_a_standby_take_over_immediately() -> None:
    lease, clock = MemoryLease(), Clock()
    a, b = candidate(lease, clock, "a"), candidate(lease, clock, "b")
    await a.try_acquire_or_renew()
    assert not await b.try_acquire_or_renew()
    await a.release()
    assert lease.holder == ""
    assert not a.is_leader
    assert await b.try_acquire_or_renew()


async def test_concurrent_write_loses_on_resource_version() -> None:
    lease, clock = MemoryLease(), Clock()
    a, b = candidate(lease, clock, "a"), candidate(lease, clock, "b")
    await a.try_acquire_or_renew()
    await b.try_acquire_or_renew()
    clock.advance(16)
    stale = await lease.get()
    assert await b.try_acquire_or_renew()  # b takes the expired lease first
    stale["spec"]["holderIdentity"] = "a"
    with pytest.raises(Conflict):
        await lease.replace(stale)


async def test_keep_reports_loss_after_renew_deadline_without_apiserver() -> None:
    lease, clock = MemoryLease(), Clock()
    cfg = ElectionConfig(name="l", namespace="ns", identity="a", lease_duration=0.3, renew_deadline=0.2,
                         retry_period=0.01)
    a = LeaderElector(cfg, lease, wall=clock.wall)  # real monotonic clock: keep() sleeps for real
    assert await a.try_acquire_or_renew()
    lease.fail = True
    assert await asyncio.wait_for(a.keep(asyncio.Event()), timeout=30) is True
    assert not a.is_leader


async def test_keep_returns_false_on_stop() -> None:
    lease, clock = MemoryLease(), Clock()
    a = candidate(lease, clock, "a")
    await a.try_acquire_or_renew()
    stop = asyncio.Event()
    stop.set()
    assert await a.keep(stop) is False


async def test_keep_gives_up_at_the_renew_deadline_when_the_apiserver_never_answers() -> None:
    """A renew request that hangs (connection accepted, no answer) must not outlive the renew deadline: past it a
    standby may take over, so the leader has to report the loss by then, not after the client's request timeout."""
    lease, clock = MemoryLease(), Clock()
    cfg = ElectionConfig(name="l", namespace="ns", identity="a", lease_duration=0.6, renew_deadline=0.4,
                         retry_period=0.1)
    a = LeaderElector(cfg, lease, wall=clock.wall)  # real monotonic clock
    assert await a.try_acquire_or_renew()
    hung = asyncio.Event()

    async def never_answers() -> None:
        hung.set()
        await asyncio.sleep(3600)

    lease.get = never_answers  # type: ignore[method-assign]
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await asyncio.wait_for(a.keep(asyncio.Event()), timeout=5) is True
    assert hung.is_set()
    assert loop.time() - started < cfg.lease_duration
    assert not a.is_leader


async def test_renew_deadline_counts_from_when_the_successful_round_started() -> None:
    """renewTime is stamped at the start of a round; a slow answer must not extend the leader's own deadline."""
    lease, clock = MemoryLease(), Clock()
    a = candidate(lease, clock, "a")
    real_replace = lease.replace

    async def slow_replace(obj: dict[str, Any]) -> dict[str, Any]:
        clock.advance(9)  # the write lands, but its answer takes 9 s of the 10 s renew deadline
        return await real_replace(obj)

    assert await a.try_acquire_or_renew()
    lease.replace = slow_replace  # type: ignore[method-assign]
    assert await a.try_acquire_or_renew()
    assert a._renewed_at == 0.0  # noqa: SLF001 - the round started at t=0, the answer came at t=9
