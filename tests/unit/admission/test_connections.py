"""The gated listener in-process, over real TLS on loopback: the connection cap, the TLS handshake and request-head
deadlines, kept-alive connections left alone, the small TLS read buffer, and the counts in the metrics."""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from datetime import datetime, timedelta, timezone
from typing import AsyncIterator

import pytest

from trainguard.webhook.admission import connections
from trainguard.webhook.admission.certs import new_ca, new_serving_cert
from trainguard.webhook.admission.connections import ConnectionLimits, ConnectionMetrics, GatedSite
from trainguard.webhook.admission.metrics import AdmissionMetrics
from trainguard.webhook.admission.server import AdmissionHandler, ServerSettings
from trainguard.webhook.admission.tls import ServingCertificate
from trainguard.webhook.policy.verdict import ClusterSnapshot

from reviews import fake_routes, review

VALIDATE = "/validate-trainer-kubeflow-org-v1alpha1-trainjob"
NOW = datetime.now(timezone.utc)
LIMITS = ConnectionLimits(max_connections=4, tls_handshake_timeout=0.5, header_timeout=0.5)


class Served:
    def __init__(self, site: GatedSite, metrics: AdmissionMetrics, client_ctx: ssl.SSLContext) -> None:
        self.site, self.metrics, self.client_ctx = site, metrics, client_ctx

    @property
    def port(self) -> int:
        return self.site.port

    def closed(self, reason: str) -> float:
        return self.metrics.registry.get_sample_value(
            "trainguard_connections_closed_total", {"listener": "admission", "reason": reason}) or 0.0

    async def tls(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection("127.0.0.1", self.port, ssl=self.client_ctx, server_hostname="localhost")


async def serve(limits: ConnectionLimits, settings: ServerSettings = ServerSettings()) -> AsyncIterator[Served]:
    ca = new_ca(now=NOW, lifetime=timedelta(days=1))
    leaf = new_serving_cert(ca, dns_names=["localhost"], ip_addresses=["127.0.0.1"], now=NOW, lifetime=timedelta(days=1))
    serving = ServingCertificate()
    serving.load_pem(leaf.cert_pem, leaf.key_pem)
    client_ctx = ssl.create_default_context(cadata=ca.cert_pem.decode())
    metrics = AdmissionMetrics()
    runner = AdmissionHandler(fake_routes(), ClusterSnapshot, metrics, settings).runner()
    await runner.setup()
    site = GatedSite(runner, "127.0.0.1", 0, ssl_context=serving.context, limits=limits, metrics=ConnectionMetrics(metrics.registry))
    await site.start()
    try:
        yield Served(site, metrics, client_ctx)
    finally:
        await runner.cleanup()


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    async for s in serve(LIMITS):
        yield s


def request_bytes(keep_alive: bool = True) -> bytes:
    body = json.dumps(review(VALIDATE)).encode()
    head = (f"POST {VALIDATE} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n{'' if keep_alive else 'Connection: close'}\r\n\r\n")
    return head.replace("\r\n\r\n\r\n", "\r\n\r\n").encode() + body


async def exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> int:
    """One review on an open connection; returns the HTTP status (the body is read so the connection stays usable)."""
    writer.write(request_bytes())
    await writer.drain()
    status = int((await reader.readline()).split()[1])
    length = 0
    while (line := await reader.readline()) not in (b"\r\n", b""):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    await reader.readexactly(length)
    return status


async def closed_by_server(reader: asyncio.StreamReader, within: float) -> bool:
    try:
        return await asyncio.wait_for(reader.read(), within) == b""
    except (ConnectionResetError, ssl.SSLError, BrokenPipeError):
        return True


async def test_a_good_request_is_served(served: Served) -> None:
    reader, writer = await served.tls()
    assert await exchange(reader, writer) == 200
    assert await exchange(reader, writer) == 200  # kept alive
    writer.close()


async def test_at_the_cap_a_new_connection_evicts_the_oldest_unproven_one(served: Served) -> None:
    idle = [await asyncio.open_connection("127.0.0.1", served.port) for _ in range(LIMITS.max_connections)]
    await asyncio.sleep(0.05)
    started = time.monotonic()
    # A good client arrives while idle sockets fill the cap: it takes the oldest one's place and is served.
    reader, writer = await served.tls()
    assert await exchange(reader, writer) == 200
    assert await closed_by_server(idle[0][0], within=5)
    assert time.monotonic() - started < LIMITS.tls_handshake_timeout  # evicted at once, not at a deadline
    assert served.closed("evicted") == 1 and served.closed("over_limit") == 0
    # The others never start a handshake: each is dropped at the handshake deadline, freeing its slot.
    for r, _ in idle[1:]:
        assert await closed_by_server(r, within=10)
    assert served.closed("tls_handshake") == LIMITS.max_connections - 1
    assert await exchange(reader, writer) == 200  # the proven connection was never touched
    for _, w in [*idle, (reader, writer)]:
        w.close()


async def test_when_every_connection_has_proven_itself_a_new_one_is_refused_at_accept(served: Served) -> None:
    proven = [await served.tls() for _ in range(LIMITS.max_connections)]
    for r, w in proven:
        assert await exchange(r, w) == 200
    started = time.monotonic()
    extra_reader, extra_writer = await asyncio.open_connection("127.0.0.1", served.port)
    assert await closed_by_server(extra_reader, within=5)
    assert time.monotonic() - started < LIMITS.tls_handshake_timeout  # refused at accept, not at a deadline
    assert served.closed("over_limit") == 1 and served.closed("evicted") == 0
    for r, w in proven:  # kept-alive connections that sent requests keep working
        assert await exchange(r, w) == 200
        w.close()
    extra_writer.close()


async def test_a_half_finished_handshake_is_cut_at_the_handshake_deadline(served: Served) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
    writer.write(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")  # the start of a ClientHello, then nothing
    await writer.drain()
    started = time.monotonic()
    assert await closed_by_server(reader, within=10)
    assert time.monotonic() - started >= LIMITS.tls_handshake_timeout * 0.8
    assert served.closed("tls_handshake") == 1
    writer.close()


async def test_a_slowloris_trickling_its_head_is_cut_at_the_header_deadline() -> None:
    # idle_timeout far away: only the head deadline can close this connection, and bytes keep arriving.
    async for served in serve(LIMITS, ServerSettings(idle_timeout=120)):
        reader, writer = await served.tls()
        started = time.monotonic()
        head = f"POST {VALIDATE} HTTP/1.1\r\nHost: localhost\r\n".encode() + b"X-Pad: " + b"a" * 200

        async def trickle() -> None:
            for i in range(len(head)):
                writer.write(head[i:i + 1])
                await writer.drain()
                await asyncio.sleep(0.02)

        dribbler = asyncio.create_task(trickle())
        try:
            assert await closed_by_server(reader, within=10)
        finally:
            dribbler.cancel()
        elapsed = time.monotonic() - started
        assert LIMITS.header_timeout * 0.8 <= elapsed < 5
        assert served.closed("header_timeout") == 1
        writer.close()


async def test_a_connection_silent_after_its_handshake_is_cut_at_the_header_deadline() -> None:
    async for served in serve(LIMITS, ServerSettings(idle_timeout=120)):
        reader, writer = await served.tls()
        started = time.monotonic()
        assert await closed_by_server(reader, within=10)
        assert LIMITS.header_timeout * 0.8 <= time.monotonic() - started < 5
        assert served.closed("header_timeout") == 1
        writer.close()


async def test_a_slowloris_after_a_good_request_is_cut_too() -> None:
    """On a kept-alive connection the deadline runs from the next request's first byte."""
    async for served in serve(LIMITS, ServerSettings(idle_timeout=120)):
        reader, writer = await served.tls()
        assert await exchange(reader, writer) == 200
        await asyncio.sleep(LIMITS.header_timeout * 2)  # idle in between is fine
        started = time.monotonic()

        async def trickle() -> None:
            for b in f"POST {VALIDATE} HTTP/1.1\r\nHost: localhost\r\nX-Pad: {'a' * 200}".encode():
                writer.write(bytes([b]))
                await writer.drain()
                await asyncio.sleep(0.02)

        dribbler = asyncio.create_task(trickle())
        try:
            assert await closed_by_server(reader, within=10)
        finally:
            dribbler.cancel()
        assert LIMITS.header_timeout * 0.8 <= time.monotonic() - started < 5
        assert served.closed("header_timeout") == 1
        writer.close()


async def test_a_kept_alive_connection_may_idle_past_the_header_deadline(served: Served) -> None:
    reader, writer = await served.tls()
    assert await exchange(reader, writer) == 200
    await asyncio.sleep(LIMITS.header_timeout * 3)  # quiet, not trickling: only the idle timeout applies
    assert await exchange(reader, writer) == 200
    assert served.closed("header_timeout") == 0
    writer.close()


async def test_the_connection_gauge_counts_open_connections(served: Served) -> None:
    def gauge() -> float:
        return served.metrics.registry.get_sample_value("trainguard_connections", {"listener": "admission"}) or 0.0

    conns = [await served.tls() for _ in range(3)]
    for r, w in conns:
        assert await exchange(r, w) == 200
    assert gauge() == 3 and served.site.gate.open == 3
    for _, w in conns:
        w.close()
    for _ in range(100):
        if served.site.gate.open == 0:
            break
        await asyncio.sleep(0.05)
    assert served.site.gate.open == 0 and gauge() == 0


async def test_tls_connections_read_through_a_small_buffer(monkeypatch: pytest.MonkeyPatch, served: Served) -> None:
    """asyncio allocates 256 KiB per TLS connection up front; the gate's protocol reads one record at a time."""
    made: list[connections._LeanSSLProtocol] = []
    original = connections._LeanSSLProtocol.__init__

    def spy(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        original(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(connections._LeanSSLProtocol, "__init__", spy)
    reader, writer = await served.tls()
    assert await exchange(reader, writer) == 200
    assert len(made) == 1 and len(made[0]._ssl_buffer) == connections.TLS_READ_BUFFER == 16 * 1024
    writer.close()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"max_connections": 0}, "max_connections"), ({"header_timeout": 0}, "header_timeout"),
     ({"tls_handshake_timeout": -1}, "tls_handshake_timeout")],
)
def test_limits_are_validated(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ConnectionLimits(**kwargs)


class _FakeTransport:
    def __init__(self) -> None:
        self.aborted = False

    def abort(self) -> None:  # the real one calls connection_lost on a later loop iteration; here: never
        self.aborted = True


def test_evictions_stop_at_a_bounded_overshoot(monkeypatch: pytest.MonkeyPatch) -> None:
    """Evicted sockets hold their descriptors until the loop gets to them: a flood of accepts is refused, not
    allowed to evict without bound."""
    monkeypatch.setattr(connections, "EVICTION_OVERSHOOT", 1)
    gate = connections.ConnectionGate(lambda: None, None, ConnectionLimits(max_connections=2))  # type: ignore[arg-type,return-value]
    t = [_FakeTransport() for _ in range(4)]
    assert gate._admit(t[0]) and gate._admit(t[1])  # type: ignore[arg-type]
    assert gate._admit(t[2]) and t[0].aborted and gate.open == 3  # type: ignore[arg-type]
    assert not gate._admit(t[3]) and not t[1].aborted  # type: ignore[arg-type]
    gate._release(t[0])  # type: ignore[arg-type]
    assert gate.open == 2
