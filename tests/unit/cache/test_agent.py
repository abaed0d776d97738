"""The agent over its real Unix socket: protocol, every refused request, fd handoff, staleness, eviction, restart."""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import socket
import struct
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from trainguard.cache import pages
from trainguard.cache.agent import eviction_order, plan_warm_set
from trainguard.cache.client import CacheClient, CacheError
from trainguard.cache.index import ShardEntry
from trainguard.cache.shard_glob import ShardGlob
from trainguard.cache.protocol import HEADER, MAX_REQUEST_BYTES, encode


def raw_connect(path: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(path)
    return sock


def read_frame(sock: socket.socket) -> dict | None:
    header = b""
    while len(header) < HEADER.size:
        chunk = sock.recv(HEADER.size - len(header))
        if not chunk:
            return None
        header += chunk
    (length,) = HEADER.unpack(header)
    body = b""
    while len(body) < length:
        body += sock.recv(length - len(body))
    return json.loads(body)


def ask(sock: socket.socket, payload: bytes) -> dict | None:
    sock.sendall(struct.pack(">I", len(payload)) + payload)
    return read_frame(sock)


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


# -- protocol ------------------------------------------------------------------------------------------------
def test_list_stat_open(dataset: Path, start_agent: Any) -> None:
    agent = start_agent(dataset)
    client = CacheClient(agent.config.socket_path)
    names = [s.name for s in client.list_shards()]
    # The escaping symlink is not indexed; the in-root alias is.
    assert names == ["empty.bin", "train/alias.bin", "train/shard-0.bin", "train/shard-1.bin", "train/shard-2.bin"]
    content = (dataset / "train" / "shard-1.bin").read_bytes()
    info = client.stat("train/shard-1.bin")
    assert (info.size, info.checksum) == (len(content), sha256(content))
    with client.open("train/shard-1.bin") as shard:
        assert shard.source == "agent" and shard.checksum == sha256(content)
        assert bytes(shard.view) == content
    with client.open("empty.bin") as shard:
        assert shard.size == 0 and bytes(shard.view) == b""
    client.close()


def test_list_pages(tmp_path: Path, start_agent: Any) -> None:
    root = tmp_path / "many"
    root.mkdir()
    for i in range(1005):
        (root / f"s{i:04d}").write_bytes(b"x")
    client = CacheClient(start_agent(root, memory_budget=0).config.socket_path)
    assert len(client.list_shards()) == 1005
    client.close()


def test_glob_selects_shards(dataset: Path, start_agent: Any) -> None:
    client = CacheClient(start_agent(dataset, glob="train/shard-*.bin").config.socket_path)
    assert [s.name for s in client.list_shards()] == [f"train/shard-{i}.bin" for i in range(3)]
    with pytest.raises(CacheError) as err:
        client.open("empty.bin")
    assert err.value.code == "NotFound" and "does not match the shard glob" in err.value.message
    client.close()


@pytest.mark.parametrize(
    "pattern, name, matches",
    [
        ("**/*.bin", "a.bin", True),
        ("**/*.bin", "x/y/a.bin", True),
        ("*.bin", "x/a.bin", False),
        ("train/*.bin", "train/a.bin", True),
        ("train/*.bin", "train/a.tar", False),
        ("s-[0-9].bin", "s-7.bin", True),
        ("s-[!0-9].bin", "s-7.bin", False),
        ("s-?.bin", "s-10.bin", False),
    ],
)
def test_glob_semantics(pattern: str, name: str, matches: bool) -> None:
    assert ShardGlob(pattern).match(name) is matches


@pytest.mark.parametrize(
    "request_body, code",
    [
        (b'{"op": "open", "shard": "train/missing.bin"}', "NotFound"),
        (b'{"op": "open", "shard": "../secret.txt"}', "InvalidName"),
        (b'{"op": "open", "shard": "/etc/passwd"}', "InvalidName"),
        (b'{"op": "open", "shard": "train/escape.bin"}', "OutsideRoot"),
        (b'{"op": "stat", "shard": "train/escape.bin"}', "OutsideRoot"),
        (b'{"op": "open", "shard": "train"}', "NotFound"),
        (b'{"op": "open"}', "Malformed"),
        (b'{"op": "open", "shard": 7}', "Malformed"),
        (b'{"op": "delete", "shard": "train/shard-0.bin"}', "UnknownOp"),
        (b'{"op": "list", "limit": 0}', "Malformed"),
        (b'{"op": "list", "offset": -1}', "Malformed"),
        (b'{"op": "list", "offset": true}', "Malformed"),
        (b"not json at all", "Malformed"),
        (b"[1]", "Malformed"),
        (b"\xff\xff", "Malformed"),
    ],
)
def test_refused_requests_keep_the_connection_usable(
    dataset: Path, start_agent: Any, request_body: bytes, code: str
) -> None:
    agent = start_agent(dataset)
    sock = raw_connect(agent.config.socket_path)
    reply = ask(sock, request_body)
    assert reply is not None and reply["ok"] is False and reply["error"]["code"] == code
    assert reply["error"]["message"]
    # The same connection still serves a valid request afterwards, and nothing outside the root leaked.
    assert ask(sock, b'{"op": "ping"}') == {"ok": True, "dataset": "", "ready": False}
    sock.close()


def test_oversized_frame_is_refused_from_its_header_and_closed(dataset: Path, start_agent: Any) -> None:
    agent = start_agent(dataset)
    sock = raw_connect(agent.config.socket_path)
    sock.sendall(struct.pack(">I", MAX_REQUEST_BYTES + 1))
    reply = read_frame(sock)
    assert reply is not None and reply["error"]["code"] == "FrameTooLarge"
    assert read_frame(sock) is None  # closed: the stream cannot be resynchronised
    sock.close()
    assert CacheClient(agent.config.socket_path).ping()["ok"]


@pytest.mark.parametrize(
    "partial",
    [b"\x00\x00", struct.pack(">I", 100) + b'{"op": "op', encode({"op": "ping"})[:-1]],
    ids=["half-header", "half-body", "one-byte-short"],
)
def test_client_disconnecting_mid_request_does_not_hurt_the_agent(
    dataset: Path, start_agent: Any, partial: bytes
) -> None:
    agent = start_agent(dataset)
    sock = raw_connect(agent.config.socket_path)
    sock.sendall(partial)
    sock.close()
    client = CacheClient(agent.config.socket_path)
    assert client.ping()["ok"]
    with client.open("train/shard-2.bin") as shard:
        assert shard.size == 4096
    client.close()


def test_stalled_frame_times_out(dataset: Path, start_agent: Any) -> None:
    agent = start_agent(dataset, frame_timeout=0.2)
    sock = raw_connect(agent.config.socket_path)
    sock.sendall(struct.pack(">I", 50) + b"{")
    assert read_frame(sock) is None  # the agent gave up on the stalled frame and closed
    sock.close()


def test_connection_limit_answers_busy(dataset: Path, start_agent: Any) -> None:
    agent = start_agent(dataset, max_connections=2)
    held = [raw_connect(agent.config.socket_path) for _ in range(2)]
    for sock in held:
        assert ask(sock, b'{"op":"ping"}')["ok"]  # both are being served
    extra = raw_connect(agent.config.socket_path)
    reply = read_frame(extra)
    assert reply is not None and reply["error"]["code"] == "Busy"
    extra.close()
    for sock in held:
        sock.close()
    deadline = time.monotonic() + 10
    while True:  # the agent notices the closed connections asynchronously
        sock = raw_connect(agent.config.socket_path)
        try:
            reply = ask(sock, b'{"op":"ping"}')
        except OSError:  # answered Busy and closed before the request went out
            reply = None
        sock.close()
        if reply and reply["ok"] or time.monotonic() > deadline:
            break
    assert reply and reply["ok"]


def test_concurrent_clients(dataset: Path, start_agent: Any) -> None:
    agent = start_agent(dataset)
    expected = (dataset / "train" / "shard-0.bin").read_bytes()
    failures: list[BaseException] = []

    def worker() -> None:
        try:
            client = CacheClient(agent.config.socket_path)
            for _ in range(20):
                with client.open("train/shard-0.bin") as shard:
                    assert bytes(shard.view) == expected
            client.close()
        except BaseException as exc:  # collected and re-raised in the test thread
            failures.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not failures
    metrics = agent.agent.metrics
    assert metrics.opens._value.get() == 160


# -- zero copy -----------------------------------------------------------------------------------------------
def test_fd_handoff_shares_pages_and_is_read_only(dataset: Path, start_agent: Any) -> None:
    agent = start_agent(dataset)
    client = CacheClient(agent.config.socket_path)
    path = dataset / "train" / "shard-1.bin"
    with client.open("train/shard-1.bin") as shard:
        assert shard.view.readonly
        with pytest.raises(TypeError):
            shard.view[0] = 0
        # Write through another, writable mapping of the source file: the client's mapping sees it at once,
        # which only happens when both map the same page-cache page (a copy would keep the old byte).
        with open(path, "r+b") as f, mmap.mmap(f.fileno(), 0) as writable:
            writable[100] = 0xAB
            assert shard.view[100] == 0xAB
    client.close()


def test_received_descriptor_cannot_write(dataset: Path, start_agent: Any) -> None:
    agent = start_agent(dataset)
    sock = raw_connect(agent.config.socket_path)
    sock.sendall(encode({"op": "open", "shard": "train/shard-2.bin"}))
    msg, fds, _, _ = socket.recv_fds(sock, 65536, 4)
    assert len(fds) == 1
    with pytest.raises(OSError):
        os.write(fds[0], b"x")
    for fd in fds:
        os.close(fd)
    sock.close()


# -- staleness -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("change", ["rewrite", "truncate", "replace"])
def test_changed_shard_is_reindexed_not_served_stale(dataset: Path, start_agent: Any, change: str) -> None:
    agent = start_agent(dataset)
    client = CacheClient(agent.config.socket_path)
    path = dataset / "train" / "shard-0.bin"
    before = client.stat("train/shard-0.bin")
    if change == "rewrite":
        new = b"\x09" * path.stat().st_size  # same size; mtime/ctime move
        with open(path, "r+b") as f:
            f.write(new)
    elif change == "truncate":
        new = path.read_bytes()[:100]
        os.truncate(path, 100)
    else:
        new = b"replacement"
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(new)
        os.replace(tmp, path)
    with client.open("train/shard-0.bin") as shard:
        assert shard.size == len(new) and bytes(shard.view) == new
        assert shard.checksum == sha256(new) != before.checksum
    assert agent.agent.metrics.reindexed._value.get() >= 1
    client.close()


def test_symlink_swapped_to_escape_is_refused(dataset: Path, start_agent: Any) -> None:
    agent = start_agent(dataset)
    client = CacheClient(agent.config.socket_path)
    assert client.stat("train/alias.bin").size > 0
    alias = dataset / "train" / "alias.bin"
    alias.unlink()
    os.symlink(dataset.parent / "secret.txt", alias)
    with pytest.raises(CacheError) as err:
        client.open("train/alias.bin")
    assert err.value.code == "OutsideRoot"
    client.close()


def test_removed_shard_is_not_found(dataset: Path, start_agent: Any) -> None:
    agent = start_agent(dataset)
    client = CacheClient(agent.config.socket_path)
    (dataset / "train" / "shard-2.bin").unlink()
    with pytest.raises(CacheError) as err:
        client.open("train/shard-2.bin")
    assert err.value.code == "NotFound"
    client.close()


def test_shard_added_after_scan_is_served(dataset: Path, start_agent: Any) -> None:
    agent = start_agent(dataset)
    (dataset / "late.bin").write_bytes(b"late")
    client = CacheClient(agent.config.socket_path)
    with client.open("late.bin") as shard:
        assert bytes(shard.view) == b"late"
    client.close()


# -- residency -----------------------------------------------------------------------------------------------
def _entry(name: str, size: int, last_access: int = 0, resident: int = 0) -> ShardEntry:
    return ShardEntry(name, name, size, 0, 0, 0, 0, last_access=last_access, resident=resident)


def test_plan_warm_set_prefers_recent_then_name_and_skips_what_does_not_fit() -> None:
    page = pages.PAGE_SIZE
    entries = [_entry("a", page), _entry("b", 3 * page), _entry("c", page, last_access=5), _entry("d", page)]
    assert [e.name for e in plan_warm_set(entries, 3 * page)] == ["c", "a", "d"]
    assert plan_warm_set(entries, 0) == []


def test_eviction_order_is_least_recent_first() -> None:
    entries = [_entry("a", 1, 0, 1), _entry("b", 1, 0, 1), _entry("c", 1, 9, 1), _entry("d", 1, 2, 1)]
    assert [e.name for e in eviction_order(entries, keep={"a"})] == ["b", "d", "c"]


def _make_shards(root: Path, count: int, pages_each: int) -> None:
    root.mkdir()
    for i in range(count):
        path = root / f"s{i}.bin"
        path.write_bytes(os.urandom(pages_each * pages.PAGE_SIZE))
        with open(path, "rb") as f:
            os.fsync(f.fileno())


def test_eviction_keeps_residency_within_budget(tmp_path: Path, start_agent: Any) -> None:
    root = tmp_path / "lru"
    per = 64 * pages.PAGE_SIZE
    _make_shards(root, 3, 64)
    agent = start_agent(root, memory_budget=2 * per)
    agent.maintain()
    resident = {n: pages.file_resident_bytes(str(root / n)) for n in ("s0.bin", "s1.bin", "s2.bin")}
    assert resident == {"s0.bin": per, "s1.bin": per, "s2.bin": 0}  # first two by name fit
    assert agent.agent.ready
    client = CacheClient(agent.config.socket_path)
    client.open("s2.bin").close()  # now the most recent: s1 (least recent of the rest) must go
    agent.maintain()
    resident = {n: pages.file_resident_bytes(str(root / n)) for n in ("s0.bin", "s1.bin", "s2.bin")}
    assert resident == {"s0.bin": per, "s1.bin": 0, "s2.bin": per}
    assert agent.agent.metrics.bytes_resident._value.get() <= 2 * per
    assert agent.agent.metrics.evictions._value.get() >= 2
    client.close()


def test_pages_mapped_by_a_client_are_not_evicted(tmp_path: Path, start_agent: Any) -> None:
    root = tmp_path / "inuse"
    per = 16 * pages.PAGE_SIZE
    _make_shards(root, 2, 16)
    agent = start_agent(root, memory_budget=per)
    agent.maintain()
    client = CacheClient(agent.config.socket_path)
    shard = client.open("s1.bin")
    bytes(shard.view)  # fault every page into this process
    client.open("s0.bin").close()  # s0 becomes the most recent; s1 leaves the warm set
    agent.maintain()
    assert pages.file_resident_bytes(str(root / "s1.bin")) == per  # still mapped here, so still resident
    shard.close()
    client.close()


def test_zero_budget_warms_nothing_and_is_ready(tmp_path: Path, start_agent: Any) -> None:
    root = tmp_path / "cold"
    _make_shards(root, 2, 8)
    agent = start_agent(root, memory_budget=0)
    agent.maintain()
    assert agent.agent.ready
    assert all(pages.file_resident_bytes(str(root / f"s{i}.bin")) == 0 for i in range(2))


# -- restart -------------------------------------------------------------------------------------------------
def test_client_reconnects_after_agent_restart(dataset: Path, start_agent: Any) -> None:
    first = start_agent(dataset)
    client = CacheClient(first.config.socket_path, reconnect_timeout=20)
    held = client.open("train/shard-1.bin")
    first.stop()
    # A mapping obtained before the restart stays valid: it never depended on the agent process.
    assert bytes(held.view[:4]) == b"\x02" * 4
    threading.Timer(0.3, lambda: start_agent(dataset)).start()
    with client.open("train/shard-2.bin") as shard:  # blocks, reconnecting, until the new agent answers
        assert bytes(shard.view[:2]) == b"\x03\x03"
    held.close()
    client.close()


def test_stale_socket_file_is_replaced_but_a_live_agent_is_not(dataset: Path, start_agent: Any, tmp_path: Path) -> None:
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(tmp_path / "agent.sock"))
    stale.close()  # the file remains, nobody listens: what a crashed agent leaves behind
    live = start_agent(dataset)
    assert CacheClient(live.config.socket_path).ping()["ok"]
    with pytest.raises(RuntimeError, match="already serving"):
        start_agent(dataset)


def test_http_probes_and_metrics(dataset: Path, start_agent: Any) -> None:
    import urllib.error
    import urllib.request

    agent = start_agent(dataset, http_port=0, http_host="127.0.0.1")
    base = f"http://127.0.0.1:{agent.agent.http_port}"
    assert urllib.request.urlopen(f"{base}/healthz").status == 200
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"{base}/readyz")
    assert err.value.code == 503
    agent.maintain()
    assert urllib.request.urlopen(f"{base}/readyz").status == 200
    client = CacheClient(agent.config.socket_path)
    client.open("train/shard-1.bin").close()
    text = urllib.request.urlopen(f"{base}/metrics").read().decode()
    for series in (
        "trainguard_cache_shards 5.0",
        "trainguard_cache_opens_total 1.0",
        "trainguard_cache_hits_total 1.0",
        "trainguard_cache_bytes_served_total 8192.0",
        "trainguard_cache_bytes_resident",
    ):
        assert series in text
    client.close()


def test_reporter_receives_residency_only_when_it_changes(tmp_path: Path) -> None:
    import asyncio

    from trainguard.cache.agent import AgentConfig, CacheAgent

    root = tmp_path / "rep"
    _make_shards(root, 2, 4)
    reports: list[tuple[int, int, bool]] = []

    async def reporter(resident: int, shards: int, warm: bool) -> None:
        reports.append((resident, shards, warm))

    async def scenario() -> None:
        agent = CacheAgent(
            AgentConfig(root=str(root), socket_path=str(tmp_path / "r.sock"), http_port=None,
                        maintain_interval=None, memory_budget=1 << 20),
            reporter=reporter,
        )
        await agent.start()
        await agent.maintain()
        await agent.maintain()
        await agent.stop()

    asyncio.run(scenario())
    assert reports == [(8 * pages.PAGE_SIZE, 2, True)]
