"""Rate-limited logs: one line per kind per interval with the suppressed count; the audit trail untouched."""

from __future__ import annotations

import asyncio
import logging

import pytest

from trainguard.webhook.admission.ratelimit import RateLimitedFilter, RateLimiter, rate_limited_exception_handler


def test_one_event_per_key_per_interval_with_the_suppressed_count() -> None:
    limiter = RateLimiter(10.0)
    got = [limiter.allow("emfile", t) for t in (0.0, 1.0, 2.0, 9.9, 10.0, 10.5, 25.0)]
    assert got == [0, None, None, None, 3, None, 1]
    assert limiter.allow("other", 1.0) == 0  # keys are independent


def test_zero_interval_allows_everything() -> None:
    limiter = RateLimiter(0.0)
    assert [limiter.allow("k", 0.0) for _ in range(3)] == [0, 0, 0]


def test_keys_are_bounded() -> None:
    limiter = RateLimiter(10.0, max_keys=2)
    for i in range(5):
        assert limiter.allow(i, 0.0) == 0
    assert len(limiter._last) == 2
    assert limiter.allow(0, 1.0) == 0  # forgotten, so allowed again


def record(level: int, msg: str, created: float, **extra: object) -> logging.LogRecord:
    r = logging.LogRecord("trainguard.admission", level, __file__, 1, msg, ("x",), None)
    r.created = created
    for k, v in extra.items():
        setattr(r, k, v)
    return r


def test_filter_limits_warnings_by_template_and_reason_and_never_info() -> None:
    f = RateLimitedFilter(RateLimiter(10.0))
    warnings = [f.filter(record(logging.WARNING, "rejected: %s", t, reason="busy")) for t in (0, 1, 2)]
    assert warnings == [True, False, False]
    assert f.filter(record(logging.WARNING, "rejected: %s", 1, reason="read_timeout"))  # another reason
    assert all(f.filter(record(logging.INFO, "admission %s", t)) for t in (0, 0, 0))
    later = record(logging.WARNING, "rejected: %s", 11, reason="busy")
    assert f.filter(later) and later.suppressed == 2  # type: ignore[attr-defined]


def test_event_loop_errors_are_limited_by_message() -> None:
    now = [0.0]
    seen: list[dict] = []
    handler = rate_limited_exception_handler(RateLimiter(10.0), clock=lambda: now[0])
    loop = asyncio.new_event_loop()
    try:
        loop.default_exception_handler = seen.append  # type: ignore[method-assign]
        for i in range(1000):
            now[0] = i * 0.015  # 15 s of "socket.accept() out of system resource", every 15 ms
            handler(loop, {"message": "socket.accept() out of system resource", "exception": OSError(24, "Too many open files"),
                           "socket": f"<socket fd={i}>"})
    finally:
        loop.close()
    assert len(seen) == 2
    assert "suppressed" in seen[1]["message"] and "666 more" in seen[1]["message"]


@pytest.mark.parametrize("interval", [-1.0])
def test_negative_interval_is_refused(interval: float) -> None:
    with pytest.raises(ValueError):
        RateLimiter(interval)
