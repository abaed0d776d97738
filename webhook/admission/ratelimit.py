"""Rate-limited error logs: one line per kind of trouble per interval, with a count of what was left out.

Under a connection flood the same warning repeats thousands of times a second (asyncio's "socket.accept() out of
system resource", a rejection per request); at a soft nofile limit of 1024 that was 120 MB of logs in 15 s. Logs
are for people: one line per interval says as much, and the count of suppressed lines keeps the size of the event.

* ``RateLimiter`` is the pure part (the caller passes the time): per key, one event per ``interval``.
* ``RateLimitedFilter`` applies it to log records at WARNING and above, keyed by logger, message template and the
  record's ``reason`` (per-review INFO lines, the audit trail, are never limited).
* ``rate_limited_exception_handler`` applies it to the event loop's exception handler, keyed by the context's
  message and exception type (asyncio's default handler formats objects into the message, so a log filter would
  see every line as new).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import OrderedDict
from typing import Any, Callable, Hashable

DEFAULT_LOG_INTERVAL = 10.0


class RateLimiter:
    """``allow(key, now)`` is None while ``key`` is suppressed, else how many events of ``key`` it suppressed since
    the last one it allowed. Remembers at most ``max_keys`` keys (the least recently allowed are forgotten)."""

    def __init__(self, interval: float, max_keys: int = 1024) -> None:
        if interval < 0:
            raise ValueError(f"interval must not be negative, got {interval}")
        self.interval = interval
        self.max_keys = max_keys
        self._last: OrderedDict[Hashable, float] = OrderedDict()
        self._suppressed: dict[Hashable, int] = {}

    def allow(self, key: Hashable, now: float) -> int | None:
        last = self._last.get(key)
        if last is not None and now - last < self.interval:
            self._suppressed[key] = self._suppressed.get(key, 0) + 1
            return None
        self._last[key] = now
        self._last.move_to_end(key)
        while len(self._last) > self.max_keys:
            old, _ = self._last.popitem(last=False)
            self._suppressed.pop(old, None)
        return self._suppressed.pop(key, 0)


class RateLimitedFilter(logging.Filter):
    def __init__(self, limiter: RateLimiter, level: int = logging.WARNING) -> None:
        super().__init__()
        self.limiter = limiter
        self.level = level
        self._lock = threading.Lock()  # policy worker threads log too

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < self.level or self.limiter.interval == 0:
            return True
        key = (record.name, str(record.msg), getattr(record, "reason", None))
        with self._lock:
            suppressed = self.limiter.allow(key, record.created)
        if suppressed is None:
            return False
        if suppressed:
            record.suppressed = suppressed  # rendered as a field by the JSON formatter
        return True


def rate_limited_exception_handler(
    limiter: RateLimiter, clock: Callable[[], float] = time.monotonic,
) -> Callable[[asyncio.AbstractEventLoop, dict[str, Any]], None]:
    def handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        key = ("asyncio", context.get("message"), type(exc).__name__ if exc is not None else None)
        suppressed = limiter.allow(key, clock())
        if suppressed is None:
            return
        if suppressed:
            context = {**context, "message": f"{context.get('message')} ({suppressed} more like this suppressed)"}
        loop.default_exception_handler(context)

    return handle
