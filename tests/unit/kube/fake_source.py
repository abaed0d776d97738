"""A scripted stand-in for the apiserver's list and watch, for informer tests (no network, no clock)."""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any, AsyncIterator

from trainguard.webhook.kube.client import WatchEvent

Object = dict[str, Any]


def obj(name: str, rv: str, namespace: str = "", **extra: Any) -> Object:
    meta: dict[str, Any] = {"name": name, "resourceVersion": rv}
    if namespace:
        meta["namespace"] = namespace
    meta.update(extra.pop("meta", {}))
    return {"metadata": meta, **extra}


def ev(kind: str, o: Object) -> WatchEvent:
    return WatchEvent(kind, o)


class FakeSource:
    """Each list call pops the next scripted result (items, rv) or exception; each watch pops a script of events.

    When the watch scripts run out, the watch blocks forever and sets ``idle``: the informer has consumed
    everything the test scripted, so the test can look at the result.
    """

    def __init__(self) -> None:
        self.lists: deque[tuple[list[Object], str] | BaseException] = deque()
        self.watches: deque[list[WatchEvent | BaseException]] = deque()
        self.list_calls = 0
        self.watch_from: list[str | None] = []
        self.idle = asyncio.Event()

    async def list_all(self, resource: Any, namespace: str | None = None, *, label_selector: str | None = None):
        self.list_calls += 1
        result = self.lists.popleft()
        if isinstance(result, BaseException):
            raise result
        return result

    async def watch(
        self,
        resource: Any,
        namespace: str | None = None,
        *,
        resource_version: str | None = None,
        label_selector: str | None = None,
        allow_bookmarks: bool = True,
        timeout_seconds: int = 300,
    ) -> AsyncIterator[WatchEvent]:
        self.watch_from.append(resource_version)
        if not self.watches:
            self.idle.set()
            await asyncio.Event().wait()
        for item in self.watches.popleft():
            if isinstance(item, BaseException):
                raise item
            yield item


class RecordingSleep:
    """Replaces asyncio.sleep in the informer: records the delay asked for and yields control once."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)
        await asyncio.sleep(0)
