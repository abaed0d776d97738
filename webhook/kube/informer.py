"""Watch-backed caches ("informers"): list once, then follow a watch, so readers never call the apiserver.

The loop is client-go's reflector in miniature:

* list (all pages) -> replace the store -> set ``synced`` -> watch from the list's resourceVersion with bookmarks;
* a watch that ends (server timeout) is reopened from the last resourceVersion seen (events or bookmarks);
* 410 Gone (the resourceVersion was compacted away) -> relist, emitting only the differences as events; a second
  410 before the watch has delivered anything (a list that keeps expiring, a watch refused at once) backs off
  instead of relisting in a tight loop;
* any other failure -> wait with exponential backoff (jittered, capped), then retry from where it stood. The store
  is kept meanwhile: a stale cache is better for admission than none, exactly like client-go's HasSynced staying true.
  The backoff resets only when a watch delivers something, not when a list succeeds, so a list that works
  followed by a watch that fails at once still backs off. An unexpected exception (a bug, a malformed frame) is
  logged and retried the same way: the loop never dies while ``synced`` stays set over a cache that stopped.
* ``absent_ok``: a type the apiserver does not serve (404 on list or watch: an optional CRD, e.g. Kueue's, not
  installed) is an empty, synced cache that keeps looking with the same backoff, so an optional kind never holds
  readiness back and is picked up once its CRD is installed. Any informer answered 404 sets ``not_served`` (and
  every failure ``last_error``) until a list succeeds, so /readyz can name an unserved CRD without asking again.

Handlers are plain functions called with a ``CacheEvent`` after the store has changed, in the event loop; they must
not block (the reconciler's work queue only records a key). A handler that raises is logged and skipped.
"""

from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Awaitable, Callable, Iterator, Literal, Protocol

import aiohttp

# object_key, (namespace, name), is the store's key: the caches' users import it from here.
from trainguard.webhook.api.views import Meta, object_key
from trainguard.webhook.api.views import resource_version as _rv
from trainguard.webhook.kube.client import WatchEvent
from trainguard.webhook.kube.errors import ApiError, Gone, NotFound
from trainguard.webhook.kube.resources import Resource

Object = dict[str, Any]
Key = tuple[str, str]  # (namespace, name); namespace is "" for cluster-scoped objects
EventType = Literal["ADDED", "MODIFIED", "DELETED"]

log = logging.getLogger("trainguard.kube.informer")


class ListWatcher(Protocol):
    """The two calls an informer needs; ``KubeClient`` provides them, tests provide a fake stream."""

    async def list_all(
        self, resource: Resource, namespace: str | None = None, *, label_selector: str | None = None
    ) -> tuple[list[Object], str]: ...

    def watch(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        resource_version: str | None = None,
        label_selector: str | None = None,
        allow_bookmarks: bool = True,
        timeout_seconds: int = 300,
    ) -> AsyncIterator[WatchEvent]: ...


@dataclass(frozen=True)
class CacheEvent:
    type: EventType
    obj: Object  # for DELETED: the last state the cache knew
    old: Object | None = None  # previous state for MODIFIED


Handler = Callable[[CacheEvent], None]


@dataclass
class Backoff:
    """Exponential backoff with jitter: initial, initial*factor, ... capped at ``maximum``; reset after success."""

    initial: float = 0.2
    factor: float = 2.0
    maximum: float = 30.0
    jitter: float = 0.2  # +- this fraction, so replicas that lost the apiserver together do not return together
    _attempt: int = field(default=0, repr=False)

    def next_delay(self) -> float:
        base = min(self.maximum, self.initial * self.factor**self._attempt)
        self._attempt += 1
        return base * (1 + random.uniform(-self.jitter, self.jitter)) if self.jitter else base

    def reset(self) -> None:
        self._attempt = 0


def strip_managed_fields(obj: Object) -> Object:
    """Default transform: managedFields are often most of an object's size and no reader of the cache needs them."""
    meta = Meta.of(obj).raw
    if "managedFields" in meta:
        obj = {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
    return obj


class Informer:
    """A cache of one resource type (optionally one namespace / label selector), kept current by list+watch."""

    def __init__(
        self,
        source: ListWatcher,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        transform: Callable[[Object], Object] = strip_managed_fields,
        backoff: Backoff | None = None,
        watch_timeout_seconds: int = 300,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        absent_ok: bool = False,
    ) -> None:
        self.resource = resource
        self.absent_ok = absent_ok
        # True while the apiserver answers 404 for the type itself (``absent_ok`` only).
        self.absent = False
        # True while list/watch answers 404 for the type (any informer: a required CRD absent, or not at this
        # version); ``last_error`` is the last failure's text. Both cleared by a list that succeeds.
        self.not_served = False
        self.last_error = ""
        self.namespace = namespace
        self.label_selector = label_selector
        self._source = source
        self._transform = transform
        self._backoff = backoff or Backoff()
        self._watch_timeout = watch_timeout_seconds
        self._sleep = sleep
        self._store: dict[Key, Object] = {}
        self._handlers: list[Handler] = []
        self._task: asyncio.Task[None] | None = None
        self.synced = asyncio.Event()
        # Last resourceVersion seen (list, event or bookmark): where the next watch resumes.
        self.resource_version = ""
        # Bumped on every change to the store; snapshot builders use it to rebuild only what changed.
        self.version = 0
        # Counters for metrics and tests.
        self.relists = 0
        self.failures = 0

    # ---- reading ---------------------------------------------------------------------------------------

    def get(self, name: str, namespace: str = "") -> Object | None:
        return self._store.get((namespace, name))

    def items(self) -> Iterator[tuple[Key, Object]]:
        return iter(list(self._store.items()))

    def keys(self) -> list[Key]:
        return list(self._store)

    def __len__(self) -> int:
        return len(self._store)

    def add_handler(self, handler: Handler) -> None:
        """Register a handler; it first receives ADDED for everything already cached, like a late client-go handler."""
        self._handlers.append(handler)
        for obj in list(self._store.values()):
            self._call(handler, CacheEvent("ADDED", obj))

    # ---- lifecycle -------------------------------------------------------------------------------------

    def start(self) -> asyncio.Task[None]:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self.run(), name=f"informer-{self.resource.plural}")
        return self._task

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    async def run(self) -> None:
        """List and watch until cancelled; never returns otherwise."""
        need_list = True
        gone_without_progress = 0
        while True:
            try:
                if need_list:
                    items, rv = await self._source.list_all(
                        self.resource, self.namespace, label_selector=self.label_selector
                    )
                    self._replace(items, rv)
                    need_list = False
                    self.absent = False
                    self.not_served = False
                    self.last_error = ""
                    self.synced.set()
                received = 0
                async for event in self._source.watch(
                    self.resource,
                    self.namespace,
                    resource_version=self.resource_version or None,
                    label_selector=self.label_selector,
                    allow_bookmarks=True,
                    timeout_seconds=self._watch_timeout,
                ):
                    self._apply(event)
                    received += 1
                    gone_without_progress = 0
                    self._backoff.reset()
                if received:
                    continue  # the server closed a healthy watch; resume at once
                # A watch that ends without even a bookmark is suspicious; do not spin on it.
                await self._sleep(self._backoff.next_delay())
            except Gone as e:
                self.relists += 1
                need_list = True
                log.info("%s: resourceVersion %s is gone (%s); relisting", self.resource.plural, self.resource_version, e.message)
                if gone_without_progress:
                    await self._sleep(self._backoff.next_delay())
                gone_without_progress += 1
            except asyncio.CancelledError:
                raise
            except (ApiError, aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError) as e:
                self.not_served = isinstance(e, ApiError) and e.code == 404
                self.last_error = f"{type(e).__name__}: {e}"
                if isinstance(e, NotFound) and self.absent_ok:
                    need_list = True
                    await self._absent(e)
                    continue
                self.failures += 1
                delay = self._backoff.next_delay()
                log.warning("%s: list/watch failed (%s: %s); retrying in %.2fs", self.resource.plural, type(e).__name__, e, delay)
                await self._sleep(delay)
            except Exception:  # a bug or a frame we cannot read: log it loudly, but keep the cache alive
                self.failures += 1
                delay = self._backoff.next_delay()
                log.exception("%s: unexpected list/watch failure; retrying in %.2fs", self.resource.plural, delay)
                await self._sleep(delay)

    async def _absent(self, err: NotFound) -> None:
        """The type is not served: an empty, synced cache; look again after the backoff."""
        if not self.absent:
            log.info("%s: not served by the apiserver (%s); an empty cache until it is", self.resource.plural, err.message)
            self.absent = True
            self._replace([], "")
        self.synced.set()
        await self._sleep(self._backoff.next_delay())

    # ---- store updates ---------------------------------------------------------------------------------

    def _replace(self, items: list[Object], resource_version: str) -> None:
        """Swap in a fresh list, telling handlers only what differs from the old store (a relist is quiet)."""
        fresh = {object_key(o): self._transform(o) for o in map(_checked, items)}
        old = self._store
        self._store = fresh
        self.resource_version = resource_version
        changed = False
        for key, obj in old.items():
            if key not in fresh:
                changed = True
                self._emit(CacheEvent("DELETED", obj))
        for key, obj in fresh.items():
            prev = old.get(key)
            if prev is None:
                changed = True
                self._emit(CacheEvent("ADDED", obj))
            elif _rv(prev) != _rv(obj):
                changed = True
                self._emit(CacheEvent("MODIFIED", obj, prev))
        if changed or not old:
            self.version += 1

    def _apply(self, event: WatchEvent) -> None:
        if type(event.object) is not dict:  # _checked, inlined: every watch event comes through here
            _checked(event.object)
        rv = _rv(event.object)
        if event.type == "BOOKMARK":
            if rv:
                self.resource_version = rv
            return
        if event.type not in ("ADDED", "MODIFIED", "DELETED"):
            log.warning("%s: ignoring watch event of type %r", self.resource.plural, event.type)
            return
        obj = self._transform(event.object)
        key = object_key(obj)
        if rv:
            self.resource_version = rv
        self.version += 1
        if event.type == "DELETED":
            self._store.pop(key, None)
            self._emit(CacheEvent("DELETED", obj))
            return
        prev = self._store.get(key)
        self._store[key] = obj
        # An ADDED for a key we hold (a watch replaying after reconnect) is a modification to handlers.
        self._emit(CacheEvent("ADDED", obj) if prev is None else CacheEvent("MODIFIED", obj, prev))

    def _emit(self, event: CacheEvent) -> None:
        for handler in list(self._handlers):
            self._call(handler, event)

    def _call(self, handler: Handler, event: CacheEvent) -> None:
        try:
            handler(event)
        except Exception:  # a handler bug must not stop the cache
            log.exception("%s: event handler %r failed", self.resource.plural, handler)


def _checked(obj: Any) -> Object:
    # The views read anything as an object (a list has no name); the store must not hold one: fail the round, which
    # is retried with backoff (the real client already refuses such a frame, see ``decode_watch_line``).
    if type(obj) is not dict:
        raise TypeError(f"a listed or watched object is not a JSON object: {type(obj).__name__}")
    return obj
