"""A terminating replica's drain (``webhook/admission/main.py: drain``), in-process over real TLS on loopback.

The apiserver keeps idle connections to a webhook Service in a pool and may write a review on one at any moment;
Go does not resend a POST that was written on a connection the server was closing, so the review fails with
"EOF". The drain therefore never closes a kept-alive connection from the server's side: it answers what comes
(each response closing its connection) and waits for the client to close the rest.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from datetime import datetime, timedelta, timezone
from typing import AsyncIterator

import pytest

from trainguard.webhook.admission.certs import new_ca, new_serving_cert
from trainguard.webhook.admission.connections import ConnectionLimits, GatedSite
from trainguard.webhook.admission.main import _close_when_draining, drain
from trainguard.webhook.admission.metrics import AdmissionMetrics
from trainguard.webhook.admission.server import AdmissionHandler
from trainguard.webhook.admission.tls import ServingCertificate
from trainguard.webhook.policy.verdict import ClusterSnapshot

from reviews import fake_routes, review

VALIDATE = "/validate-trainer-kubeflow-org-v1alpha1-trainjob"
NOW = datetime.now(timezone.utc)
DELAY = 0.3


class Replica:
    def __init__(self, site: GatedSite, draining: asyncio.Event, client_ctx: ssl.SSLContext) -> None:
        self.site, self.draining, self.client_ctx = site, draining, client_ctx

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection("127.0.0.1", self.site.port, ssl=self.client_ctx,
                                            server_hostname="localhost")


@pytest.fixture
async def replica() -> AsyncIterator[Replica]:
    ca = new_ca(now=NOW, lifetime=timedelta(days=1))
    leaf = new_serving_cert(ca, dns_names=["localhost"], ip_addresses=["127.0.0.1"], now=NOW, lifetime=timedelta(days=1))
    serving = ServingCertificate()
    serving.load_pem(leaf.cert_pem, leaf.key_pem)
    draining = asyncio.Event()
    runner = AdmissionHandler(fake_routes(), ClusterSnapshot, AdmissionMetrics()).runner()
    runner.app.on_response_prepare.append(_close_when_draining(draining))  # as ``serve`` wires it
    await runner.setup()
    site = GatedSite(runner, "127.0.0.1", 0, ssl_context=serving.context, limits=ConnectionLimits())
    await site.start()
    try:
        yield Replica(site, draining, ssl.create_default_context(cadata=ca.cert_pem.decode()))
    finally:
        await runner.cleanup()


async def exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> tuple[int, dict[str, str]]:
    """One review, as the apiserver sends it on a pooled connection; the status and the response headers."""
    body = json.dumps(review(VALIDATE)).encode()
    writer.write(f"POST {VALIDATE} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    await writer.drain()
    status_line = await reader.readline()
    if not status_line:
        raise EOFError("the server closed the connection instead of answering")
    headers = {}
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        headers[name.strip().lower()] = value.strip()
    await reader.readexactly(int(headers.get("content-length", "0")))
    return int(status_line.split()[1]), headers


async def test_an_idle_kept_alive_connection_is_answered_after_the_delay_not_closed(replica: Replica) -> None:
    # Two pooled connections: one carries a review during the delay, the other stays idle past it.
    busy = await replica.connect()
    idle = await replica.connect()
    assert (await exchange(*busy))[0] == 200
    assert (await exchange(*idle))[0] == 200

    draining = asyncio.create_task(drain(replica.site, replica.draining, DELAY, linger=30))
    await asyncio.sleep(DELAY / 3)
    status, headers = await exchange(*busy)
    assert (status, headers.get("connection")) == (200, "close")
    assert await busy[0].read() == b""  # the server closes it after the answer, as the header said
    await asyncio.sleep(DELAY * 2)  # past the delay: the listener is closed
    with pytest.raises(OSError):
        await replica.connect()

    # The idle connection was left open: the client may write on it at any moment, and is answered.
    assert not draining.done()
    status, headers = await exchange(*idle)
    assert (status, headers.get("connection")) == (200, "close")
    idle[1].close()
    await asyncio.wait_for(draining, 5)  # the last connection gone, the drain ends
    assert replica.site.gate.open == 0


async def test_the_drain_ends_at_the_linger_bound_when_the_client_keeps_a_connection(replica: Replica) -> None:
    kept = await replica.connect()
    assert (await exchange(*kept))[0] == 200
    loop = asyncio.get_running_loop()
    started = loop.time()
    await asyncio.wait_for(drain(replica.site, replica.draining, DELAY, linger=0.5), 5)
    assert DELAY + 0.5 <= loop.time() - started < DELAY + 2
    assert replica.site.gate.open == 1  # left for the runner's cleanup
    kept[1].close()


async def test_no_connection_means_no_wait(replica: Replica) -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    await asyncio.wait_for(drain(replica.site, replica.draining, DELAY, linger=30), 5)
    assert loop.time() - started < DELAY + 1
