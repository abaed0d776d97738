"""A cache agent running on its own event loop in a background thread, so synchronous client code (what training
processes run) can talk to it from the test's thread."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest

from trainguard.cache.agent import AgentConfig, CacheAgent


class AgentThread:
    def __init__(self, config: AgentConfig):
        self.config = config
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.agent: CacheAgent | None = None

    def start(self) -> "AgentThread":
        self.thread.start()
        try:
            self.agent = self.call(self._make())
        except BaseException:
            self.stop()
            raise
        return self

    async def _make(self) -> CacheAgent:
        agent = CacheAgent(self.config)
        await agent.start()
        return agent

    def call(self, coro: Any, timeout: float = 30.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def maintain(self) -> None:
        assert self.agent is not None
        self.call(self.agent.maintain())

    def stop(self) -> None:
        if self.agent is not None:
            self.call(self.agent.stop())
            self.agent = None
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    """Three shards with distinct content plus a file outside the root and an escaping symlink."""
    root = tmp_path / "data"
    (root / "train").mkdir(parents=True)
    for i, size in enumerate((3 * 4096 + 5, 8192, 4096)):
        (root / "train" / f"shard-{i}.bin").write_bytes(bytes([i + 1]) * size)
    (tmp_path / "secret.txt").write_text("outside the root\n")
    os.symlink(tmp_path / "secret.txt", root / "train" / "escape.bin")
    os.symlink(root / "train" / "shard-0.bin", root / "train" / "alias.bin")
    (root / "empty.bin").write_bytes(b"")
    return root


@pytest.fixture
def start_agent(tmp_path: Path) -> Iterator[Any]:
    started: list[AgentThread] = []

    def start(root: Path, **overrides: Any) -> AgentThread:
        settings: dict[str, Any] = dict(
            root=str(root),
            socket_path=str(tmp_path / "agent.sock"),
            http_port=None,
            maintain_interval=None,  # tests drive residency passes explicitly
            rescan_interval=3600.0,
            memory_budget=1 << 30,
        )
        settings.update(overrides)
        agent = AgentThread(AgentConfig(**settings)).start()
        started.append(agent)
        return agent

    yield start
    for agent in started:
        if agent.agent is not None:
            agent.stop()
