"""A byte budget for request bodies held at once, so that many large bodies cannot take the server's memory.

Each review reserves its declared ``Content-Length`` (a chunked body, which the apiserver never sends, reserves
the ``--max-body-bytes`` worst case) before its body is read, and releases it once the answer is sent: the bytes,
their parsed form and the policy's copies all live within that window. A reservation that does not fit waits
(without reading: the body stays in the kernel's socket buffer and TCP pushes back on the sender) until it fits or
its read deadline passes; the server then answers 503 and closes the connection.

Large bodies (over ``large_body_bytes``) may use only ``large_share`` of the budget between them, so the rest is
always there for the small reviews that nearly all TrainJobs are: forty clients withholding the end of 8 MiB bodies
hold at most ``large_share * total_bytes`` between them, and a 20 KB TrainJob review still gets through.

Pure bookkeeping (no clock): the caller bounds the wait with its own timeout.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

DEFAULT_BODY_BUDGET_BYTES = 32 * 1024 * 1024
DEFAULT_LARGE_BODY_BYTES = 1024 * 1024
LARGE_SHARE = 0.75


@dataclass(frozen=True)
class BudgetSettings:
    total_bytes: int = DEFAULT_BODY_BUDGET_BYTES
    large_body_bytes: int = DEFAULT_LARGE_BODY_BYTES
    large_share: float = LARGE_SHARE

    @property
    def large_bytes(self) -> int:
        return int(self.total_bytes * self.large_share)

    def check(self, max_body_bytes: int) -> None:
        """A body of ``max_body_bytes`` must be able to fit at all, or such a review would wait forever."""
        if self.large_body_bytes > self.total_bytes:
            raise ValueError(f"large body threshold {self.large_body_bytes} exceeds the body budget {self.total_bytes}")
        if max_body_bytes > self.large_bytes and max_body_bytes > self.large_body_bytes:
            raise ValueError(
                f"a {max_body_bytes}-byte body (--max-body-bytes) cannot fit the {self.large_bytes} bytes large bodies may "
                f"share ({self.large_share:.0%} of the {self.total_bytes}-byte body budget); raise the budget"
            )


class BodyBudget:
    def __init__(self, settings: BudgetSettings = BudgetSettings()) -> None:
        self.settings = settings
        self.in_use = 0
        self.large_in_use = 0
        self.peak = 0
        self._changed = asyncio.Condition()

    def _is_large(self, n: int) -> bool:
        return n > self.settings.large_body_bytes

    def fits(self, n: int) -> bool:
        if self.in_use + n > self.settings.total_bytes:
            return False
        return not self._is_large(n) or self.large_in_use + n <= self.settings.large_bytes

    def try_acquire(self, n: int) -> bool:
        if not self.fits(n):
            return False
        self.in_use += n
        if self._is_large(n):
            self.large_in_use += n
        self.peak = max(self.peak, self.in_use)
        return True

    async def acquire(self, n: int) -> None:
        """Wait until ``n`` bytes fit, then take them (first fit: a small body never queues behind a large one)."""
        if self.try_acquire(n):
            return
        async with self._changed:
            await self._changed.wait_for(lambda: self.try_acquire(n))

    async def release(self, n: int) -> None:
        self.in_use -= n
        if self._is_large(n):
            self.large_in_use -= n
        async with self._changed:
            self._changed.notify_all()

    def take_peak(self) -> int:
        peak, self.peak = self.peak, self.in_use
        return peak
