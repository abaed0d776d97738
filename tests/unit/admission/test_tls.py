"""Serving TLS: TLS 1.2+ only, and certificates swapped into the live context without dropping connections."""

from __future__ import annotations

import asyncio
import socket
import ssl
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from aiohttp import web
from cryptography import x509

from trainguard.webhook.admission.certs import KeyPair, new_ca, new_serving_cert
from trainguard.webhook.admission.tls import CertDirWatcher, ServingCertificate

NOW = datetime.now(timezone.utc)


def pair(ca: KeyPair) -> KeyPair:
    return new_serving_cert(ca, dns_names=["localhost"], ip_addresses=["127.0.0.1"], now=NOW, lifetime=timedelta(days=1))


def client_context(*cas: KeyPair) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cadata="".join(c.cert_pem.decode() for c in cas))
    return ctx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def peer_serial(port: int, ctx: ssl.SSLContext) -> tuple[int, asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
    der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    return x509.load_der_x509_certificate(der).serial_number, reader, writer


async def http_get(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
    writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    await writer.drain()
    return await reader.readuntil(b"\r\n\r\n")


@pytest.fixture
async def tls_server():
    ca = new_ca(now=NOW, lifetime=timedelta(days=10))
    serving = ServingCertificate()
    first = pair(ca)
    serving.load_pem(first.cert_pem, first.key_pem)
    app = web.Application()
    async def ok(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    app.router.add_get("/", ok)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=serving.context).start()
    yield ca, serving, first, port
    await runner.cleanup()


async def test_reload_swaps_the_certificate_for_new_handshakes_only(tls_server) -> None:
    ca, serving, first, port = tls_server
    ctx = client_context(ca)
    serial, r1, w1 = await peer_serial(port, ctx)
    assert serial == first.cert.serial_number
    second = pair(ca)
    assert serving.load_pem(second.cert_pem, second.key_pem) is True
    serial2, r2, w2 = await peer_serial(port, ctx)
    assert serial2 == second.cert.serial_number
    # the connection opened before the swap keeps working
    assert (await http_get(r1, w1)).startswith(b"HTTP/1.1 200")
    assert (await http_get(r2, w2)).startswith(b"HTTP/1.1 200")
    for w in (w1, w2):
        w.close()
    assert serving.load_pem(second.cert_pem, second.key_pem) is False  # same pair: nothing to do


async def test_a_bad_pair_is_refused_and_the_old_one_keeps_serving(tls_server) -> None:
    ca, serving, first, port = tls_server
    other = pair(ca)
    with pytest.raises((ssl.SSLError, ValueError)):
        serving.load_pem(other.cert_pem, first.key_pem)
    serial, _, w = await peer_serial(port, client_context(ca))
    w.close()
    assert serial == first.cert.serial_number


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion:DeprecationWarning")
async def test_tls_1_1_is_refused(tls_server) -> None:
    ca, _, _, port = tls_server
    ctx = client_context(ca)
    ctx.minimum_version = ssl.TLSVersion.TLSv1
    ctx.maximum_version = ssl.TLSVersion.TLSv1_1
    with pytest.raises((ssl.SSLError, ConnectionError)):
        await asyncio.open_connection("127.0.0.1", port, ssl=ctx)


async def test_alpn_offers_only_http_1_1(tls_server) -> None:
    ca, _, _, port = tls_server
    ctx = client_context(ca)
    ctx.set_alpn_protocols(["h2", "http/1.1"])
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
    assert writer.get_extra_info("ssl_object").selected_alpn_protocol() == "http/1.1"
    writer.close()


def test_cert_dir_watcher_reloads_on_change_and_survives_half_written_files(tmp_path: Path) -> None:
    ca = new_ca(now=NOW, lifetime=timedelta(days=10))
    serving = ServingCertificate()
    watcher = CertDirWatcher(serving, str(tmp_path))
    assert watcher.check() is False and not serving.loaded  # no files yet
    a = pair(ca)
    (tmp_path / "tls.crt").write_bytes(a.cert_pem)
    (tmp_path / "tls.key").write_bytes(a.key_pem)
    assert watcher.check() is True and serving.loaded
    assert watcher.check() is False
    b = pair(ca)
    (tmp_path / "tls.crt").write_bytes(b.cert_pem)  # key not yet written: mismatched pair
    assert watcher.check() is False
    assert serving.not_after == a.cert.not_valid_after_utc
    (tmp_path / "tls.key").write_bytes(b.key_pem)
    assert watcher.check() is True


def test_loading_a_pair_leaves_no_key_or_scratch_directory_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # SSLContext loads only from files; the private key must not stay on disk, nor a directory per process or reload
    # (hundreds of webhook starts in a test run, or years of rotations, would otherwise leave them all in $TMPDIR).
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    ca = new_ca(now=NOW, lifetime=timedelta(days=10))
    serving = ServingCertificate()
    for _ in range(3):
        p = pair(ca)
        assert serving.load_pem(p.cert_pem, p.key_pem)
    bad = pair(ca)
    with pytest.raises((ssl.SSLError, ValueError)):
        serving.load_pem(bad.cert_pem, pair(ca).key_pem)  # mismatched key: refused, and still nothing left behind
    assert list(tmp_path.iterdir()) == []
