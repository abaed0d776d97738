"""The cache agent: keeps a node's dataset shards in the page cache and hands their descriptors to clients.

One asyncio loop serves the Unix socket (``protocol`` frames; ``open`` replies carry the shard's fd through
SCM_RIGHTS), the HTTP probes/metrics, and a residency manager that warms the warm set, measures residency with
mincore and evicts least-recently-opened shards when the page cache held for this dataset exceeds the budget.
Blocking file work (hashing, warming, eviction, scans) runs in worker threads so slow storage never stalls
clients that only need a descriptor.

Never crash on a request: every per-connection failure is answered (when the stream still allows it) and logged,
and ends that connection only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import stat
import struct
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from controller.cache import pages
from controller.cache.index import ShardEntry, ShardIndex, checksum_fd
from controller.cache.protocol import (
    HEADER,
    LIST_PAGE_LIMIT,
    MAX_REQUEST_BYTES,
    ErrorCode,
    ProtocolError,
    decode_body,
    encode,
    error_reply,
)

log = logging.getLogger("trainguard.cache.agent")

Reporter = Callable[[int, int, bool], Awaitable[None]]  # (bytes resident, shards, warm)


@dataclass
class AgentConfig:
    root: str
    socket_path: str
    glob: str = "**/*"
    memory_budget: int = 0
    dataset: str = ""
    http_host: str = "0.0.0.0"
    http_port: int | None = 9108  # None: no HTTP endpoint (tests, benchmarks); 0: any free port
    max_connections: int = 256
    frame_timeout: float = 10.0  # a request frame, once begun, must complete within this
    maintain_interval: float | None = 5.0  # None: no background passes; the owner calls maintain()
    rescan_interval: float = 30.0
    socket_mode: int = 0o666  # trainer pods run as any UID; access is governed by who may mount the directory


def plan_warm_set(entries: list[ShardEntry], budget: int) -> list[ShardEntry]:
    """The shards to keep resident: most recently opened first, then never-opened ones by name, as many as fit.

    Greedy with skipping: a shard too large for what is left is passed over so smaller, less recent ones can
    still use the budget. Sizes count whole pages, as the page cache does.
    """
    ordered = sorted(entries, key=lambda e: (-e.last_access, e.name))
    chosen: list[ShardEntry] = []
    used = 0
    for entry in ordered:
        cost = _page_round(entry.size)
        if used + cost <= budget:
            chosen.append(entry)
            used += cost
    return chosen


def eviction_order(entries: list[ShardEntry], keep: set[str]) -> list[ShardEntry]:
    """Resident shards outside the warm set, least recently opened first (never opened: last by name first)."""
    return sorted(
        (e for e in entries if e.name not in keep and e.resident > 0),
        key=lambda e: (e.last_access, _reverse_key(e.name)),
    )


class AgentMetrics:
    """The agent's Prometheus series, in a registry of its own so several agents can live in one process."""

    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.shards = Gauge("trainguard_cache_shards", "Shards indexed under the dataset root", registry=r)
        self.bytes_indexed = Gauge("trainguard_cache_bytes_indexed", "Total size of indexed shards", registry=r)
        self.bytes_resident = Gauge(
            "trainguard_cache_bytes_resident", "Bytes of indexed shards in the page cache (mincore)", registry=r
        )
        self.budget = Gauge("trainguard_cache_memory_budget_bytes", "Configured memory budget", registry=r)
        self.ready = Gauge("trainguard_cache_ready", "1 once the warm set has been resident", registry=r)
        self.connections = Gauge("trainguard_cache_connections", "Open client connections", registry=r)
        self.opens = Counter("trainguard_cache_opens", "Shard descriptors handed out", registry=r)
        self.hits = Counter("trainguard_cache_hits", "Opens of shards fully resident at the time", registry=r)
        self.misses = Counter("trainguard_cache_misses", "Opens of shards not fully resident", registry=r)
        self.bytes_served = Counter(
            "trainguard_cache_bytes_served", "Sum of the sizes of shards handed out", registry=r
        )
        self.evictions = Counter("trainguard_cache_evictions", "Shards evicted from the page cache", registry=r)
        self.reindexed = Counter("trainguard_cache_reindexed", "Shards found changed on disk", registry=r)
        self.errors = Counter("trainguard_cache_request_errors", "Refused requests", ["code"], registry=r)


class CacheAgent:
    def __init__(self, config: AgentConfig, *, metrics: AgentMetrics | None = None, reporter: Reporter | None = None):
        self.config = config
        self.metrics = metrics or AgentMetrics()
        self.reporter = reporter
        self.index = ShardIndex(config.root, config.glob)
        self.ready = False
        self.http_port: int | None = None
        self._clock = 0
        self._server: socket.socket | None = None
        self._tasks: set[asyncio.Task] = set()
        self._connections: set[asyncio.Task] = set()
        self._runner: web.AppRunner | None = None
        self._wake = asyncio.Event()
        self._maintain_lock = asyncio.Lock()
        self._last_report: tuple[int, int, bool] | None = None
        self.metrics.budget.set(config.memory_budget)

    # -- lifecycle ---------------------------------------------------------------------------------------
    async def start(self) -> None:
        result = await asyncio.to_thread(self.index.scan)
        log.info("indexed dataset", extra={"fields": {"root": self.index.root, "shards": len(result.added),
                                                      "refused": result.refused[:20]}})
        self._publish_index_metrics()
        self._server = self._bind_socket()
        if self.config.http_port is not None:
            await self._start_http()
        self._spawn(self._accept_loop())
        if self.config.maintain_interval is not None:
            self._spawn(self._maintain_loop())
        self._spawn(self._rescan_loop())

    async def stop(self) -> None:
        for task in list(self._tasks) + list(self._connections):
            task.cancel()
        await asyncio.gather(*self._tasks, *self._connections, return_exceptions=True)
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.config.socket_path)
        if self._runner is not None:
            await self._runner.cleanup()

    async def maintain(self) -> None:
        """One residency pass now (tests and the loop both call it); serialised with the loop's passes."""
        async with self._maintain_lock:
            await asyncio.to_thread(self._maintain_blocking, list(self.index.entries.values()))
        self._publish_index_metrics()
        total = sum(e.resident for e in self.index.entries.values())
        report = (total, len(self.index.entries), self.ready)
        if self.reporter is not None and self._last_report != report:
            try:
                await self.reporter(*report)
                self._last_report = report
            except Exception as exc:  # reporting is best effort; serving must go on
                log.warning("could not report residency", extra={"fields": {"error": str(exc)}})

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _bind_socket(self) -> socket.socket:
        path = self.config.socket_path
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            mode = None
        if mode is not None:
            if not stat.S_ISSOCK(mode):
                raise RuntimeError(f"{path} exists and is not a socket; refusing to replace it")
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.connect(path)
            except OSError:
                os.unlink(path)  # left over from an agent that died
            else:
                raise RuntimeError(f"another cache agent is already serving on {path}")
            finally:
                probe.close()
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(path)
        os.chmod(path, self.config.socket_mode)
        server.listen(128)
        server.setblocking(False)
        log.info("serving", extra={"fields": {"socket": path}})
        return server

    async def _start_http(self) -> None:
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.config.http_host, self.config.http_port or 0))
        self.http_port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _readyz(self, request: web.Request) -> web.Response:
        if self.ready:
            return web.Response(text="ok\n")
        return web.Response(status=503, text="warm set not resident yet\n")

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    # -- serving -----------------------------------------------------------------------------------------
    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._server is not None
        while True:
            conn, _ = await loop.sock_accept(self._server)
            conn.setblocking(False)
            if len(self._connections) >= self.config.max_connections:
                self.metrics.errors.labels(ErrorCode.BUSY.value).inc()
                with contextlib.suppress(OSError):
                    conn.send(encode(error_reply(ErrorCode.BUSY, "too many connections; retry later")))
                conn.close()
                continue
            task = asyncio.ensure_future(self._serve_connection(conn))
            self._connections.add(task)
            self.metrics.connections.set(len(self._connections))
            task.add_done_callback(self._connection_done)

    def _connection_done(self, task: asyncio.Task) -> None:
        self._connections.discard(task)
        self.metrics.connections.set(len(self._connections))

    async def _serve_connection(self, conn: socket.socket) -> None:
        peer = _peer_credentials(conn)
        try:
            while True:
                first = await self._recv(conn, 1)
                if not first:
                    return  # clean close between requests
                try:
                    rest = await asyncio.wait_for(self._recv_exactly(conn, HEADER.size - 1), self.config.frame_timeout)
                    (length,) = HEADER.unpack(first + rest)
                    if length > MAX_REQUEST_BYTES:
                        self._count_error(ErrorCode.FRAME_TOO_LARGE, peer, f"{length} bytes")
                        await self._send(
                            conn,
                            error_reply(
                                ErrorCode.FRAME_TOO_LARGE,
                                f"request frame of {length} bytes exceeds {MAX_REQUEST_BYTES}; closing",
                            ),
                        )
                        return
                    body = await asyncio.wait_for(self._recv_exactly(conn, length), self.config.frame_timeout)
                except (asyncio.IncompleteReadError, asyncio.TimeoutError) as exc:
                    log.info("client left mid-request", extra={"fields": {**peer, "reason": type(exc).__name__}})
                    return
                reply, fd = await self._answer(body, peer)
                try:
                    await self._send(conn, reply, fd)
                finally:
                    if fd is not None:
                        os.close(fd)
        except (ConnectionError, BrokenPipeError) as exc:
            log.info("client connection lost", extra={"fields": {**peer, "error": str(exc)}})
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("connection failed", extra={"fields": peer})
        finally:
            conn.close()

    async def _answer(self, body: bytes, peer: dict) -> tuple[dict, int | None]:
        try:
            request = decode_body(body)
            return await self._dispatch(request)
        except ProtocolError as exc:
            self._count_error(exc.code, peer, exc.message)
            return error_reply(exc.code, exc.message), None
        except Exception as exc:
            log.exception("request failed", extra={"fields": peer})
            self.metrics.errors.labels(ErrorCode.INTERNAL.value).inc()
            return error_reply(ErrorCode.INTERNAL, f"{type(exc).__name__}: {exc}"), None

    async def _dispatch(self, request: dict) -> tuple[dict, int | None]:
        op = request.get("op")
        if op == "ping":
            return {"ok": True, "dataset": self.config.dataset, "ready": self.ready}, None
        if op == "list":
            offset, limit = request.get("offset", 0), request.get("limit", LIST_PAGE_LIMIT)
            if not _is_int(offset) or not _is_int(limit) or offset < 0 or not 0 < limit <= LIST_PAGE_LIMIT:
                raise ProtocolError(
                    ErrorCode.MALFORMED, f"'offset' must be >= 0 and 'limit' within 1..{LIST_PAGE_LIMIT}"
                )
            names = sorted(self.index.entries)
            page = [
                {"name": n, "size": self.index.entries[n].size} for n in names[offset : offset + limit]
            ]
            following = offset + limit if offset + limit < len(names) else None
            return {"ok": True, "shards": page, "total": len(names), "next": following}, None
        if op in ("stat", "open"):
            fd, entry = await self._open_fresh(request.get("shard"))
            if op == "stat":
                os.close(fd)
                return {"ok": True, "shard": entry.describe()}, None
            self._clock += 1
            entry.last_access = self._clock
            self.metrics.opens.inc()
            self.metrics.bytes_served.inc(entry.size)
            resident = entry.resident >= entry.size
            (self.metrics.hits if resident else self.metrics.misses).inc()
            if not resident and self.config.memory_budget > 0:
                self._wake.set()  # a cold shard became the most recent: let the residency manager warm it soon
            return {"ok": True, "shard": entry.describe()}, fd
        raise ProtocolError(ErrorCode.UNKNOWN_OP, f"unknown op {op!r}; expected ping, list, stat or open")

    async def _open_fresh(self, name: Any) -> tuple[int, ShardEntry]:
        """Open a shard and make sure its description matches the file behind the returned fd."""
        fd, entry, changed = self.index.open(name)
        try:
            if changed:
                self.metrics.reindexed.inc()
                log.info("shard changed on disk; re-indexed", extra={"fields": {"shard": entry.name}})
            if entry.checksum is None:
                checksum, st = await asyncio.to_thread(checksum_fd, fd)
                entry.refresh(st)
                entry.checksum = checksum
        except BaseException:
            os.close(fd)
            raise
        return fd, entry

    async def _recv(self, conn: socket.socket, n: int) -> bytes:
        return await asyncio.get_running_loop().sock_recv(conn, n)

    async def _recv_exactly(self, conn: socket.socket, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = await self._recv(conn, n - len(buf))
            if not chunk:
                raise asyncio.IncompleteReadError(bytes(buf), n)
            buf += chunk
        return bytes(buf)

    async def _send(self, conn: socket.socket, reply: dict, fd: int | None = None) -> None:
        data = encode(reply)
        loop = asyncio.get_running_loop()
        if fd is None:
            await loop.sock_sendall(conn, data)
            return
        while True:
            try:
                sent = socket.send_fds(conn, [data], [fd])
                break
            except BlockingIOError:
                writable = loop.create_future()
                loop.add_writer(conn.fileno(), lambda: writable.done() or writable.set_result(None))
                try:
                    await writable
                finally:
                    loop.remove_writer(conn.fileno())
        if sent < len(data):
            await loop.sock_sendall(conn, data[sent:])

    def _count_error(self, code: ErrorCode, peer: dict, message: str) -> None:
        self.metrics.errors.labels(code.value).inc()
        log.info("request refused", extra={"fields": {**peer, "code": code.value, "message": message}})

    # -- residency ---------------------------------------------------------------------------------------
    async def _maintain_loop(self) -> None:
        while True:
            try:
                await self.maintain()
            except Exception:
                log.exception("residency pass failed")
            self._wake.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.config.maintain_interval or 5.0)

    async def _rescan_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.rescan_interval)
            try:
                result = await asyncio.to_thread(self.index.scan)
            except Exception:
                log.exception("rescan failed")
                continue
            if result.added or result.removed or result.changed:
                self.metrics.reindexed.inc(len(result.changed))
                log.info("dataset changed", extra={"fields": {"added": len(result.added),
                                                              "removed": len(result.removed),
                                                              "changed": result.changed[:20]}})
                self._wake.set()

    def _maintain_blocking(self, entries: list[ShardEntry]) -> None:
        """Checksum what is new, warm the warm set, measure, then evict LRU shards while over budget."""
        budget = self.config.memory_budget
        warm_names = {e.name for e in plan_warm_set(entries, budget)}
        for entry in entries:
            try:
                fd = os.open(entry.path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
            except OSError:
                entry.resident = 0
                continue  # gone or replaced: the next open or rescan re-indexes it
            try:
                if entry.refresh(os.fstat(fd)):
                    self.metrics.reindexed.inc()
                if entry.checksum is None:
                    entry.checksum, st = checksum_fd(fd)
                    entry.refresh(st)
                if entry.name in warm_names:
                    pages.warm(fd, entry.size)
                entry.resident = pages.file_resident_bytes(fd)
            finally:
                os.close(fd)
        total = sum(e.resident for e in entries)
        for entry in eviction_order(entries, warm_names):
            if total <= budget:
                break
            try:
                fd = os.open(entry.path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
            except OSError:
                continue
            try:
                pages.evict(fd, entry.size)
                after = pages.file_resident_bytes(fd)
            finally:
                os.close(fd)
            total -= entry.resident - after
            entry.resident = after
            self.metrics.evictions.inc()
        if not self.ready and all(e.resident >= e.size for e in entries if e.name in warm_names):
            self.ready = True
            self.metrics.ready.set(1)
            log.info("warm set resident; ready", extra={"fields": {"shards": len(warm_names), "bytes": total}})

    def _publish_index_metrics(self) -> None:
        entries = list(self.index.entries.values())
        self.metrics.shards.set(len(entries))
        self.metrics.bytes_indexed.set(sum(e.size for e in entries))
        self.metrics.bytes_resident.set(sum(e.resident for e in entries))


def _peer_credentials(conn: socket.socket) -> dict:
    try:
        raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        pid, uid, gid = struct.unpack("3i", raw)
        return {"peerPid": pid, "peerUid": uid, "peerGid": gid}
    except OSError:
        return {}


def _page_round(size: int) -> int:
    return (size + pages.PAGE_SIZE - 1) // pages.PAGE_SIZE * pages.PAGE_SIZE


def _reverse_key(name: str) -> tuple[int, ...]:
    """Sort key placing names in reverse order: among never-opened shards, the last by name goes first,
    mirroring ``plan_warm_set`` which keeps the first by name."""
    return tuple(-ord(c) for c in name) + (1,)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
