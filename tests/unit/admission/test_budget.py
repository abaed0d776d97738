"""The body byte budget: what fits, first fit, the share kept for small bodies, waiting and waking."""

from __future__ import annotations

import asyncio

import pytest

from trainguard.webhook.admission.budget import BodyBudget, BudgetSettings

KiB, MiB = 1024, 1024 * 1024
SETTINGS = BudgetSettings(total_bytes=32 * MiB, large_body_bytes=1 * MiB, large_share=0.75)


@pytest.mark.parametrize(
    ("held", "n", "fits"),
    [
        ([], 8 * MiB, True),
        ([8 * MiB, 8 * MiB], 8 * MiB, True),  # 24 MiB of large bodies: exactly the large share
        ([8 * MiB, 8 * MiB, 8 * MiB], 8 * MiB, False),  # a fourth would eat the small bodies' share
        ([8 * MiB, 8 * MiB, 8 * MiB], 20 * KiB, True),  # a TrainJob review still fits
        ([8 * MiB, 8 * MiB, 8 * MiB], 1 * MiB, True),  # the threshold itself counts as small
        ([8 * MiB, 8 * MiB, 8 * MiB, *[1 * MiB] * 8], 1, False),  # the whole budget held
        ([1 * MiB] * 30, 2 * MiB, True),
        ([1 * MiB] * 31, 2 * MiB, False),
    ],
    ids=["empty", "large-share-exact", "large-share-full", "small-after-large", "threshold-small", "full",
         "large-after-small", "large-over-total"],
)
def test_what_fits(held: list[int], n: int, fits: bool) -> None:
    budget = BodyBudget(SETTINGS)
    for h in held:
        assert budget.try_acquire(h)
    assert budget.fits(n) is fits
    assert budget.try_acquire(n) is fits


async def test_a_waiting_body_gets_in_when_another_releases() -> None:
    budget = BodyBudget(SETTINGS)
    for _ in range(3):
        assert budget.try_acquire(8 * MiB)
    waiter = asyncio.create_task(budget.acquire(8 * MiB))
    await asyncio.sleep(0.05)
    assert not waiter.done()
    await budget.acquire(20 * KiB)  # first fit: a small body does not queue behind the large one
    await budget.release(8 * MiB)
    await asyncio.wait_for(waiter, 1)
    assert budget.in_use == 24 * MiB + 20 * KiB and budget.large_in_use == 24 * MiB


async def test_a_cancelled_wait_takes_nothing() -> None:
    budget = BodyBudget(SETTINGS)
    assert budget.try_acquire(24 * MiB)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await budget.acquire(8 * MiB)
    assert budget.in_use == 24 * MiB
    await budget.release(24 * MiB)
    assert budget.in_use == 0 and budget.large_in_use == 0
    assert budget.take_peak() == 24 * MiB and budget.take_peak() == 0


@pytest.mark.parametrize(
    ("settings", "max_body", "message"),
    [
        (BudgetSettings(total_bytes=8 * MiB), 8 * MiB, "cannot fit"),
        (BudgetSettings(total_bytes=1 * MiB, large_body_bytes=2 * MiB), 512 * KiB, "exceeds the body budget"),
    ],
)
def test_a_budget_too_small_for_the_largest_body_is_refused(settings: BudgetSettings, max_body: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        settings.check(max_body)


def test_the_defaults_fit_the_default_body_limit() -> None:
    BudgetSettings().check(8 * MiB)
