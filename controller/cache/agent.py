"""The cache agent: keeps a node's dataset shards in the page cache and hands their descriptors to clients.

One asyncio loop serves the Unix socket (``protocol`` frames; ``open`` replies carry the shard's fd through
SCM_RIGHTS), the HTTP probes/metrics, and a residency manager that warms the warm set, measures residency with
mincore and evicts least-recently-opened shards when the page cache held for this dataset exceeds the budget.
Blocking file work (hashing, warming, eviction, scans) runs in worker threads so slow storage never stalls
clients that only need a descriptor.

Never crash on a request: every per-connection failure is answered (when the stream still allows it) and logged,
and ends that connection only.

Who may connect. The socket is created ``socket_mode`` (0660) with group ``socket_group``, inside a per-DatasetCache
host directory (``trainguard.webhook.runtime.dataset_cache``) that the trainer pods of that cache's TrainJobs mount and whose
pods carry that group in ``supplementalGroups``. The kernel refuses ``connect`` to anyone else without
CAP_DAC_OVERRIDE; on top of that the agent reads each connection's SO_PEERCRED / SO_PEERGROUPS and refuses
(``Forbidden``) a peer whose group or supplementary groups do not include ``socket_group`` (root in a container has
CAP_DAC_OVERRIDE and passes the mode bits; the group check still refuses it). The group is not a secret (any pod
author can list any GID in ``supplementalGroups``): the boundary is who can *reach* the socket, i.e. who can mount
its host directory, which only the controller's JobSets do for TrainJobs in the cache's own namespace and which
Pod Security baseline forbids to everyone else (hostPath volumes). The group narrows that further to the
containers meant to use the cache (and keeps host users and hostPath-capable pods without the group out).

Limits, so that no peer can starve the others (each measured per connection and per peer, a peer being the
SO_PEERCRED (uid, pid); a process in another pid namespace, i.e. any other pod, shows pid 0, so there a peer is
a uid):

* connections: ``max_connections`` in all, ``max_connections_per_peer`` per peer. At the limit a newcomer takes
  the least recently active connection of the peer holding the most connections, if that peer holds more than
  the newcomer's would, and that connection has nothing in progress (its client reconnects transparently on its
  next request: every request is idempotent); otherwise the newcomer is answered ``Busy``, which the client
  retries with backoff.
* time: a frame, once begun, must complete within ``frame_timeout``; a connection that neither sent a byte nor
  took a whole reply for ``idle_timeout`` is closed, whether idle or stalled (a client that stopped reading its
  replies, or reads them a trickle at a time).
* descriptors in flight: SCM_RIGHTS descriptors sent but not yet received are charged by the kernel to the
  *sender's* user (``unix_inflight``), and once that count exceeds the sender's RLIMIT_NOFILE every further send of
  descriptors by any process of that user fails with ETOOMANYREFS. The count is not released when the sender
  closes its end, only when the receiver reads the descriptors or closes its end. So the agent bounds what it has
  in flight: per connection (``max_unread_fds``), per peer (at most a quarter of the total) and in all
  (``max_unread_fds_total``, at most half the agent's RLIMIT_NOFILE), using SIOCOUTQ (bytes this end sent that the
  peer has not consumed; 0 means every descriptor sent was received) to learn when a client has read. A connection whose next request could exceed a
  bound is not read from until its client reads; a connection the agent closes while its client still holds
  unread descriptors is shut down but kept (not served, counted) until the client reads or closes, so closing and
  reconnecting cannot shed the charge. Residual risk: the kernel's count is per UID node-wide, so processes of
  other pods running as the agent's UID share it.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import logging
import os
import resource
import socket
import stat
import struct
import termios
from collections import deque
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from trainguard.cache import pages
from trainguard.cache.index import ShardEntry, ShardIndex, checksum_fd
from trainguard.cache.report import Reporter  # (bytes resident, shards, warm)
from trainguard.process.probes import Probe, probe_app, serve_probes
from trainguard.cache.protocol import (
    HEADER,
    LIST_PAGE_LIMIT,
    MAX_OPEN_BATCH,
    MAX_REQUEST_BYTES,
    ErrorCode,
    ProtocolError,
    decode_body,
    encode,
    error_reply,
    open_batch_names,
)

log = logging.getLogger("trainguard.cache.agent")



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
    max_connections_per_peer: int = 128  # a peer: SO_PEERCRED (uid, pid); pid is 0 for peers in other pods
    frame_timeout: float = 10.0  # a request frame, once begun, must complete within this
    idle_timeout: float = 60.0  # a connection without traffic for this long is closed (idle or stalled)
    max_unread_fds: int = 4 * MAX_OPEN_BATCH  # descriptors sent on one connection and not yet received
    max_unread_fds_per_peer: int = 16 * MAX_OPEN_BATCH
    max_unread_fds_total: int = 64 * MAX_OPEN_BATCH  # and at most half of RLIMIT_NOFILE (see the module docstring)
    maintain_interval: float | None = 5.0  # None: no background passes; the owner calls maintain()
    rescan_interval: float = 30.0
    socket_mode: int = 0o660
    socket_group: int | None = None  # None: the agent's own group; only peers in this group are served


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
        self.closed = Counter(
            "trainguard_cache_connections_closed_by_agent",
            "Connections the agent closed: idle, evicted (for a newcomer), forbidden, busy",
            ["reason"],
            registry=r,
        )
        self.unread_fds = Gauge(
            "trainguard_cache_unread_fds", "Descriptors sent and not yet received by clients (upper bound)", registry=r
        )


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
        self._connections: set[_Connection] = set()
        self._peer_connections: dict[tuple[int, int], int] = {}
        self._lingering: set[_Connection] = set()  # closed for serving, their clients still hold unread descriptors
        self._unread_by_peer: dict[tuple[int, int], int] = {}
        self._unread_total = 0
        self._refreshed_all = float("-inf")
        self.unread_limit_total = config.max_unread_fds_total
        self.unread_limit_peer = config.max_unread_fds_per_peer
        self.unread_limit_connection = config.max_unread_fds
        self.socket_gid = os.getegid() if config.socket_group is None else config.socket_group
        self.metrics.unread_fds.set_function(lambda: self._unread_total)  # read at scrape time, not per request
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
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY:
            # The kernel refuses descriptors in flight past RLIMIT_NOFILE for the agent's whole UID: stay well below.
            self.unread_limit_total = max(MAX_OPEN_BATCH, min(self.config.max_unread_fds_total, soft // 2))
        # One peer never holds more than a quarter of the total, so others keep getting descriptors.
        self.unread_limit_peer = min(self.config.max_unread_fds_per_peer,
                                     max(MAX_OPEN_BATCH, self.unread_limit_total // 4))
        self.unread_limit_connection = min(self.config.max_unread_fds, self.unread_limit_peer)
        self._server = self._bind_socket()
        if self.config.http_port is not None:
            await self._start_http()
        self._spawn(self._accept_loop())
        self._spawn(self._sweep_loop())
        if self.config.maintain_interval is not None:
            self._spawn(self._maintain_loop())
        self._spawn(self._rescan_loop())

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for connection in list(self._connections):
            connection.close()
        for connection in list(self._lingering):
            connection.release()
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.config.socket_path)
        if self._runner is not None:
            await self._runner.cleanup()
        self.index.close()

    async def maintain(self) -> None:
        """One residency pass now (tests and the loop both call it); serialised with the loop's passes."""
        async with self._maintain_lock:
            await asyncio.to_thread(self._maintain_blocking, list(self.index.entries.values()))
        self._publish_index_metrics()
        # list() copies the values in one C call, which a scan in a worker thread cannot interleave with; a
        # generator over the live dict could raise "dictionary changed size during iteration".
        entries = list(self.index.entries.values())
        total = sum(e.resident for e in entries)
        report = (total, len(entries), self.ready)
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
        server.bind(path)  # created with the umask's mode (0755 at most): no one else can connect before the chmod
        try:
            if self.socket_gid != os.getegid():
                os.chown(path, -1, self.socket_gid)  # the agent is a member of the group (its pod's supplementalGroups)
            os.chmod(path, self.config.socket_mode)
        except OSError:
            server.close()
            os.unlink(path)
            raise
        server.listen(128)
        server.setblocking(False)
        log.info("serving", extra={"fields": {"socket": path, "mode": oct(self.config.socket_mode),
                                              "group": self.socket_gid}})
        return server

    async def _start_http(self) -> None:
        # Bound here, not by the server, so port 0 (tests) is resolved before the probes answer.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.config.http_host, self.config.http_port or 0))
        self.http_port = sock.getsockname()[1]
        app = probe_app(ready=self._probe, metrics=lambda: generate_latest(self.metrics.registry))
        self._runner = await serve_probes(app, sock=sock)

    def _probe(self) -> Probe:
        return Probe(True) if self.ready else Probe(False, "warm set not resident yet\n")

    # -- serving -----------------------------------------------------------------------------------------
    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._server is not None
        while True:
            try:
                conn, _ = await loop.sock_accept(self._server)
            except OSError as exc:
                # EMFILE/ENFILE (out of descriptors), ENOBUFS, ECONNABORTED...: transient. Letting it end this
                # task would leave the agent alive, ready, and deaf to every new client.
                log.warning("accept failed; retrying", extra={"fields": {"error": str(exc)}})
                await asyncio.sleep(0.1)
                continue
            conn.setblocking(False)
            peer = _peer_credentials(conn)
            if peer is None or not self._allowed(peer):
                self._refuse(conn, peer, ErrorCode.FORBIDDEN,
                             f"this socket serves members of group {self.socket_gid} only")
                continue
            if not self._make_room(peer.key):
                self._refuse(conn, peer, ErrorCode.BUSY, "too many connections; retry later")
                continue
            connection = _Connection(self, conn, loop, peer)
            self._connections.add(connection)
            self._peer_connections[peer.key] = self._peer_connections.get(peer.key, 0) + 1
            self.metrics.connections.set(len(self._connections))
            connection.start()

    def _allowed(self, peer: "Peer") -> bool:
        return peer.gid == self.socket_gid or self.socket_gid in peer.groups

    def _refuse(self, conn: socket.socket, peer: "Peer | None", code: ErrorCode, message: str) -> None:
        self.metrics.closed.labels(code.value.lower()).inc()
        self._count_error(code, peer.fields if peer else {}, message)
        with contextlib.suppress(OSError):
            conn.send(encode(error_reply(code, message)))
        conn.close()

    def _make_room(self, key: tuple[int, int]) -> bool:
        """Whether a newcomer of peer ``key`` may connect, closing another connection to make room if fair.

        Within its peer's limit and the total: yes. Over its peer's limit: only by taking that peer's own least
        recently active connection. Over the total: by taking the least recently active connection of the peer
        holding the most connections, if it holds more than ``key`` would. Only connections with nothing in
        progress are taken (their clients reconnect on their next request)."""
        mine = self._peer_connections.get(key, 0)
        if mine >= self.config.max_connections_per_peer:
            return self._evict(lambda c: c.peer.key == key)
        if len(self._connections) < self.config.max_connections:
            return True
        heaviest = max(self._peer_connections.items(), key=lambda item: item[1], default=(None, 0))
        if heaviest[1] <= mine + 1:
            return False
        return self._evict(lambda c: c.peer.key == heaviest[0])

    def _evict(self, eligible: Callable[["_Connection"], bool]) -> bool:
        candidates = [c for c in self._connections if eligible(c) and not c.in_progress()]
        if not candidates:
            return False
        victim = min(candidates, key=lambda c: c.last_active)
        log.info("connection closed for a newcomer", extra={"fields": victim.peer.fields})
        self.metrics.closed.labels("evicted").inc()
        victim.close()
        return True

    def _connection_done(self, connection: "_Connection") -> None:
        self._connections.discard(connection)
        key = connection.peer.key
        left = self._peer_connections.get(key, 0) - 1
        if left > 0:
            self._peer_connections[key] = left
        else:
            self._peer_connections.pop(key, None)
        self.metrics.connections.set(len(self._connections))

    # -- descriptors in flight ---------------------------------------------------------------------------
    def _charge(self, connection: "_Connection", count: int) -> None:
        connection.unread += count
        key = connection.key
        self._unread_by_peer[key] = self._unread_by_peer.get(key, 0) + count
        self._unread_total += count

    def _uncharge(self, connection: "_Connection", count: int) -> None:
        connection.unread -= count
        key = connection.key
        left = self._unread_by_peer.get(key, 0) - count
        if left > 0:
            self._unread_by_peer[key] = left
        else:
            self._unread_by_peer.pop(key, None)
        self._unread_total -= count

    def _discharge(self, connection: "_Connection") -> None:
        self._uncharge(connection, connection.unread)

    def _room_for_fds(self, connection: "_Connection") -> bool:
        """Whether ``connection`` may be answered now: the largest reply (``MAX_OPEN_BATCH`` descriptors) must fit
        within its own, its peer's and the agent's bound on descriptors not yet received. The charges are upper
        bounds, refreshed (one SIOCOUTQ each) only when they do not fit: the common case costs no system call."""
        if self._fits(connection):
            return True
        connection.refresh_unread()
        if not self._fits(connection):
            now = asyncio.get_running_loop().time()
            if now - self._refreshed_all >= _HOLD_POLL_SECONDS:  # at most once per poll interval, however many wait
                self._refreshed_all = now
                for other in list(self._connections) + list(self._lingering):  # learn what other clients have read
                    other.refresh_unread()
        return self._fits(connection)

    def _fits(self, connection: "_Connection") -> bool:
        return (
            connection.unread + MAX_OPEN_BATCH <= self.unread_limit_connection
            and self._unread_total + MAX_OPEN_BATCH <= self.unread_limit_total
            and self._unread_by_peer.get(connection.key, 0) + MAX_OPEN_BATCH <= self.unread_limit_peer
        )

    async def _sweep_loop(self) -> None:
        """Close connections without traffic for ``idle_timeout``; release lingering ones once their clients read."""
        interval = max(0.01, min(1.0, self.config.idle_timeout / 4))
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(interval)
            now = loop.time()
            for connection in list(self._connections):
                if connection.slow is None and now - connection.last_active >= self.config.idle_timeout:
                    log.info("closing a connection without traffic", extra={"fields": {
                        **connection.peer.fields, "idleSeconds": round(now - connection.last_active, 1),
                        "stalled": connection.in_progress()}})
                    self.metrics.closed.labels("idle").inc()
                    connection.close()
            for connection in list(self._lingering):
                connection.refresh_unread()
                if not connection.unread:
                    connection.release()

    def _answer_now(self, body: bytes, peer: dict) -> tuple[bytes, list[int]] | None:
        """Answer a request without leaving the event-loop callback, or None when it needs the slow path.

        The fast path covers every request that needs no blocking work: ping, list, and stat/open/open_many of
        shards that ``ShardIndex.open_fast`` can serve (indexed, checksummed, unchanged since). Anything else,
        errors about names included, goes to ``_answer``, which re-resolves, re-indexes and hashes as needed.
        """
        try:
            request = decode_body(body)
            op = request.get("op")
            if op == "open" or op == "stat":
                with self.index.lock:
                    opened = self.index.open_fast(request.get("shard"))
                    if opened is None:
                        return None
                    fd, entry = opened
                    if op == "stat":
                        os.close(fd)
                        return encode({"ok": True, "shard": entry.describe()}), []
                    self._served(entry)
                    return entry.open_reply(), [fd]
            if op == "open_many":
                names = open_batch_names(request)
                fds: list[int] = []
                entries: list[ShardEntry] = []
                with self.index.lock:
                    for name in names:
                        opened = self.index.open_fast(name)
                        if opened is None:
                            _close_all(fds)
                            return None
                        fds.append(opened[0])
                        entries.append(opened[1])
                    described = [entry.describe() for entry in entries]
                    for entry in entries:
                        self._served(entry)
                return encode({"ok": True, "shards": described}), fds
            if op in ("ping", "list"):
                return encode(self._answer_simple(request)), []
            return None  # unknown op: refused by _answer with the same message as always
        except ProtocolError as exc:
            self._count_error(exc.code, peer, exc.message)
            return encode(error_reply(exc.code, exc.message)), []
        except Exception as exc:
            log.exception("request failed", extra={"fields": peer})
            self.metrics.errors.labels(ErrorCode.INTERNAL.value).inc()
            return encode(error_reply(ErrorCode.INTERNAL, f"{type(exc).__name__}: {exc}")), []

    async def _answer(self, body: bytes, peer: dict) -> tuple[dict, list[int]]:
        try:
            request = decode_body(body)
            return await self._dispatch(request, peer)
        except ProtocolError as exc:
            self._count_error(exc.code, peer, exc.message)
            return error_reply(exc.code, exc.message), []
        except Exception as exc:
            log.exception("request failed", extra={"fields": peer})
            self.metrics.errors.labels(ErrorCode.INTERNAL.value).inc()
            return error_reply(ErrorCode.INTERNAL, f"{type(exc).__name__}: {exc}"), []

    def _answer_simple(self, request: dict) -> dict:
        op = request.get("op")
        if op == "ping":
            return {"ok": True, "dataset": self.config.dataset, "ready": self.ready}
        offset, limit = request.get("offset", 0), request.get("limit", LIST_PAGE_LIMIT)
        if not _is_int(offset) or not _is_int(limit) or offset < 0 or not 0 < limit <= LIST_PAGE_LIMIT:
            raise ProtocolError(ErrorCode.MALFORMED, f"'offset' must be >= 0 and 'limit' within 1..{LIST_PAGE_LIMIT}")
        # One snapshot of the index (a scan in a worker thread may add or drop entries meanwhile).
        snapshot = dict(self.index.entries)
        names = sorted(snapshot)
        page = [{"name": n, "size": snapshot[n].size} for n in names[offset : offset + limit]]
        following = offset + limit if offset + limit < len(names) else None
        return {"ok": True, "shards": page, "total": len(names), "next": following}

    async def _dispatch(self, request: dict, peer: dict) -> tuple[dict, list[int]]:
        op = request.get("op")
        if op in ("ping", "list"):
            return self._answer_simple(request), []
        if op in ("stat", "open"):
            fd, entry, description = await self._open_fresh(request.get("shard"))
            if op == "stat":
                os.close(fd)
                return {"ok": True, "shard": description}, []
            self._served(entry)
            return {"ok": True, "shard": description}, [fd]
        if op == "open_many":
            names = open_batch_names(request)
            items: list[dict] = []
            fds: list[int] = []
            try:
                for name in names:
                    try:
                        fd, entry, description = await self._open_fresh(name)
                    except ProtocolError as exc:
                        self._count_error(exc.code, peer, exc.message)
                        items.append({"name": name, "error": error_reply(exc.code, exc.message)["error"]})
                        continue
                    fds.append(fd)
                    self._served(entry)
                    items.append(description)
            except BaseException:
                for fd in fds:
                    os.close(fd)
                raise
            return {"ok": True, "shards": items}, fds
        raise ProtocolError(
            ErrorCode.UNKNOWN_OP, f"unknown op {op!r}; expected ping, list, stat, open or open_many"
        )

    def _served(self, entry: ShardEntry) -> None:
        """Bookkeeping for one descriptor handed out: LRU clock and metrics; wakes the residency manager when
        a cold shard became the most recent, so it is warmed soon."""
        self._clock += 1
        entry.last_access = self._clock
        self.metrics.opens.inc()
        self.metrics.bytes_served.inc(entry.size)
        if entry.resident >= entry.size:
            self.metrics.hits.inc()
        else:
            self.metrics.misses.inc()
            if self.config.memory_budget > 0:
                self._wake.set()

    async def _open_fresh(self, name: Any) -> tuple[int, ShardEntry, dict]:
        """Open a shard: (fd, entry, description), the description taken under the index lock and only while
        the entry's figures (device, inode, size, mtime, ctime; checksum present) are those of the file behind
        the fd, so a version that changed meanwhile is never described with another's checksum."""
        for _ in range(3):
            fd, entry, changed = self.index.open(name)
            try:
                if changed:
                    self.metrics.reindexed.inc()
                    log.info("shard changed on disk; re-indexed", extra={"fields": {"shard": entry.name}})
                if entry.checksum is None:
                    checksum, st = await asyncio.to_thread(checksum_fd, fd)
                    with self.index.lock:
                        entry.adopt_checksum(checksum, st)
                st = os.fstat(fd)
                with self.index.lock:
                    if entry.checksum is not None and entry.identity == (
                        st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns
                    ):
                        return fd, entry, entry.describe()
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)  # changed while we hashed it (or a residency pass re-indexed it): open it again
        raise ProtocolError(ErrorCode.CHANGED, f"shard {entry.name!r} kept changing while being opened")

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
                fd, st = self.index.open_file(entry.path)
            except OSError:
                entry.resident = 0
                continue  # gone or replaced (by a symlink, FIFO, ...): the next open or rescan re-indexes it
            try:
                with self.index.lock:
                    changed = entry.refresh(st)
                if changed:
                    self.metrics.reindexed.inc()
                if entry.checksum is None:
                    checksum, st = checksum_fd(fd)
                    with self.index.lock:
                        entry.adopt_checksum(checksum, st)
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
                fd, _ = self.index.open_file(entry.path)
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



class _Connection:
    """One client connection, served from event-loop callbacks rather than a task per connection.

    Readable -> ``recv`` what is there -> answer every complete frame -> ``sendmsg`` the reply (with its fds) at
    once. Requests that ``CacheAgent._answer_now`` can answer never leave the callback, which keeps the
    per-open cost at one loop wake-up. Requests that need blocking work (hashing a new or changed shard) run as
    a task; reading pauses meanwhile, so replies stay in request order. When the client does not read its
    replies, unsent ones queue up and reading pauses until they drain (the bound on what one client can make
    the agent hold). A frame, once begun, must complete within ``frame_timeout``. Before each request the
    connection must have room for a full batch of descriptors (``CacheAgent._room_for_fds``); otherwise it is
    *held*: not read from, polled until its client has read what it was sent.
    """

    def __init__(self, agent: CacheAgent, sock: socket.socket, loop: asyncio.AbstractEventLoop, peer: "Peer"):
        self.agent = agent
        self.sock = sock
        self.loop = loop
        self.fileno = sock.fileno()
        self.peer = peer
        self.key = peer.key
        self.fields = peer.fields  # for logs
        self.last_active = loop.time()
        self.unread = 0  # descriptors sent on this connection and possibly not yet received (an upper bound)
        self.reserved = 0  # part of ``unread`` reserved for a reply being computed in a task (not sent yet)
        self.held = False
        self.poll: asyncio.TimerHandle | None = None
        self.released = False
        self.inbox = bytearray()
        self.outbox: deque[tuple[bytes, list[int]]] = deque()  # unsent reply bytes, fds not yet sent
        self.reading = False
        self.writing = False
        self.closing = False  # close once the outbox is flushed
        self.closed = False
        self.slow: asyncio.Task | None = None
        self.timer: asyncio.TimerHandle | None = None

    def start(self) -> None:
        self._resume_reading()

    def in_progress(self) -> bool:
        """Whether closing now would lose something: a request being read or answered, a reply not yet sent."""
        return bool(self.inbox) or self.slow is not None or bool(self.outbox) or self.held

    def close(self) -> None:
        """Stop serving. If the client still holds descriptors it has not received, the socket is shut down but
        kept (lingering, still charged) until it has read them or closed its end: only that releases the charge."""
        if self.closed:
            return
        self.closed = True
        self._pause_reading()
        if self.writing:
            self.loop.remove_writer(self.fileno)
            self.writing = False
        if self.timer is not None:
            self.timer.cancel()
        if self.poll is not None:
            self.poll.cancel()
        if self.slow is not None and self.slow is not asyncio.current_task():
            self.slow.cancel()
        for _, fds in self.outbox:
            _close_all(fds)
        self.outbox.clear()
        self._unreserve()
        self.agent._connection_done(self)
        self.refresh_unread()
        if self.unread:
            with contextlib.suppress(OSError):
                self.sock.shutdown(socket.SHUT_RDWR)  # the client reads what is queued, then end of stream
            self.agent._lingering.add(self)
            log.info("client holds unread descriptors; kept until it reads or leaves",
                     extra={"fields": {**self.fields, "unreadFds": self.unread}})
        else:
            self.release()

    def release(self) -> None:
        if self.released:
            return
        self.released = True
        self.agent._lingering.discard(self)
        if self.unread:
            self.agent._discharge(self)
        self.sock.close()

    def refresh_unread(self) -> None:
        """Forget the descriptors charged to this connection once the client has consumed everything sent."""
        if self.unread and not self.reserved and not self.released and _unsent_bytes(self.sock) == 0:
            self.agent._discharge(self)

    def _unreserve(self) -> None:
        if self.reserved:
            self.agent._uncharge(self, self.reserved)
            self.reserved = 0

    # -- reading -----------------------------------------------------------------------------------------
    def _resume_reading(self) -> None:
        if not self.reading and not self.closed:
            self.loop.add_reader(self.fileno, self._readable)
            self.reading = True

    def _pause_reading(self) -> None:
        if self.reading:
            self.loop.remove_reader(self.fileno)
            self.reading = False

    def _readable(self) -> None:
        try:
            data = self.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            log.info("client connection lost", extra={"fields": {**self.fields, "error": str(exc)}})
            self.close()
            return
        if not data:
            if self.inbox:
                log.info("client left mid-request", extra={"fields": {**self.fields, "reason": "IncompleteRead"}})
            self.close()  # otherwise a clean close between requests
            return
        self.last_active = self.loop.time()
        self.inbox += data
        self._process()

    def _process(self) -> None:
        """Answer the complete frames in the inbox, as long as nothing is pending."""
        try:
            while not self.closed and self.slow is None and not self.outbox and not self.closing and not self.held:
                if len(self.inbox) < HEADER.size:
                    break
                (length,) = HEADER.unpack_from(self.inbox)
                if length > MAX_REQUEST_BYTES:
                    self.agent._count_error(ErrorCode.FRAME_TOO_LARGE, self.fields, f"{length} bytes")
                    self.inbox.clear()
                    self.closing = True  # the stream cannot be resynchronised
                    self._send(
                        encode(
                            error_reply(
                                ErrorCode.FRAME_TOO_LARGE,
                                f"request frame of {length} bytes exceeds {MAX_REQUEST_BYTES}; closing",
                            )
                        ),
                        [],
                    )
                    break
                end = HEADER.size + length
                if len(self.inbox) < end:
                    break
                if not self.agent._room_for_fds(self):
                    self._hold()
                    break
                body = bytes(self.inbox[HEADER.size : end])
                del self.inbox[:end]
                if self.timer is not None:  # a frame completed: the deadline applies to the next one afresh
                    self.timer.cancel()
                    self.timer = None
                answer = self.agent._answer_now(body, self.fields)
                if answer is None:
                    self._pause_reading()
                    # The room just checked stays taken while the answer is computed in a task; otherwise every
                    # connection could pass the check before any of them is charged.
                    self.reserved = MAX_OPEN_BATCH
                    self.agent._charge(self, MAX_OPEN_BATCH)
                    self.slow = self.loop.create_task(self._answer_slowly(body))
                    break
                self._send(*answer)
        except Exception:
            log.exception("connection failed", extra={"fields": self.fields})
            self.close()
            return
        self._arm_timer()

    def _arm_timer(self) -> None:
        """Time out only while waiting for the client to finish a frame it began."""
        waiting = (
            bool(self.inbox)
            and not self.closed
            and self.slow is None
            and not self.outbox
            and not self.closing
            and not self.held
        )
        if waiting and self.timer is None:
            self.timer = self.loop.call_later(self.agent.config.frame_timeout, self._timed_out)
        elif not waiting and self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _hold(self) -> None:
        """Stop reading until the client has received enough of what it was sent (polled: the kernel tells a
        sender nothing when its peer reads)."""
        self.held = True
        self._pause_reading()
        self.poll = self.loop.call_later(_HOLD_POLL_SECONDS, self._poll_held)
        log.info("client is not reading its descriptors; holding its requests",
                 extra={"fields": {**self.fields, "unreadFds": self.unread}})

    def _poll_held(self) -> None:
        self.poll = None
        if self.closed:
            return
        if not self.agent._room_for_fds(self):
            self.poll = self.loop.call_later(_HOLD_POLL_SECONDS, self._poll_held)
            return
        self.held = False
        self._resume_reading()
        self._process()

    def _timed_out(self) -> None:
        self.timer = None
        log.info("client left mid-request", extra={"fields": {**self.fields, "reason": "TimeoutError"}})
        self.close()

    async def _answer_slowly(self, body: bytes) -> None:
        try:
            reply, fds = await self.agent._answer(body, self.fields)
        except asyncio.CancelledError:
            raise
        except Exception:  # _answer answers its own failures; this is a bug, not a request
            log.exception("connection failed", extra={"fields": self.fields})
            self.close()
            return
        if self.closed:
            _close_all(fds)
            return
        self._unreserve()
        self.slow = None
        self._send(encode(reply), fds)
        if not self.outbox and not self.closed:
            self._resume_reading()
            self._process()

    # -- writing -----------------------------------------------------------------------------------------
    def _send(self, data: bytes, fds: list[int]) -> None:
        """Send a reply now if the socket takes it, else queue it; the agent's copies of ``fds`` are closed once
        they are sent (they travel with the first byte) or the connection ends."""
        if self.closed:
            _close_all(fds)
            return
        if not self.outbox:
            try:
                sent = socket.send_fds(self.sock, [data], fds) if fds else self.sock.send(data)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError as exc:
                _close_all(fds)
                if fds and exc.errno == errno.ETOOMANYREFS:
                    self._send(self._quota_exhausted(), [])
                    return
                log.info("client connection lost", extra={"fields": {**self.fields, "error": str(exc)}})
                self.close()
                return
            if sent:
                if fds:
                    self.agent._charge(self, len(fds))
                _close_all(fds)
                fds = []
            if sent == len(data):
                self.last_active = self.loop.time()  # a whole reply taken; trickling reads do not keep a slot
                if self.closing:
                    self.close()
                return
            data = data[sent:]
        self.outbox.append((data, fds))
        self._pause_reading()
        if not self.writing:
            self.loop.add_writer(self.fileno, self._writable)
            self.writing = True

    def _writable(self) -> None:
        while self.outbox:
            data, fds = self.outbox[0]
            try:
                sent = socket.send_fds(self.sock, [data], fds) if fds else self.sock.send(data)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if fds and exc.errno == errno.ETOOMANYREFS:  # nothing of this reply went out: answer Busy instead
                    _close_all(fds)
                    self.outbox[0] = (self._quota_exhausted(), [])
                    continue
                log.info("client connection lost", extra={"fields": {**self.fields, "error": str(exc)}})
                self.close()
                return
            if sent:
                if fds:
                    self.agent._charge(self, len(fds))
                _close_all(fds)
                fds = []
            if sent < len(data):
                self.outbox[0] = (data[sent:], fds)
                return
            self.outbox.popleft()
            self.last_active = self.loop.time()
        self.loop.remove_writer(self.fileno)
        self.writing = False
        if self.closing:
            self.close()
            return
        if self.slow is None:
            self._resume_reading()
            self._process()


    def _quota_exhausted(self) -> bytes:
        """The Busy reply replacing one whose descriptors the kernel refused (ETOOMANYREFS: the agent's UID has too
        many in flight, e.g. charged by other processes of that UID on the node); the client retries Busy."""
        message = "descriptor quota of the agent's user exhausted (ETOOMANYREFS); retry later"
        self.agent._count_error(ErrorCode.BUSY, self.fields, message)
        return encode(error_reply(ErrorCode.BUSY, message))


_HOLD_POLL_SECONDS = 0.02
_SO_PEERGROUPS = getattr(socket, "SO_PEERGROUPS", 59)  # Linux >= 4.13; Python names it only on some builds
_OUTQ = bytes(4)


@dataclass(frozen=True)
class Peer:
    """A connected client as the kernel saw it at connect(): SO_PEERCRED and SO_PEERGROUPS."""

    pid: int
    uid: int
    gid: int
    groups: tuple[int, ...]

    @property
    def key(self) -> tuple[int, int]:
        return (self.uid, self.pid)

    @property
    def fields(self) -> dict:
        return {"peerPid": self.pid, "peerUid": self.uid, "peerGid": self.gid}


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def _peer_credentials(conn: socket.socket) -> Peer | None:
    """The peer's credentials, or None when the kernel cannot tell (then the peer is refused)."""
    try:
        raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        pid, uid, gid = struct.unpack("3i", raw)
    except OSError:
        return None
    groups: tuple[int, ...] = ()
    for size in (64, 65536):  # NGROUPS_MAX is 65536; ERANGE when the buffer is too small
        try:
            raw = conn.getsockopt(socket.SOL_SOCKET, _SO_PEERGROUPS, 4 * size)
        except OSError as exc:
            if exc.errno == errno.ERANGE:
                continue
            break
        groups = struct.unpack(f"{len(raw) // 4}I", raw[: len(raw) // 4 * 4])
        break
    return Peer(pid, uid, gid, groups)


def _unsent_bytes(sock: socket.socket) -> int:
    """SIOCOUTQ: bytes this end sent that the peer has not consumed yet (a fully read reply is freed at once)."""
    try:
        return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, _OUTQ))[0]
    except OSError:
        return 0  # the socket is gone: nothing of it is in flight any more


def _page_round(size: int) -> int:
    return (size + pages.PAGE_SIZE - 1) // pages.PAGE_SIZE * pages.PAGE_SIZE


def _reverse_key(name: str) -> tuple[int, ...]:
    """Sort key placing names in reverse order: among never-opened shards, the last by name goes first,
    mirroring ``plan_warm_set`` which keeps the first by name."""
    return tuple(-ord(c) for c in name) + (1,)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
