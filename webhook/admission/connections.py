"""Connection hygiene for the admission and health listeners: who may hold a socket, and for how long.

The admission port accepts anyone who can reach it, before any credential is checked, so every connection is
hostile until it has sent a request. ``GatedSite`` replaces aiohttp's ``TCPSite`` with a listener that:

* **caps concurrent connections** (``max_connections``). At the cap, a new connection takes the place of the
  oldest *unproven* one (still in its TLS handshake, or through it without having sent a complete request head):
  that one is aborted. Only when every connection has proven itself is the new one refused. Either way the
  decision is made in ``connection_made``, before any TLS object exists for the new connection (one ``accept``,
  one ``close``). Refusing only, an attacker who filled the cap with idle sockets locked the apiserver out of new
  connections until the deadlines freed slots; with eviction the attacker's sockets make room for the apiserver's,
  and a connection that has sent a request (the apiserver's kept-alive ones) is never evicted;
* does the **TLS handshake itself** under ``tls_handshake_timeout`` (asyncio's default is 60 s) and a short
  ``tls_shutdown_timeout`` (default 30 s: a peer that never answers close_notify kept its slot that long);
* creates **no TLS object until the client speaks**: a socket that connects and sends nothing costs a transport and
  a timer (closed at ``tls_handshake_timeout`` like a stalled handshake); the TLS layer starts on its first bytes;
* gives each connection a **small TLS read buffer**: asyncio's ``SSLProtocol`` allocates a 256 KiB ``bytearray``
  per connection at construction, which was most of the ~0.3 MB an idle connection cost. A TLS record carries at
  most 16 KiB of plaintext, so a 16 KiB buffer reads one record per call;
* bounds **the time to a complete request head** (``header_timeout``): from the end of the handshake for the first
  request, from the first byte of the next request on a kept-alive connection. aiohttp's own keep-alive timer
  (``idle_timeout``) only closes a connection that is quiet, and a slowloris that trickles header bytes is not
  quiet; before this it kept its socket for the full 120 s idle timeout.

A connection counts against the cap from ``accept`` to ``connection_lost`` (handshake and TLS shutdown included).
The body of a request is bounded elsewhere (``read_timeout`` and ``BodyBudget`` in ``server.py``).

aiohttp sees an ordinary transport: the request handler it creates is wrapped by ``_Connection``, which forwards
every protocol callback and watches for the header deadline. The handler's middleware ``track_requests`` tells the
wrapper when a request starts and ends (``request.transport.get_protocol()`` is the wrapper).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from asyncio import sslproto
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge

log = logging.getLogger("trainguard.admission.connections")

DEFAULT_MAX_CONNECTIONS = 1024
DEFAULT_TLS_HANDSHAKE_TIMEOUT = 5.0
DEFAULT_HEADER_TIMEOUT = 10.0
DEFAULT_TLS_SHUTDOWN_TIMEOUT = 5.0
EVICTION_OVERSHOOT = 64
# One TLS record's worth of plaintext (2^14) per read.
TLS_READ_BUFFER = 16 * 1024


@dataclass(frozen=True)
class ConnectionLimits:
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    tls_handshake_timeout: float = DEFAULT_TLS_HANDSHAKE_TIMEOUT
    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    tls_shutdown_timeout: float = DEFAULT_TLS_SHUTDOWN_TIMEOUT

    def __post_init__(self) -> None:
        if self.max_connections < 1:
            raise ValueError(f"max_connections must be at least 1, got {self.max_connections}")
        for name in ("tls_handshake_timeout", "header_timeout", "tls_shutdown_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")


class ConnectionMetrics:
    """``trainguard_connections{listener}`` (open now) and ``trainguard_connections_closed_total{listener,reason}``
    for connections the server cut: ``over_limit`` (refused at accept), ``evicted`` (an unproven one, to make room),
    ``tls_handshake`` (failed or timed out), ``header_timeout``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.open = Gauge("trainguard_connections", "Open connections (handshake included).", ["listener"], registry=registry)
        self.closed = Counter(
            "trainguard_connections_closed", "Connections the server closed before a request completed.",
            ["listener", "reason"], registry=registry,
        )


class _LeanSSLProtocol(sslproto.SSLProtocol):
    max_size = TLS_READ_BUFFER


async def _start_tls(
    loop: asyncio.AbstractEventLoop, transport: asyncio.Transport, protocol: asyncio.BaseProtocol,
    context: ssl.SSLContext, limits: ConnectionLimits, first: bytes = b"",
) -> asyncio.Transport:
    """``loop.start_tls(server_side=True)`` with ``_LeanSSLProtocol`` (the stdlib offers no way to pick the class),
    fed ``first``, the bytes already read from the client. Same steps as CPython 3.11-3.13's
    ``BaseEventLoop.start_tls``."""
    waiter = loop.create_future()
    ssl_protocol = _LeanSSLProtocol(
        loop, protocol, context, waiter, server_side=True, server_hostname=None, call_connection_made=False,
        ssl_handshake_timeout=limits.tls_handshake_timeout, ssl_shutdown_timeout=limits.tls_shutdown_timeout,
    )
    transport.pause_reading()
    transport.set_protocol(ssl_protocol)
    made = loop.call_soon(ssl_protocol.connection_made, transport)

    def feed() -> None:
        view = memoryview(first)
        while view:
            buf = ssl_protocol.get_buffer(len(view))
            n = min(len(buf), len(view))
            buf[:n] = view[:n]
            ssl_protocol.buffer_updated(n)
            view = view[n:]

    fed = loop.call_soon(feed)
    resume = loop.call_soon(transport.resume_reading)
    try:
        await waiter
    except BaseException:
        transport.close()
        made.cancel()
        fed.cancel()
        resume.cancel()
        raise
    return ssl_protocol._app_transport  # type: ignore[no-any-return]


class ConnectionGate:
    """The protocol factory of a gated listener: counts connections, enforces the limits, hands the survivors to
    ``handler_factory`` (aiohttp's ``Server``)."""

    def __init__(
        self, handler_factory: Callable[[], asyncio.Protocol], ssl_context: ssl.SSLContext | None,
        limits: ConnectionLimits, metrics: ConnectionMetrics | None = None, listener: str = "admission",
    ) -> None:
        self.handler_factory = handler_factory
        self.ssl_context = ssl_context
        self.limits = limits
        self.listener = listener
        self.open = 0
        self.peak = 0  # highest ``open`` since the last ``take_peak``
        self._metrics = metrics
        self._handshakes: set[asyncio.Task[None]] = set()
        # Connections that have not yet sent a complete request head, oldest first (dicts keep insertion order).
        self._unproven: dict[asyncio.Transport, None] = {}

    def __call__(self) -> asyncio.Protocol:
        return _Accepted(self)

    def take_peak(self) -> int:
        peak, self.peak = self.peak, self.open
        return peak

    def closed(self, reason: str) -> None:
        if self._metrics is not None:
            self._metrics.closed.labels(self.listener, reason).inc()

    def _admit(self, transport: asyncio.Transport) -> bool:
        if self.open >= self.limits.max_connections:
            # An evicted connection keeps its descriptor until the loop runs its connection_lost: under a flood of
            # accepts, refuse rather than evict past a small overshoot (the fd reserve in process.py covers it).
            if not self._unproven or self.open >= self.limits.max_connections + EVICTION_OVERSHOOT:
                self.closed("over_limit")
                return False
            oldest = next(iter(self._unproven))
            self.proven(oldest)
            self.closed("evicted")
            oldest.abort()  # its connection_lost releases its slot, now or on the next loop iteration
            self.open += 1  # the new one is in; ``open`` may exceed the cap until the abort completes
        else:
            self.open += 1
        self._unproven[transport] = None
        self.peak = max(self.peak, self.open)
        if self._metrics is not None:
            self._metrics.open.labels(self.listener).set(self.open)
        return True

    def proven(self, transport: asyncio.Transport) -> None:
        self._unproven.pop(transport, None)

    def _release(self, transport: asyncio.Transport) -> None:
        self.proven(transport)
        self.open -= 1
        if self._metrics is not None:
            self._metrics.open.labels(self.listener).set(self.open)

    def _spawn_handshake(self, transport: asyncio.Transport, first: bytes = b"") -> None:
        task = asyncio.get_running_loop().create_task(self._handshake(transport, first))
        self._handshakes.add(task)
        task.add_done_callback(self._handshakes.discard)

    async def _handshake(self, transport: asyncio.Transport, first: bytes = b"") -> None:
        conn = _Connection(self, transport)
        loop = asyncio.get_running_loop()
        if transport.is_closing():  # evicted before its handshake began
            self._release(transport)
            return
        try:
            if self.ssl_context is None:
                transport.set_protocol(conn)
                tls: asyncio.Transport = transport
            else:
                tls = await _start_tls(loop, transport, conn, self.ssl_context, self.limits, first)
        except asyncio.CancelledError:
            transport.abort()
            self._release(transport)
            raise
        except Exception:  # handshake timeout, bad ClientHello, peer gone, evicted: the client's problem, not a log line
            transport.abort()
            if transport in self._unproven:
                self.closed("tls_handshake")
            self._release(transport)
            return
        conn.connection_made(tls)
        if self.ssl_context is None:
            transport.resume_reading()

    def cancel_handshakes(self) -> None:
        for task in list(self._handshakes):
            task.cancel()


class _Accepted(asyncio.Protocol):
    """A freshly accepted TCP connection: past the cap it is aborted (or evicts an older one) here; otherwise, on a
    TLS listener, it waits for the client's first bytes, then the TLS handshake replaces this protocol."""

    def __init__(self, gate: ConnectionGate) -> None:
        self.gate = gate
        self.transport: asyncio.Transport | None = None
        self._silence: asyncio.TimerHandle | None = None
        self._handed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        if not self.gate._admit(transport):
            transport.abort()
            return
        self.transport = transport
        if self.gate.ssl_context is None:
            self._hand_over(b"")
            return
        self._silence = asyncio.get_running_loop().call_later(self.gate.limits.tls_handshake_timeout, self._silent)

    def data_received(self, data: bytes) -> None:
        if not self._handed:
            self._hand_over(data)

    def _hand_over(self, first: bytes) -> None:
        assert self.transport is not None
        self._handed = True
        if self._silence is not None:
            self._silence.cancel()
        self.transport.pause_reading()
        self.gate._spawn_handshake(self.transport, first)

    def _silent(self) -> None:
        if not self._handed and self.transport is not None:
            self.gate.closed("tls_handshake")
            self.transport.abort()  # connection_lost below releases the slot

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._silence is not None:
            self._silence.cancel()
        if not self._handed and self.transport is not None:
            self._handed = True  # released once
            self.gate._release(self.transport)


class _Connection(asyncio.Protocol):
    """aiohttp's request handler (created once the handshake is done: a socket that never finishes one costs no
    HTTP parser), plus the header deadline, the connection count and the proof (a first request head)."""

    def __init__(self, gate: ConnectionGate, raw: asyncio.Transport) -> None:
        self.gate = gate
        self.raw = raw  # the TCP transport: the gate's key for this connection
        self.inner: Any = None
        self.transport: asyncio.Transport | None = None
        # The TLS layer may hand over the first request's bytes in the same callback that completes the handshake,
        # before the gate has called connection_made: kept here for the handler.
        self._early: list[bytes] = []
        self.busy = False  # a request is being handled
        self._deadline: asyncio.TimerHandle | None = None
        self._lost = False

    # ---- asyncio protocol, forwarded --------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.inner = self.gate.handler_factory()
        self.inner.connection_made(transport)
        early, self._early = self._early, []
        for data in early:
            self.inner.data_received(data)
        self._arm()  # the first request's head is due within header_timeout of the handshake

    def data_received(self, data: bytes) -> None:
        if self._deadline is None and not self.busy:
            self._arm()  # the first byte of the next request on a kept-alive connection
        if self.inner is not None:
            self.inner.data_received(data)
        else:
            self._early.append(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.inner is not None else None  # type: ignore[no-any-return]

    def pause_writing(self) -> None:
        if self.inner is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.inner is not None:
            self.inner.resume_writing()

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._lost:
            return
        self._lost = True
        self._disarm()
        try:
            if self.inner is not None:
                self.inner.connection_lost(exc)
        finally:
            self.gate._release(self.raw)

    # ---- request tracking (from the middleware) ---------------------------------------------------------------

    def request_started(self) -> None:
        self.busy = True
        self._disarm()
        self.gate.proven(self.raw)

    def request_finished(self) -> None:
        self.busy = False

    def _arm(self) -> None:
        self._disarm()
        self._deadline = asyncio.get_running_loop().call_later(self.gate.limits.header_timeout, self._head_overdue)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _head_overdue(self) -> None:
        self._deadline = None
        if not self.busy and not self._lost and self.transport is not None:
            self.gate.closed("header_timeout")
            self.transport.abort()


@web.middleware
async def track_requests(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
    """Tell the connection a request head arrived (its header deadline is met) and when the request is done."""
    transport = request.transport
    conn = transport.get_protocol() if transport is not None else None
    if not isinstance(conn, _Connection):
        return await handler(request)
    conn.request_started()
    try:
        return await handler(request)
    finally:
        conn.request_finished()


class GatedSite(web.BaseSite):
    """``web.TCPSite`` with the gate in front of the runner's request handlers (TLS done by the gate)."""

    def __init__(
        self, runner: web.BaseRunner, host: str, port: int, *, ssl_context: ssl.SSLContext | None,
        limits: ConnectionLimits, metrics: ConnectionMetrics | None = None, listener: str = "admission",
        backlog: int = 512,
    ) -> None:
        super().__init__(runner, backlog=backlog)
        self._host = host
        self._port = port
        assert runner.server is not None
        self.gate = ConnectionGate(runner.server, ssl_context, limits, metrics, listener)
        self._tls = ssl_context is not None

    @property
    def name(self) -> str:
        return f"{'https' if self._tls else 'http'}://{self._host}:{self.port}"

    @property
    def port(self) -> int:
        if self._server is not None and self._server.sockets:  # type: ignore[attr-defined]
            return int(self._server.sockets[0].getsockname()[1])  # type: ignore[attr-defined]
        return self._port

    async def start(self) -> None:
        await super().start()
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(self.gate, self._host, self._port, backlog=self._backlog, reuse_address=True)

    async def stop(self) -> None:
        await super().stop()
        self.gate.cancel_handshakes()
