"""The reconcile work queue: client-go's rate-limited workqueue semantics on asyncio.

Guarantees the reconciler relies on:
* a key waiting in the queue is held once, however many watch events name it (dedup);
* a key is handed to at most one worker at a time; an ``add`` while it is being processed marks it dirty and it
  is queued again when the worker calls ``done`` (so no event is lost and no key is reconciled concurrently);
* failures are retried after ``max(per-key exponential backoff, global token bucket)``, the default
  controller-runtime limiter (5 ms doubling to 1000 s per key; 10 qps with a burst of 100 overall);
* ``shutdown`` stops handing out keys and waits for the ones in flight to be finished.

Time is injected (``clock``) so the rate limiters are tested without sleeping.
"""

from __future__ import annotations

import asyncio
import collections
import time
from dataclasses import dataclass, field
from typing import Callable, Generic, Hashable, TypeVar

K = TypeVar("K", bound=Hashable)
Clock = Callable[[], float]


@dataclass
class ExponentialBackoff(Generic[K]):
    """Per-key delay ``base * 2**failures`` capped at ``cap`` (client-go ItemExponentialFailureRateLimiter)."""

    base: float = 0.005
    cap: float = 1000.0
    _failures: dict[K, int] = field(default_factory=dict)

    def when(self, key: K) -> float:
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        # 2**failures overflows float only far beyond the cap; stop doubling once we are there.
        if failures >= 64:
            return self.cap
        return min(self.base * (2**failures), self.cap)

    def forget(self, key: K) -> None:
        self._failures.pop(key, None)

    def retries(self, key: K) -> int:
        return self._failures.get(key, 0)


@dataclass
class TokenBucket:
    """A global token bucket (golang.org/x/time/rate ``Reserve``): returns how long the caller must wait.

    Tokens may go negative: every reservation is granted, later ones simply wait longer, which spreads a burst
    of failures at ``qps`` once the ``burst`` allowance is spent.
    """

    qps: float = 10.0
    burst: int = 100
    clock: Clock = time.monotonic
    _tokens: float | None = None
    _last: float | None = None

    def when(self, key: object = None) -> float:
        now = self.clock()
        if self._tokens is None or self._last is None:
            self._tokens, self._last = float(self.burst), now
        elapsed = max(0.0, now - self._last)
        self._tokens = min(float(self.burst), self._tokens + elapsed * self.qps)
        self._last = now
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    def forget(self, key: object = None) -> None:
        """The bucket is global: forgetting one key does not return its token."""

    def retries(self, key: object = None) -> int:
        return 0


@dataclass
class RateLimiter(Generic[K]):
    """The larger of the per-key backoff and the global bucket (client-go DefaultControllerRateLimiter)."""

    per_key: ExponentialBackoff[K] = field(default_factory=ExponentialBackoff)
    overall: TokenBucket = field(default_factory=TokenBucket)

    def when(self, key: K) -> float:
        return max(self.per_key.when(key), self.overall.when(key))

    def forget(self, key: K) -> None:
        self.per_key.forget(key)

    def retries(self, key: K) -> int:
        return self.per_key.retries(key)


class ShutDown(Exception):
    """Raised by ``WorkQueue.get`` once the queue is shut down: the worker should return."""


class WorkQueue(Generic[K]):
    """A deduplicating, delaying, rate-limited queue of keys for N asyncio workers."""

    def __init__(self, limiter: RateLimiter[K] | None = None) -> None:
        self._limiter: RateLimiter[K] = limiter or RateLimiter()
        self._order: collections.deque[K] = collections.deque()
        self._dirty: set[K] = set()
        self._processing: set[K] = set()
        # key -> (due time on the loop clock, timer handle); only the earliest due time is kept.
        self._waiting: dict[K, tuple[float, asyncio.TimerHandle]] = {}
        # Futures of workers blocked in ``get`` or ``shutdown``; all are woken on every change (few workers).
        self._sleepers: list[asyncio.Future[None]] = []
        self._shutting_down = False

    # ---- adding -------------------------------------------------------------------------------------------
    def add(self, key: K) -> None:
        """Queue ``key`` now; a no-op if it is already waiting, deferred to ``done`` if it is being processed."""
        if self._shutting_down or key in self._dirty:
            return
        self._dirty.add(key)
        if key not in self._processing:
            self._order.append(key)
            self._notify()

    def add_after(self, key: K, delay: float) -> None:
        """Queue ``key`` after ``delay`` seconds; an earlier pending request for the same key wins."""
        if self._shutting_down:
            return
        if delay <= 0:
            self.add(key)
            return
        loop = asyncio.get_running_loop()
        due = loop.time() + delay
        pending = self._waiting.get(key)
        if pending is not None:
            if pending[0] <= due:
                return
            pending[1].cancel()
        self._waiting[key] = (due, loop.call_at(due, self._fire, key))

    def add_rate_limited(self, key: K) -> None:
        """Retry ``key`` after the limiter's delay (grows with each failure until ``forget``)."""
        self.add_after(key, self._limiter.when(key))

    def forget(self, key: K) -> None:
        """Reset ``key``'s backoff after a success; does not remove it from the queue."""
        self._limiter.forget(key)

    def retries(self, key: K) -> int:
        return self._limiter.retries(key)

    def _fire(self, key: K) -> None:
        self._waiting.pop(key, None)
        self.add(key)

    # ---- consuming ----------------------------------------------------------------------------------------
    async def get(self) -> K:
        """The next key to reconcile; the caller owns it until ``done``. Raises ``ShutDown`` when stopping."""
        while True:
            if self._shutting_down:
                raise ShutDown()
            if self._order:
                key = self._order.popleft()
                self._processing.add(key)
                self._dirty.discard(key)
                return key
            await self._sleep()

    def done(self, key: K) -> None:
        """Mark ``key`` finished; if it was added meanwhile, it goes back in line now."""
        self._processing.discard(key)
        if key in self._dirty and not self._shutting_down:
            self._order.append(key)
        self._notify()

    # ---- state --------------------------------------------------------------------------------------------
    def __len__(self) -> int:
        """Keys ready to be handed out (the ``depth`` metric); excludes in-flight and delayed keys."""
        return len(self._order)

    @property
    def in_flight(self) -> frozenset[K]:
        return frozenset(self._processing)

    @property
    def delayed(self) -> int:
        return len(self._waiting)

    @property
    def shutting_down(self) -> bool:
        return self._shutting_down

    def begin_shutdown(self) -> None:
        """Stop handing out keys and drop delayed ones, without waiting for the keys in flight."""
        self._shutting_down = True
        for _, handle in self._waiting.values():
            handle.cancel()
        self._waiting.clear()
        self._notify()

    async def shutdown(self) -> None:
        """Stop handing out keys, drop delayed ones, and wait until every in-flight key is ``done``."""
        self.begin_shutdown()
        while self._processing:
            await self._sleep()

    async def _sleep(self) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._sleepers.append(future)
        try:
            await future
        finally:
            if future in self._sleepers:
                self._sleepers.remove(future)

    def _notify(self) -> None:
        sleepers, self._sleepers = self._sleepers, []
        for future in sleepers:
            if not future.done():
                future.set_result(None)
