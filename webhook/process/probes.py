"""``/healthz``, ``/readyz`` and ``/metrics`` on one plain-HTTP port, the same three paths for every command.

``/healthz`` answers while the process and its event loop do. ``/readyz`` asks the command (``ready()`` returns a
``Probe``): 200 when ready, else 503, with the command's detail as text or as a JSON object. ``/metrics`` serves
the command's Prometheus registry, rendered by ``metrics()`` at scrape time (``generate_latest``), with
prometheus_client's matching content type.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST


@dataclass(frozen=True)
class Probe:
    """A readiness answer: ``detail`` is the body, as text (``"ok\\n"``) or as fields of a JSON object."""

    ready: bool
    detail: str | Mapping[str, Any] = field(default="ok\n")


def probe_app(*, ready: Callable[[], Probe], metrics: Callable[[], bytes]) -> web.Application:
    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        probe = ready()
        status = 200 if probe.ready else 503
        if isinstance(probe.detail, str):
            return web.Response(status=status, text=probe.detail)
        return web.json_response({"ready": probe.ready, **probe.detail}, status=status)

    async def scrape(_: web.Request) -> web.Response:
        return web.Response(body=metrics(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", scrape)
    return app


async def serve_probes(app: web.Application, host: str | None = None, port: int | None = None, *,
                       sock: socket.socket | None = None) -> web.AppRunner:
    """Listen on ``host:port`` (or an already bound ``sock``); ``await runner.cleanup()`` stops it."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.SockSite(runner, sock) if sock is not None else web.TCPSite(runner, host or None, port)
    await site.start()
    return runner
