"""The client retries ``Busy`` (bounded exponential backoff with full jitter, within a total deadline) and nothing
else: against a scripted fake agent (exact retry schedule) and against the real agent (a slot freed later)."""

from __future__ import annotations

import socket
import struct
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from trainguard.cache import client as client_module
from trainguard.cache.client import BUSY_BACKOFF_FIRST, BUSY_BACKOFF_MAX, CacheClient, CacheError
from trainguard.cache.protocol import ErrorCode, encode, error_reply


class ScriptedAgent:
    """Answers each request with the next scripted reply (the last one repeats); counts requests and connections.
    Like the real agent, a ``Busy`` connection is closed after the answer."""

    def __init__(self, path: str, replies: list[dict]):
        self.replies = replies
        self.requests = 0
        self.connections = 0
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(path)
        self.server.listen(16)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            self.connections += 1
            with conn:
                while True:
                    header = conn.recv(4)
                    if len(header) < 4:
                        break
                    conn.recv(struct.unpack(">I", header)[0])
                    reply = self.replies[min(self.requests, len(self.replies) - 1)]
                    self.requests += 1
                    conn.sendall(encode(reply))
                    if not reply.get("ok") and reply["error"]["code"] == "Busy":
                        break

    def close(self) -> None:
        self.server.close()


BUSY = error_reply(ErrorCode.BUSY, "too many connections; retry later")
PONG = {"ok": True, "dataset": "d", "ready": True}


@pytest.fixture
def scripted(tmp_path: Path) -> Iterator[Any]:
    made: list[ScriptedAgent] = []

    def make(replies: list[dict]) -> ScriptedAgent:
        agent = ScriptedAgent(str(tmp_path / f"fake-{len(made)}.sock"), replies)
        made.append(agent)
        return agent

    yield make
    for agent in made:
        agent.close()


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[tuple[float, float]]:
    """(upper bound drawn from, delay slept) per backoff; the draw is pinned to its upper bound."""
    recorded: list[tuple[float, float]] = []
    bounds: list[float] = []

    def uniform(low: float, high: float) -> float:
        assert low == 0
        bounds.append(high)
        return high

    real_sleep = time.sleep

    def sleep(seconds: float) -> None:
        recorded.append((bounds[-1] if bounds else -1, seconds))
        real_sleep(seconds)

    monkeypatch.setattr(client_module.random, "uniform", uniform)
    monkeypatch.setattr(client_module.time, "sleep", sleep)
    return recorded


def test_busy_is_retried_with_doubling_backoff_then_succeeds(scripted: Any, sleeps: list) -> None:
    agent = scripted([BUSY] * 5 + [PONG])
    client = CacheClient(agent.server.getsockname(), busy_timeout=10)
    assert client.ping() == PONG
    assert agent.requests == 6 and agent.connections == 6  # a fresh connection after each Busy
    assert [round(d, 6) for _, d in sleeps] == [BUSY_BACKOFF_FIRST * 2**i for i in range(5)]
    client.close()


def test_backoff_is_capped_and_the_deadline_ends_the_retries(scripted: Any, sleeps: list) -> None:
    agent = scripted([BUSY])
    client = CacheClient(agent.server.getsockname(), busy_timeout=2.5)
    started = time.monotonic()
    with pytest.raises(CacheError) as err:
        client.ping()
    elapsed = time.monotonic() - started
    assert err.value.code == "Busy"
    assert 2.5 <= elapsed < 3.5  # never sleeps past the deadline
    assert max(bound for bound, _ in sleeps) == BUSY_BACKOFF_MAX
    assert sleeps[-1][1] <= BUSY_BACKOFF_MAX and sum(d for _, d in sleeps) <= 2.5 + 1e-6
    client.close()


def test_jitter_spreads_the_retries(scripted: Any) -> None:
    delays: list[float] = []
    agent = scripted([BUSY] * 8 + [PONG])
    real_sleep = time.sleep
    client_module.time.sleep, saved = (lambda s: (delays.append(s), real_sleep(s))), time.sleep
    try:
        client = CacheClient(agent.server.getsockname(), busy_timeout=10)
        assert client.ping() == PONG
    finally:
        client_module.time.sleep = saved
    assert len(delays) == 8 and len(set(delays)) == 8
    assert all(0 <= d <= BUSY_BACKOFF_FIRST * 2**i for i, d in enumerate(delays))
    client.close()


@pytest.mark.parametrize("code", ["NotFound", "Forbidden", "Malformed", "Changed", "Internal"])
def test_other_refusals_are_not_retried(scripted: Any, sleeps: list, code: str) -> None:
    agent = scripted([{"ok": False, "error": {"code": code, "message": "no"}}, PONG])
    client = CacheClient(agent.server.getsockname(), busy_timeout=10)
    with pytest.raises(CacheError) as err:
        client.ping()
    assert err.value.code == code and agent.requests == 1 and sleeps == []
    client.close()


def test_zero_busy_timeout_raises_the_first_busy(scripted: Any, sleeps: list) -> None:
    agent = scripted([BUSY, PONG])
    client = CacheClient(agent.server.getsockname(), busy_timeout=0)
    with pytest.raises(CacheError) as err:
        client.ping()
    assert err.value.code == "Busy" and agent.requests == 1 and sleeps == []
    client.close()


def test_real_agent_busy_then_served_once_a_slot_frees(dataset: Path, start_agent: Any) -> None:
    agent = start_agent(dataset, max_connections=1, frame_timeout=0.5)
    holder = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    holder.connect(agent.config.socket_path)
    holder.sendall(struct.pack(">I", 50) + b"{")  # a request in progress: its slot cannot be taken
    time.sleep(0.1)
    client = CacheClient(agent.config.socket_path, busy_timeout=10)
    started = time.monotonic()
    with client.open("train/shard-2.bin") as shard:  # Busy until the stalled frame times out, then served
        assert shard.size == 4096
    assert 0.3 < time.monotonic() - started < 5
    assert agent.agent.metrics.errors.labels("Busy")._value.get() >= 1
    client.close()
    holder.close()
