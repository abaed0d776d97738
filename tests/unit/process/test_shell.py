"""The process shell the webhook, the controller and the cache agent share: one JSON log line format, one set of
probe endpoints, one way to stop."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal

import pytest
from aiohttp.test_utils import TestClient, TestServer

from trainguard.process import JsonFormatter, Probe, configure_logging, probe_app, raise_nofile_limit, stop_event


def render(logger: str, msg: str, *args: object, **extra: object) -> dict:
    record = logging.getLogger(logger).makeRecord(logger, logging.WARNING, __file__, 1, msg, args, None, extra=extra)
    return json.loads(JsonFormatter().format(record))


@pytest.mark.parametrize(
    ("extra", "fields"),
    [
        ({}, {}),
        # The webhook's and the controller's spelling: fields as extra keys.
        ({"port": 9443, "paths": ["/a"]}, {"port": 9443, "paths": ["/a"]}),
        # The agent's spelling: one ``fields`` dict, spread the same way.
        ({"fields": {"socket": "/run/x.sock", "gid": 7}}, {"socket": "/run/x.sock", "gid": 7}),
        # Values JSON cannot carry are written as text, not dropped and not an error.
        ({"when": object}, {"when": str(object)}),
    ],
)
def test_one_json_line_per_record(extra: dict, fields: dict) -> None:
    line = render("trainguard.test", "served %d reviews", 3, **extra)
    assert {k: line[k] for k in ("level", "logger", "msg")} == {"level": "warning", "logger": "trainguard.test",
                                                                "msg": "served 3 reviews"}
    assert line["ts"].endswith("+00:00") and "T" in line["ts"]
    assert {k: v for k, v in line.items() if k not in ("ts", "level", "logger", "msg")} == fields


def test_configure_logging_routes_every_logger_through_json(capsys: pytest.CaptureFixture[str]) -> None:
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        configure_logging("info")
        logging.getLogger("kubernetes.client.rest").info("from a library", extra={"status": 200})
        logging.getLogger("aiohttp.access").info("GET /healthz")  # the access log is quiet
        logging.getLogger("trainguard.x").debug("below the level")
        lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    finally:
        root.handlers[:], _ = saved
        root.setLevel(saved[1])
    assert [(line["logger"], line["msg"], line.get("status")) for line in lines] == [
        ("kubernetes.client.rest", "from a library", 200)]


async def test_probe_endpoints() -> None:
    state = {"probe": Probe(False, "caches not synced\n"), "scrapes": 0}

    def metrics() -> bytes:
        state["scrapes"] += 1
        return b"x_total 1\n"

    async with TestClient(TestServer(probe_app(ready=lambda: state["probe"], metrics=metrics))) as client:
        resp = await client.get("/healthz")
        assert (resp.status, await resp.text()) == (200, "ok\n")
        resp = await client.get("/readyz")
        assert (resp.status, await resp.text()) == (503, "caches not synced\n")
        state["probe"] = Probe(True)
        resp = await client.get("/readyz")
        assert (resp.status, await resp.text()) == (200, "ok\n")
        # A detail given as fields is a JSON object with ``ready`` first.
        state["probe"] = Probe(False, {"certificates": True, "caches": {"jobsets": False}})
        resp = await client.get("/readyz")
        assert resp.status == 503
        assert await resp.json() == {"ready": False, "certificates": True, "caches": {"jobsets": False}}
        resp = await client.get("/metrics")
        assert (resp.status, await resp.read()) == (200, b"x_total 1\n")
        assert resp.headers["Content-Type"].startswith("text/plain; version=")
        assert state["scrapes"] == 1  # rendered at scrape time
        assert (await client.post("/healthz")).status == 405


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_stop_event_is_set_by_sigterm_and_sigint(sig: signal.Signals) -> None:
    stop = stop_event()
    try:
        assert not stop.is_set()
        os.kill(os.getpid(), sig)
        await asyncio.wait_for(stop.wait(), 5)
    finally:
        loop = asyncio.get_running_loop()
        for s in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(s)


def test_raise_nofile_limit_reaches_the_hard_limit() -> None:
    limits = raise_nofile_limit()
    assert limits.soft_before <= limits.soft
    import resource

    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == limits.soft
