"""The batched ``open_many`` request over the real socket (good case, per-item refusals, every malformed request),
the client's ``open_shards`` / ``open_many``, and the agent's per-connection ordering and backpressure."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import struct
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from trainguard.cache.client import CacheClient, CacheError, open_shards
from trainguard.cache.protocol import MAX_OPEN_BATCH, encode


def raw_connect(path: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(path)
    return sock


def read_frame(sock: socket.socket) -> dict:
    reply, fds = recv_reply(sock)
    assert fds == []
    return reply


def ask(sock: socket.socket, payload: bytes) -> dict:
    sock.sendall(struct.pack(">I", len(payload)) + payload)
    return read_frame(sock)


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()

SHARDS = [f"train/shard-{i}.bin" for i in range(3)]


def recv_reply(sock: socket.socket, max_fds: int = 253) -> tuple[dict, list[int]]:
    """One reply frame and the descriptors that came with it (which travel with its first byte). Reads exactly the
    frame's bytes, so pipelined replies are taken apart one by one."""
    data = b""
    fds: list[int] = []
    need = 4
    while len(data) < need:
        chunk, got, flags, _ = socket.recv_fds(sock, need - len(data), max_fds)
        assert not flags & socket.MSG_CTRUNC
        assert chunk, "agent closed the connection"
        data += chunk
        fds += got
        if len(data) == 4:
            need = 4 + struct.unpack(">I", data)[0]
    return json.loads(data[4:]), fds


def open_fd_count(expected: int | None = None) -> int:
    """Descriptors open in this process (the agent's thread included: it closes its copies just after sending,
    so wait a moment for ``expected``)."""
    deadline = time.monotonic() + 2
    while True:
        count = len(os.listdir("/proc/self/fd"))
        if expected is None or count <= expected or time.monotonic() > deadline:
            return count
        time.sleep(0.01)


@pytest.mark.parametrize("warm", [False, True], ids=["first-open-hashes", "fast-path"])
def test_open_many_hands_one_fd_per_shard_in_order(dataset: Path, start_agent: Any, warm: bool) -> None:
    agent = start_agent(dataset)
    if warm:
        agent.maintain()  # checksums computed at index time: every open below takes the fast path
    sock = raw_connect(agent.config.socket_path)
    names = [SHARDS[2], SHARDS[0], "empty.bin", SHARDS[2]]  # duplicates are allowed
    sock.sendall(encode({"op": "open_many", "shards": names}))
    reply, fds = recv_reply(sock)
    assert reply["ok"] is True and [s["name"] for s in reply["shards"]] == names
    assert len(fds) == len(names)
    for name, item, fd in zip(names, reply["shards"], fds):
        content = (dataset / name).read_bytes()
        assert item["size"] == len(content) == os.fstat(fd).st_size
        assert item["checksum"] == sha256(content)
        assert os.pread(fd, len(content) + 1, 0) == content
        with pytest.raises(OSError):
            os.write(fd, b"x")  # read-only descriptors
        os.close(fd)
    assert agent.agent.metrics.opens._value.get() == len(names)
    assert ask(sock, b'{"op": "ping"}')["ok"]  # the connection stays usable
    sock.close()


@pytest.mark.parametrize("warm", [False, True], ids=["slow-path", "fast-path"])
def test_open_many_refuses_bad_items_one_by_one(dataset: Path, start_agent: Any, warm: bool) -> None:
    agent = start_agent(dataset)
    if warm:
        agent.maintain()
    sock = raw_connect(agent.config.socket_path)
    names: list[Any] = [SHARDS[1], "train/missing.bin", "../secret.txt", "/etc/passwd", "train/escape.bin",
                        "train", 7, None, "a//b", SHARDS[0]]
    sock.sendall(encode({"op": "open_many", "shards": names}))
    reply, fds = recv_reply(sock)
    codes = [item.get("error", {}).get("code") for item in reply["shards"]]
    assert codes == [None, "NotFound", "InvalidName", "InvalidName", "OutsideRoot", "NotFound", "Malformed",
                     "Malformed", "InvalidName", None]
    assert [item["name"] for item in reply["shards"]] == names
    assert all(item["error"]["message"] for item in reply["shards"] if "error" in item)
    assert len(fds) == 2  # only the served ones carry a descriptor, in item order
    assert os.pread(fds[0], 10, 0) == b"\x02" * 10 and os.pread(fds[1], 10, 0) == b"\x01" * 10
    for fd in fds:
        os.close(fd)
    assert b"outside the root" not in json.dumps(reply).encode()
    sock.close()


@pytest.mark.parametrize(
    "request_body",
    [
        b'{"op": "open_many"}',
        b'{"op": "open_many", "shards": null}',
        b'{"op": "open_many", "shards": "train/shard-0.bin"}',
        b'{"op": "open_many", "shards": {"train/shard-0.bin": 1}}',
        b'{"op": "open_many", "shards": 3}',
        b'{"op": "open_many", "shards": []}',
        json.dumps({"op": "open_many", "shards": ["train/shard-0.bin"] * (MAX_OPEN_BATCH + 1)}).encode(),
    ],
    ids=["missing", "null", "string", "object", "number", "empty", "too-many"],
)
def test_malformed_open_many_is_refused_and_the_connection_stays_usable(
    dataset: Path, start_agent: Any, request_body: bytes
) -> None:
    agent = start_agent(dataset)
    agent.maintain()
    sock = raw_connect(agent.config.socket_path)
    sock.sendall(struct.pack(">I", len(request_body)) + request_body)
    reply, fds = recv_reply(sock)
    assert fds == []
    assert reply["ok"] is False and reply["error"]["code"] == "Malformed" and "'shards'" in reply["error"]["message"]
    assert ask(sock, b'{"op": "ping"}')["ok"]
    sock.close()


def test_full_batch_fits_one_message(tmp_path: Path, start_agent: Any) -> None:
    root = tmp_path / "many"
    root.mkdir()
    for i in range(MAX_OPEN_BATCH):
        (root / f"s{i:03d}").write_bytes(i.to_bytes(2, "big"))
    agent = start_agent(root)
    agent.maintain()
    sock = raw_connect(agent.config.socket_path)
    names = [f"s{i:03d}" for i in range(MAX_OPEN_BATCH)]
    sock.sendall(encode({"op": "open_many", "shards": names}))
    reply, fds = recv_reply(sock)
    assert reply["ok"] and len(fds) == MAX_OPEN_BATCH
    assert [os.pread(fd, 2, 0) for fd in fds] == [i.to_bytes(2, "big") for i in range(MAX_OPEN_BATCH)]
    for fd in fds:
        os.close(fd)
    sock.close()


@pytest.mark.parametrize("change", ["rewrite", "truncate", "replace"])
def test_open_many_never_serves_a_changed_shard_stale(dataset: Path, start_agent: Any, change: str) -> None:
    agent = start_agent(dataset)
    agent.maintain()
    client = CacheClient(agent.config.socket_path)
    path = dataset / SHARDS[0]
    before = client.stat(SHARDS[0])
    if change == "rewrite":
        new = b"\x09" * path.stat().st_size
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
    shards = client.open_many([SHARDS[1], SHARDS[0]])
    assert bytes(shards[1].view) == new and shards[1].size == len(new)
    assert shards[1].checksum == sha256(new) != before.checksum
    for shard in shards:
        shard.close()
    client.close()


# -- fast-path safety ----------------------------------------------------------------------------------------
def test_warm_opens_take_the_fast_path(dataset: Path, start_agent: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    agent = start_agent(dataset)
    agent.maintain()
    index = agent.agent.index
    slow_opens: list[object] = []
    real_open = index.open
    monkeypatch.setattr(index, "open", lambda name: slow_opens.append(name) or real_open(name))
    client = CacheClient(agent.config.socket_path)
    with client.open(SHARDS[0]):
        pass
    for shard in client.open_shards(SHARDS):
        shard.close()
    assert slow_opens == []
    with client.open("train/alias.bin"):  # a name reached through a symlink is resolved in full every time
        pass
    assert slow_opens == ["train/alias.bin"]
    client.close()


def test_directory_swapped_for_an_escaping_symlink_is_refused(dataset: Path, start_agent: Any) -> None:
    agent = start_agent(dataset)
    agent.maintain()
    client = CacheClient(agent.config.socket_path)
    with client.open(SHARDS[2]):
        pass
    outside = dataset.parent / "outside"
    outside.mkdir()
    (outside / "shard-2.bin").write_bytes(b"secret" * 100)
    os.rename(dataset / "train", dataset.parent / "train-moved")
    os.symlink(outside, dataset / "train")
    for attempt in (lambda: client.open(SHARDS[2]), lambda: client.open_many([SHARDS[2]])):
        with pytest.raises(CacheError) as err:
            attempt()
        assert err.value.code == "OutsideRoot"
    client.close()


def test_repointed_in_root_symlink_serves_its_new_target(dataset: Path, start_agent: Any) -> None:
    agent = start_agent(dataset)
    agent.maintain()
    client = CacheClient(agent.config.socket_path)
    alias = dataset / "train" / "alias.bin"
    with client.open("train/alias.bin") as shard:
        assert shard.view[0] == 1
    alias.unlink()
    os.symlink(dataset / SHARDS[1], alias)
    with client.open("train/alias.bin") as shard:
        assert shard.view[0] == 2 and shard.size == 8192
    client.close()


# -- connection handling -------------------------------------------------------------------------------------
def test_pipelined_requests_are_answered_in_order(dataset: Path, start_agent: Any) -> None:
    agent = start_agent(dataset)  # no residency pass yet: the first open of each shard hashes it (slow path)
    sock = raw_connect(agent.config.socket_path)
    requests = [{"op": "open", "shard": SHARDS[0]}, {"op": "ping"}, {"op": "open_many", "shards": SHARDS},
                {"op": "open", "shard": "train/missing.bin"}, {"op": "stat", "shard": SHARDS[1]}, {"op": "ping"}]
    sock.sendall(b"".join(encode(r) for r in requests))
    replies = []
    for request in requests:
        reply, fds = recv_reply(sock)
        replies.append((reply, len(fds)))
        for fd in fds:
            os.close(fd)
    assert [(r.get("ok"), n) for r, n in replies] == [(True, 1), (True, 0), (True, 3), (False, 0), (True, 0),
                                                     (True, 0)]
    assert replies[0][0]["shard"]["name"] == SHARDS[0] and "dataset" in replies[1][0]
    assert replies[3][0]["error"]["code"] == "NotFound" and replies[4][0]["shard"]["name"] == SHARDS[1]
    sock.close()


def test_client_that_does_not_read_its_replies_is_held_back_not_buffered_without_bound(
    dataset: Path, start_agent: Any
) -> None:
    agent = start_agent(dataset)
    agent.maintain()
    sock = raw_connect(agent.config.socket_path)
    frame = encode({"op": "stat", "shard": SHARDS[0]})  # replies several times larger than the requests
    count = 100_000
    payload = frame * count
    sock.setblocking(False)
    sent = 0
    try:  # fill both directions: the agent must stop reading rather than queue replies without bound
        while sent < len(payload):
            sent += sock.send(payload[sent : sent + 65536])
    except BlockingIOError:
        pass
    assert sent < len(payload)
    time.sleep(0.2)
    (connection,) = agent.agent._connections  # still connected, waiting for us to read
    assert len(connection.inbox) <= 2 * 65536 and len(connection.outbox) <= 1  # held back, not buffering
    sock.setblocking(True)
    sock.settimeout(10)
    answered = 0
    while answered < count:
        reply = read_frame(sock)
        assert reply["ok"] and reply["shard"]["name"] == SHARDS[0]
        answered += 1
        if sent < len(payload) and answered % 100 == 0:
            sock.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                sent += sock.send(payload[sent : sent + 65536])
            sock.setblocking(True)
            sock.settimeout(10)
    assert sent == len(payload)
    sock.close()


def test_agent_holds_no_descriptors_after_clients_leave(dataset: Path, start_agent: Any) -> None:
    agent = start_agent(dataset)
    agent.maintain()
    baseline = open_fd_count()
    sock = raw_connect(agent.config.socket_path)
    sock.sendall(encode({"op": "open_many", "shards": SHARDS}) * 50)
    sock.close()  # leave without reading a single reply
    client = CacheClient(agent.config.socket_path)
    assert client.ping()["ok"]
    client.close()
    assert agent.call(_settled(agent))
    assert open_fd_count(baseline) <= baseline


async def _settled(agent: Any) -> bool:
    import asyncio

    for _ in range(200):
        if not agent.agent._connections:
            return True
        await asyncio.sleep(0.01)
    return False


# -- client --------------------------------------------------------------------------------------------------
def test_open_shards_yields_in_order_and_maps_lazily(dataset: Path, start_agent: Any) -> None:
    agent = start_agent(dataset)
    agent.maintain()
    client = CacheClient(agent.config.socket_path)
    names = SHARDS * 5 + ["empty.bin"]
    seen = []
    for shard in open_shards(names, client=client, batch=4):
        with shard:
            assert shard.source == "agent" and shard.view.readonly
            assert bytes(shard.view) == (dataset / shard.name).read_bytes()
            seen.append(shard.name)
    assert seen == names
    assert agent.agent.metrics.opens._value.get() == len(names)
    with pytest.raises(ValueError):
        next(client.open_shards(SHARDS, batch=MAX_OPEN_BATCH + 1))
    client.close()


def test_open_shards_raises_a_refusal_at_its_turn_and_closes_what_it_holds(dataset: Path, start_agent: Any) -> None:
    agent = start_agent(dataset)
    agent.maintain()
    client = CacheClient(agent.config.socket_path)
    client.ping()
    baseline = open_fd_count()
    walk = client.open_shards([SHARDS[0], "train/missing.bin", SHARDS[1], SHARDS[2]])
    with next(walk) as first:
        assert first.name == SHARDS[0]
    with pytest.raises(CacheError) as err:
        next(walk)
    assert err.value.code == "NotFound"
    assert open_fd_count(baseline) == baseline  # the two descriptors behind the refusal were closed
    with pytest.raises(CacheError):
        client.open_many([SHARDS[0], "../x"])
    assert open_fd_count(baseline) == baseline
    walk = client.open_shards(SHARDS)
    next(walk).close()
    walk.close()  # abandoned part-way
    assert open_fd_count(baseline) == baseline
    client.close()


def test_open_shards_reopens_a_shard_changed_after_the_agent_checked_it(dataset: Path, start_agent: Any) -> None:
    agent = start_agent(dataset)
    agent.maintain()
    client = CacheClient(agent.config.socket_path)
    walk = client.open_shards([SHARDS[0], SHARDS[1]])
    next(walk).close()  # the descriptor of SHARDS[1] is held, not mapped yet
    new = b"\x07" * 5000
    with open(dataset / SHARDS[1], "r+b") as f:
        f.truncate(0)
        f.write(new)
    with next(walk) as shard:
        assert shard.size == len(new) and bytes(shard.view) == new and shard.checksum == sha256(new)
    client.close()


def test_open_shards_without_an_agent_reads_directly(dataset: Path) -> None:
    direct = CacheClient(socket_path="", dataset_root=str(dataset))
    shards = direct.open_many(SHARDS)
    assert [s.source for s in shards] == ["direct"] * 3
    assert [bytes(s.view[:1]) for s in shards] == [b"\x01", b"\x02", b"\x03"]
    for shard in shards:
        shard.close()


def test_descriptions_always_match_the_served_version_under_concurrent_changes(
    dataset: Path, start_agent: Any
) -> None:
    """A shard replaced over and over while residency passes run in worker threads and a client opens it on both
    paths: every descriptor handed out is described with its own version's size and checksum."""
    agent = start_agent(dataset)
    agent.maintain()
    path = dataset / SHARDS[0]
    stop = threading.Event()
    failures: list[BaseException] = []

    def replace_forever() -> None:
        i = 0
        while not stop.is_set():
            i += 1
            tmp = path.with_suffix(f".tmp{i % 2}")
            tmp.write_bytes(bytes([i % 251]) * (4096 + (i % 3) * 1000))
            os.replace(tmp, path)  # each version is a new, never rewritten file: its fd's content is fixed

    def maintain_forever() -> None:
        try:
            while not stop.is_set():
                agent.maintain()
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=replace_forever), threading.Thread(target=maintain_forever)]
    for t in threads:
        t.start()
    client = CacheClient(agent.config.socket_path)
    checked = 0
    try:
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            try:
                shards = [client.open(SHARDS[0])] + client.open_many([SHARDS[0], SHARDS[1], SHARDS[0]])
            except CacheError as exc:
                assert exc.code == "Changed"  # gave up after retries: refused, never stale
                continue
            for shard in shards:
                with shard:
                    assert shard.size == len(shard.view)
                    assert shard.checksum == sha256(bytes(shard.view))
                    checked += 1
    finally:
        stop.set()
        for t in threads:
            t.join(10)
        client.close()
    assert not failures and checked > 0
