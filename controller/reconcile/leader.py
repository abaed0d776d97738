"""Leader election on a ``coordination.k8s.io/v1`` Lease, with client-go's algorithm and defaults.

Only the leader reconciles; standbys keep their caches warm and poll the Lease every ``retry_period``.

* Expiry is judged on the LOCAL clock: a standby remembers when it last saw the Lease record change and
  considers it expired ``lease_duration`` after that, so clock skew between replicas does not matter
  (client-go ``observedTime``). A standby therefore takes over at most ``lease_duration + retry_period`` after
  the leader's last renewal.
* Every write carries the ``resourceVersion`` that was read: two candidates can never both win one round.
* The leader renews every ``retry_period``; if it cannot renew for ``renew_deadline`` it gives up leadership
  (the caller stops reconciling before another replica can take over, because renew_deadline < lease_duration).
* On graceful shutdown the leader releases the Lease (empty holder, 1 s duration) so a standby takes over at
  its next poll instead of waiting for expiry.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Protocol

from trainguard.webhook.api.apimachinery import format_micro_time
from trainguard.webhook.api.views import Lease

log = logging.getLogger(__name__)

Object = dict[str, Any]


class Conflict(Exception):
    """The Lease changed (or appeared) between our read and our write."""


class LeaseAPI(Protocol):
    """The three calls election needs on one named Lease."""

    async def get(self) -> Object | None: ...

    async def create(self, lease: Object) -> Object: ...

    async def replace(self, lease: Object) -> Object: ...


@dataclass(frozen=True)
class ElectionConfig:
    """client-go/controller-runtime defaults: 15 s lease, 10 s renew deadline, 2 s retry."""

    name: str
    namespace: str
    identity: str
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not (self.lease_duration > self.renew_deadline > self.retry_period * 1.2 > 0):
            raise ValueError(
                "leader election needs lease-duration > renew-deadline > 1.2 × retry-period > 0, got "
                f"{self.lease_duration}/{self.renew_deadline}/{self.retry_period}"
            )
        if not self.identity:
            raise ValueError("leader election identity must not be empty")



class LeaderElector:
    """One candidate. ``try_acquire_or_renew`` is one round; ``run`` is the loop around it."""

    def __init__(
        self,
        config: ElectionConfig,
        api: LeaseAPI,
        *,
        wall: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self._api = api
        self._wall = wall
        self._monotonic = monotonic
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._observed_lease: Object | None = None
        self._leading = False
        # Monotonic time at which the round that last wrote our Lease began: the renewTime others see is no later
        # than this, so the renew deadline counts from here (not from when a slow response finally arrived).
        self._renewed_at = 0.0

    @property
    def is_leader(self) -> bool:
        return self._leading

    @property
    def observed_holder(self) -> str | None:
        return Lease(self._observed_lease).holder_identity if self._observed_lease else None

    async def try_acquire_or_renew(self) -> bool:
        """One election round; True when we hold the Lease afterwards."""
        cfg = self.config
        started = self._monotonic()
        now = self._wall()
        lease = await self._api.get()
        if lease is None:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": cfg.name, "namespace": cfg.namespace},
                "spec": self._spec(now, acquire_time=now, transitions=0),
            }
            try:
                created = await self._api.create(body)
            except Conflict:
                return self._lost()
            return self._won(created, started)

        view = Lease(lease)
        record = view.record
        if record != self._observed:
            self._observed, self._observed_at, self._observed_lease = record, self._monotonic(), lease
        holder = view.holder_identity or ""
        duration = float(view.lease_duration_seconds or cfg.lease_duration)
        if holder and holder != cfg.identity and self._observed_at + duration > self._monotonic():
            return self._lost()

        transitions = int(view.lease_transitions or 0)
        if holder == cfg.identity:
            new_spec = self._spec(now, acquire_time=None, transitions=transitions)
            new_spec["acquireTime"] = view.acquire_time or format_micro_time(now)
        else:
            new_spec = self._spec(now, acquire_time=now, transitions=transitions + 1)
        updated = {**lease, "spec": new_spec}
        try:
            replaced = await self._api.replace(updated)
        except Conflict:
            return self._lost()
        return self._won(replaced, started)

    async def release(self) -> None:
        """Give the Lease up on graceful shutdown, so a standby need not wait for it to expire."""
        if not self._leading or self._observed_lease is None:
            return
        lease = await self._api.get()
        if lease is None or Lease(lease).holder_identity != self.config.identity:
            self._leading = False
            return
        now = self._wall()
        spec = dict(Lease(lease).spec)
        spec.update(holderIdentity="", leaseDurationSeconds=1, renewTime=format_micro_time(now),
                    acquireTime=format_micro_time(now))
        try:
            await self._api.replace({**lease, "spec": spec})
        except Conflict:
            log.warning("lease %s/%s changed while releasing it", self.config.namespace, self.config.name)
        self._leading = False

    async def acquire(self, stop: asyncio.Event) -> bool:
        """Poll every ``retry_period`` (with 20% jitter) until we lead (True) or ``stop`` is set (False)."""
        cfg = self.config
        while not stop.is_set():
            if await self._round():
                log.info("became leader of lease %s/%s as %s", cfg.namespace, cfg.name, cfg.identity)
                return True
            await _sleep_or_stop(stop, cfg.retry_period * (1 + random.random() * 0.2))
        return False

    async def keep(self, stop: asyncio.Event) -> bool:
        """Renew every ``retry_period`` until ``stop`` (returns False) or leadership is lost (returns True:
        the caller must stop reconciling at once). Lost means: no successful renewal for ``renew_deadline``, or
        another candidate holds the Lease.

        Each round is cut off when the renew deadline passes (client-go runs its renew rounds under a context with
        that deadline): a request to an apiserver that accepts the connection but never answers would otherwise
        hold the round for the client's whole request timeout, long after a standby may have taken over."""
        cfg = self.config
        while not stop.is_set():
            await _sleep_or_stop(stop, cfg.retry_period)
            if stop.is_set():
                return False
            remaining = cfg.renew_deadline - (self._monotonic() - self._renewed_at)
            try:
                async with asyncio.timeout(max(remaining, 0.0)):
                    renewed = await self._round()
            except TimeoutError:
                log.warning("lease %s/%s: renewal did not finish within the renew deadline", cfg.namespace, cfg.name)
                renewed = False
            if renewed:
                continue
            holder = self.observed_holder
            if holder and holder != cfg.identity:
                log.error("lease %s/%s is now held by %s", cfg.namespace, cfg.name, holder)
                self._leading = False
                return True
            if self._monotonic() - self._renewed_at >= cfg.renew_deadline:
                log.error("lost lease %s/%s: no renewal for %.1fs", cfg.namespace, cfg.name, cfg.renew_deadline)
                self._leading = False
                return True
        return False

    async def _round(self) -> bool:
        try:
            return await self.try_acquire_or_renew()
        except Exception as err:  # network errors are a failed round, not a crash
            log.warning("lease %s/%s: %s", self.config.namespace, self.config.name, err)
            return False

    def _spec(self, now: datetime, *, acquire_time: datetime | None, transitions: int) -> Object:
        spec: Object = {
            "holderIdentity": self.config.identity,
            "leaseDurationSeconds": int(round(self.config.lease_duration)),
            "renewTime": format_micro_time(now),
            "leaseTransitions": transitions,
        }
        if acquire_time is not None:
            spec["acquireTime"] = format_micro_time(acquire_time)
        return spec

    def _won(self, lease: Object, started: float) -> bool:
        self._observed, self._observed_at, self._observed_lease = Lease(lease).record, self._monotonic(), lease
        self._renewed_at = started
        self._leading = True
        return True

    def _lost(self) -> bool:
        self._leading = False
        return False


async def _sleep_or_stop(stop: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(stop.wait(), timeout=seconds)
    except asyncio.TimeoutError:
        pass
