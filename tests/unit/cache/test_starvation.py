"""Issue 10, attack 6: the cache agent cannot be starved locally, nor reached by peers outside its socket's group.

Each attack runs as an attacker on the node would run it, from a process of its own (``in_child``: a forked
process, optionally under another uid/gid/groups, so the kernel sees distinct peers and applies its permission
checks), and each test also shows that the legitimate neighbour is still served.
"""

from __future__ import annotations

import asyncio
import concurrent.futures.thread  # noqa: F401  (imported lazily by asyncio.to_thread: a child under another uid
import contextlib                 # may not be able to read the interpreter's library directory)
import errno
import os
import pickle
import resource
import selectors
import signal
import socket
import struct
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from trainguard.cache.agent import AgentConfig, CacheAgent
from trainguard.cache.client import CacheClient, CacheError, CacheUnavailable
from trainguard.cache.protocol import MAX_OPEN_BATCH, encode

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="switches uid/gid in forked children")

OTHER_UID = 47123  # ids nothing else on the machine uses: the kernel's in-flight count is per user
SOCKET_GID = 47124


def in_child(fn: Callable[[], Any], *, uid: int | None = None, gid: int | None = None,
             groups: list[int] | None = None, timeout: float = 60) -> Any:
    """Run ``fn`` in a forked process (as ``uid``/``gid``/``groups`` when given) and return its result, or raise
    what it raised."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read_end)
        try:
            _become(uid, gid, groups)
            payload = pickle.dumps(("ok", fn()))
        except BaseException as exc:  # sent back and raised in the parent
            payload = pickle.dumps(("error", f"{type(exc).__name__}: {exc}"))
        os.write(write_end, payload)
        os._exit(0)
    os.close(write_end)
    chunks = []
    deadline = time.monotonic() + timeout
    try:
        with os.fdopen(read_end, "rb") as pipe:
            while chunk := pipe.read(65536):
                chunks.append(chunk)
                if time.monotonic() > deadline:
                    raise TimeoutError("child did not finish")
    finally:
        os.waitpid(pid, 0)
    kind, value = pickle.loads(b"".join(chunks))
    if kind == "error":
        raise AssertionError(f"child failed: {value}")
    return value


def _become(uid: int | None, gid: int | None, groups: list[int] | None) -> None:
    if groups is not None:
        os.setgroups(groups)
    if gid is not None:
        os.setgid(gid)
    if uid is not None:
        os.setuid(uid)


@pytest.fixture
def public_dir() -> Iterator[Path]:
    """A directory other uids can traverse (pytest's tmp_path lives under a 0700 directory)."""
    path = Path(tempfile.mkdtemp(prefix="trainguard-starve-", dir="/tmp"))
    os.chmod(path, 0o755)
    try:
        yield path
    finally:
        import shutil

        shutil.rmtree(path, ignore_errors=True)


def many_shards(root: Path, count: int) -> list[str]:
    (root / "s").mkdir(parents=True, exist_ok=True)
    names = []
    for i in range(count):
        (root / "s" / f"{i:04d}.bin").write_bytes(bytes([i % 251]) * 4096)
        names.append(f"s/{i:04d}.bin")
    os.chmod(root, 0o755)
    os.chmod(root / "s", 0o755)
    return names


def raw_connect(path: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(path)
    return sock


def wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


# -- connection slots ----------------------------------------------------------------------------------------
def hold_connections(path: str, count: int, seconds: float) -> Callable[[], dict]:
    """The attack: open ``count`` connections and hold them idle. Reports how many the agent left open shortly
    after (``alive``) and after ``seconds`` (``aliveAfter``); the others it refused or closed."""

    def alive(socks: list[socket.socket]) -> int:
        n = 0
        for sock in socks:
            sock.setblocking(False)
            try:
                sock.recv(1, socket.MSG_PEEK)  # data (a refusal) or end of stream: not served
            except BlockingIOError:
                n += 1
            except OSError:
                pass
        return n

    def attack() -> dict:
        socks = []
        while len(socks) < count:
            try:
                socks.append(raw_connect(path))
            except BlockingIOError:  # the listen backlog is full for a moment: connect again
                time.sleep(0.001)
        time.sleep(0.3)
        first = alive(socks)
        time.sleep(seconds)
        return {"alive": first, "aliveAfter": alive(socks)}

    return attack


def test_256_idle_connections_from_one_process_leave_room_for_others(dataset: Path, start_agent: Any) -> None:
    agent = start_agent(dataset)  # production limits: 256 connections, 128 per peer, 60 s idle timeout
    config = agent.config
    done: dict = {}

    def attacker() -> None:
        done.update(in_child(hold_connections(config.socket_path, 300, seconds=2.0)))

    thread = threading.Thread(target=attacker)
    thread.start()
    try:
        # The attacker holds its share (waiting for it, not sleeping a fixed time: a loaded machine is slower).
        assert wait_until(lambda: len(agent.agent._connections) >= config.max_connections_per_peer, timeout=20)
        # The good client, another process on the node, is served at once: ping, open, open_many.
        client = CacheClient(config.socket_path, busy_timeout=0)
        assert client.ping()["ok"]
        with client.open("train/shard-1.bin") as shard:
            assert shard.view[0] == 2
        assert len(client.open_many(["train/shard-0.bin", "train/shard-2.bin"])) == 2
        client.close()
    finally:
        thread.join(30)
    # The attacker kept the per-peer cap, not every slot (the rest were refused Busy or displaced its own).
    assert done["aliveAfter"] == config.max_connections_per_peer


def test_a_newcomer_takes_a_slot_from_the_peer_holding_the_most(dataset: Path, start_agent: Any) -> None:
    agent = start_agent(dataset, max_connections=8, max_connections_per_peer=8)
    config = agent.config
    done: dict = {}
    thread = threading.Thread(target=lambda: done.update(in_child(hold_connections(config.socket_path, 8, 2.0))))
    thread.start()
    try:
        # Every slot held by one idle peer, and counted by it.
        assert wait_until(lambda: len(agent.agent._connections) == 8, timeout=20)
        client = CacheClient(config.socket_path, busy_timeout=0)
        assert client.ping()["ok"]
        client2 = CacheClient(config.socket_path, busy_timeout=0)  # this peer holds 1 of 8: it takes another
        assert client2.ping()["ok"]
        client.close()
        client2.close()
    finally:
        thread.join(30)
    # The idle peer held all 8 (the agent counted them above) and lost the two the newcomers took.
    assert done["aliveAfter"] == 6


def test_a_peer_at_its_share_is_busy_rather_than_evicting_others(dataset: Path, start_agent: Any) -> None:
    agent = start_agent(dataset, max_connections=2)
    first, second = CacheClient(agent.config.socket_path), CacheClient(agent.config.socket_path, busy_timeout=0)
    assert first.ping()["ok"] and second.ping()["ok"]
    third = CacheClient(agent.config.socket_path, busy_timeout=0.3)
    started = time.monotonic()
    with pytest.raises(CacheError) as err:  # all three are one peer: nobody to take a slot from
        third.ping()
    assert err.value.code == "Busy" and 0.3 <= time.monotonic() - started < 3
    for client in (first, second, third):
        client.close()


def test_idle_connections_are_closed_and_the_client_reconnects_transparently(
    dataset: Path, start_agent: Any
) -> None:
    agent = start_agent(dataset, idle_timeout=0.3)
    idle = raw_connect(agent.config.socket_path)
    client = CacheClient(agent.config.socket_path)
    assert client.ping()["ok"]
    assert wait_until(lambda: not agent.agent._connections, timeout=3)  # both closed after the idle timeout
    assert idle.recv(1) == b""
    with client.open("train/shard-2.bin") as shard:  # the client's connection was closed too: it reconnects
        assert shard.size == 4096
    assert agent.agent.metrics.closed.labels("idle")._value.get() >= 2
    client.close()
    idle.close()


def test_stalled_reader_is_closed_after_the_idle_timeout(dataset: Path, start_agent: Any) -> None:
    agent = start_agent(dataset, idle_timeout=0.5)
    agent.maintain()
    sock = raw_connect(agent.config.socket_path)
    sock.setblocking(False)
    frame = encode({"op": "stat", "shard": "train/shard-0.bin"})
    with contextlib.suppress(BlockingIOError):
        while True:  # fill both directions and never read: the agent's outbox stays non-empty
            sock.send(frame * 256)
    assert wait_until(lambda: not agent.agent._connections, timeout=5)
    sock.close()


def test_frame_deadline_applies_to_each_frame_not_the_connection(dataset: Path, start_agent: Any) -> None:
    """A slow sender is cut off when one frame takes longer than ``frame_timeout``, never because a series of
    frames, each on time, runs longer than that (the deadline restarts with every frame)."""
    agent = start_agent(dataset, frame_timeout=0.4)
    sock = raw_connect(agent.config.socket_path)
    frame = encode({"op": "ping"})
    half = len(frame) // 2
    sock.sendall(frame[:half])
    for _ in range(8):  # 9 frames over 1.35 s, three times the deadline; each one completes in 0.15 s
        time.sleep(0.15)
        sock.sendall(frame[half:] + frame[:half])
    time.sleep(0.15)
    sock.sendall(frame[half:])
    replies = b""
    while len(replies) < 9 * len(encode({"ok": True, "dataset": "", "ready": False})):
        chunk = sock.recv(65536)
        assert chunk, "the agent cut off a sender whose every frame completed in time"
        replies += chunk
    sock.sendall(frame[:half])  # one frame left unfinished: cut off after the deadline
    sock.settimeout(5)
    assert sock.recv(1) == b""
    sock.close()


# -- descriptors in flight -----------------------------------------------------------------------------------
def serve_agent_as(config: AgentConfig, *, uid: int, groups: list[int], nofile: int) -> int:
    """Start an agent in a forked process running as ``uid`` with RLIMIT_NOFILE ``nofile`` (not root: root's
    CAP_SYS_ADMIN exempts it from the kernel's in-flight limit). Returns its pid; SIGTERM stops it."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
            _become(uid, uid, groups)

            async def serve() -> None:
                agent = CacheAgent(config)
                await agent.start()  # no residency pass: first opens hash their shard in a task (the slow path)
                stop = asyncio.Event()
                asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
                await stop.wait()
                await agent.stop()

            asyncio.run(serve())
        except BaseException:
            import traceback

            traceback.print_exc()  # shown by pytest with the failing test's output
        finally:
            os._exit(0)
    return pid


@needs_root
@pytest.mark.parametrize("connections", [1, 4])
def test_client_that_never_reads_open_many_replies_cannot_exhaust_the_descriptor_quota(
    public_dir: Path, connections: int
) -> None:
    names = many_shards(public_dir / "data", MAX_OPEN_BATCH)
    sock_dir = public_dir / "sock"
    sock_dir.mkdir()
    os.chown(sock_dir, OTHER_UID, OTHER_UID)
    config = AgentConfig(root=str(public_dir / "data"), socket_path=str(sock_dir / "agent.sock"), http_port=None,
                         maintain_interval=None, rescan_interval=3600.0, memory_budget=1 << 30, socket_group=0)
    # RLIMIT_NOFILE 1024: the kernel refuses a send once the agent's user has more than 1024 descriptors in flight.
    pid = serve_agent_as(config, uid=OTHER_UID, groups=[0], nofile=1024)
    attackers: list[socket.socket] = []
    try:
        assert wait_until(lambda: os.path.exists(config.socket_path))
        request = encode({"op": "open_many", "shards": names})
        requests = 40  # per connection: 5,120 descriptors asked for, never read: five times the kernel's limit
        for _ in range(connections):
            attackers.append(raw_connect(config.socket_path))
            attackers[-1].sendall(request * requests)
        time.sleep(1.0)

        def good_client() -> int:
            client = CacheClient(config.socket_path, busy_timeout=2)
            received = 0
            for _ in range(10):
                shards = client.open_many(names[:32])
                received += len(shards)
                for shard in shards:
                    shard.close()
            client.close()
            return received

        # Another process on the node keeps getting its descriptors while the attacker sits on its replies.
        assert in_child(good_client) == 320
        # The attacker was cut off at its bound: what reached its sockets is one peer's share, over all of them.
        received = []
        for attacker in attackers:
            attacker.setblocking(False)
            fds: list[int] = []
            with contextlib.suppress(BlockingIOError):
                while len(fds) <= 4 * MAX_OPEN_BATCH:
                    data, got, _, _ = socket.recv_fds(attacker, 65536, 253)
                    if not data:
                        break
                    fds += got
            received.append(len(fds))
            for fd in fds:
                os.close(fd)
        assert sum(received) == MAX_OPEN_BATCH  # RLIMIT_NOFILE 1024: 512 in all, a quarter of that per peer
        # Once it reads (all its connections: the share is per peer), it is served again: every request is answered.
        totals = dict(zip(attackers, received))
        with selectors.DefaultSelector() as selector:
            for attacker in attackers:
                selector.register(attacker, selectors.EVENT_READ)
            while any(total < requests * MAX_OPEN_BATCH for total in totals.values()):
                ready = selector.select(timeout=10)
                assert ready, f"agent stopped answering: {list(totals.values())}"
                for key, _ in ready:
                    with contextlib.suppress(BlockingIOError):
                        data, got, _, _ = socket.recv_fds(key.fileobj, 65536, 253)
                        assert data, "agent closed the connection"
                        totals[key.fileobj] += len(got)
                        for fd in got:
                            os.close(fd)
        assert list(totals.values()) == [requests * MAX_OPEN_BATCH] * connections
    finally:
        for attacker in attackers:
            attacker.close()
        os.kill(pid, signal.SIGTERM)
        os.waitpid(pid, 0)


def test_descriptors_unread_when_a_connection_is_closed_stay_charged_until_the_client_reads(
    dataset: Path, start_agent: Any
) -> None:
    """Closing the agent's end does not free descriptors queued at the client: the connection lingers, counted,
    so that reconnecting cannot shed the charge; it is released once the client has read or closed."""
    agent = start_agent(dataset, idle_timeout=0.3)
    agent.maintain()
    shards = ["train/shard-0.bin", "train/shard-1.bin", "train/shard-2.bin"]
    readers = []
    for _ in range(2):
        sock = raw_connect(agent.config.socket_path)
        sock.sendall(encode({"op": "open_many", "shards": shards}))
        readers.append(sock)
    assert wait_until(lambda: not agent.agent._connections and len(agent.agent._lingering) == 2, timeout=5)
    assert agent.agent._unread_total == 6
    assert agent.agent.metrics.registry.get_sample_value("trainguard_cache_unread_fds") == 6
    reading, leaving = readers
    reply, fds, _, _ = socket.recv_fds(reading, 65536, 253)  # the client reads what was queued, then end of stream
    assert len(fds) == 3 and reading.recv(1) == b""
    for fd in fds:
        os.close(fd)
    leaving.close()  # closing its end discards the queued descriptors: released too
    assert wait_until(lambda: not agent.agent._lingering, timeout=5)
    assert agent.agent._unread_total == 0
    assert agent.agent.metrics.registry.get_sample_value("trainguard_cache_unread_fds") == 0
    reading.close()


# -- who may connect -----------------------------------------------------------------------------------------
@needs_root
def test_only_peers_in_the_socket_group_are_served(public_dir: Path, start_agent: Any, dataset: Path) -> None:
    socket_path = str(public_dir / "agent.sock")
    agent = start_agent(dataset, socket_path=socket_path, socket_group=SOCKET_GID)
    st = os.stat(socket_path)
    assert (st.st_mode & 0o777, st.st_gid) == (0o660, SOCKET_GID)
    expected = (dataset / "train" / "shard-1.bin").read_bytes()

    def open_shard() -> Any:
        client = CacheClient(socket_path, reconnect_timeout=0.2, busy_timeout=0)
        try:
            with client.open("train/shard-1.bin") as shard:
                return bytes(shard.view) == expected
        except CacheError as exc:
            return exc.code
        except CacheUnavailable:
            return "unreachable"
        finally:
            client.close()

    def connect_errno() -> int:
        try:
            raw_connect(socket_path).close()
            return 0
        except OSError as exc:
            return exc.errno

    # A trainer process with the group: served.
    assert in_child(open_shard, uid=OTHER_UID, gid=OTHER_UID, groups=[SOCKET_GID]) is True
    assert in_child(open_shard, uid=OTHER_UID, gid=SOCKET_GID, groups=[]) is True
    # Without the group the kernel refuses the connect (mode 0660)...
    assert in_child(connect_errno, uid=OTHER_UID, gid=OTHER_UID, groups=[]) == errno.EACCES
    assert in_child(open_shard, uid=OTHER_UID, gid=OTHER_UID, groups=[]) == "unreachable"
    # ...and root, whose CAP_DAC_OVERRIDE passes the mode bits, is refused by the agent's SO_PEERGROUPS check.
    assert in_child(connect_errno, uid=0, gid=0, groups=[]) == 0
    assert in_child(open_shard, uid=0, gid=0, groups=[]) == "Forbidden"
    assert in_child(open_shard, uid=0, gid=0, groups=[SOCKET_GID]) is True
    assert agent.agent.metrics.errors.labels("Forbidden")._value.get() == 2  # the two root connections


@needs_root
def test_quota_exhausted_by_another_process_of_the_agents_uid_is_answered_busy_and_retried(public_dir: Path) -> None:
    """The residual risk the agent cannot bound: another process running as the agent's UID holds the kernel's
    in-flight count above RLIMIT_NOFILE. The agent answers Busy (not a dropped connection), the client backs off,
    and it is served once that process lets go."""
    names = many_shards(public_dir / "data", 4)
    sock_dir = public_dir / "sock"
    sock_dir.mkdir()
    os.chown(sock_dir, OTHER_UID, OTHER_UID)
    config = AgentConfig(root=str(public_dir / "data"), socket_path=str(sock_dir / "agent.sock"), http_port=None,
                         maintain_interval=None, rescan_interval=3600.0, memory_budget=1 << 30, socket_group=0)
    agent_pid = serve_agent_as(config, uid=OTHER_UID, groups=[0], nofile=1024)
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    hog = os.fork()
    if hog == 0:  # pragma: no cover - the child: fill the UID's in-flight count, hold it until told
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))
            _become(OTHER_UID, OTHER_UID, [])
            sender, receiver = socket.socketpair()
            sender.setblocking(False)
            fd = os.open("/dev/null", os.O_RDONLY)
            with contextlib.suppress(OSError):
                while True:
                    socket.send_fds(sender, [b"x"], [fd] * 64)
            os.write(ready_w, b"1")
            os.read(go_r, 1)
            receiver.close()  # the queued descriptors are discarded: the count drops
            os.write(ready_w, b"2")
            os.read(go_r, 1)
        finally:
            os._exit(0)
    try:
        assert wait_until(lambda: os.path.exists(config.socket_path))
        assert os.read(ready_r, 1) == b"1"

        def client_run() -> dict:
            client = CacheClient(config.socket_path, busy_timeout=0, reconnect_timeout=0.5)
            try:
                client.open(names[0]).close()
                first = "served"
            except CacheError as exc:
                first = exc.code
            except CacheUnavailable:  # the connection dropped instead of an answer
                first = "unavailable"
            client.close()
            client = CacheClient(config.socket_path, busy_timeout=20)
            started = time.monotonic()
            with client.open(names[0]) as shard:
                size = shard.size
            return {"first": first, "size": size, "waited": time.monotonic() - started}

        results: dict = {}
        thread = threading.Thread(target=lambda: results.update(in_child(client_run)))
        thread.start()
        time.sleep(1.5)  # the client is backing off on Busy meanwhile
        os.write(go_w, b"g")
        assert os.read(ready_r, 1) == b"2"
        thread.join(30)
        assert results["first"] == "Busy" and results["size"] == 4096 and results["waited"] >= 1.0
    finally:
        with contextlib.suppress(OSError):
            os.write(go_w, b"gg")
        os.waitpid(hog, 0)
        os.kill(agent_pid, signal.SIGTERM)
        os.waitpid(agent_pid, 0)
