"""Security and robustness review of the cache (agent, index, client, builders): each test pins one fix."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import pytest

from trainguard.cache.client import CacheClient, CacheError
from trainguard.cache.index import ShardIndex

SHARDS = ["train/shard-0.bin", "train/shard-1.bin", "train/shard-2.bin"]


def _wake_fifo_reader(path: Path) -> None:
    """Open ``path`` for writing without blocking: wakes a reader stuck in open() (cleanup if a test fails)."""
    with contextlib.suppress(OSError):
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))


def _fifo_over(target: Path) -> None:
    tmp = target.with_name(".fifo-tmp")
    os.mkfifo(tmp)
    os.replace(tmp, target)


# -- special files -------------------------------------------------------------------------------------------
def test_fifo_renamed_over_an_indexed_shard_does_not_block_the_fast_path(dataset: Path, start_agent: Any) -> None:
    agent = start_agent(dataset)
    agent.maintain()  # indexed and checksummed: the next open takes the fast path, which opens the path itself
    target = dataset / SHARDS[1]
    _fifo_over(target)
    client = CacheClient(agent.config.socket_path, timeout=3, reconnect_timeout=0)
    try:
        with pytest.raises(CacheError) as err:
            client.open(SHARDS[1])
        assert err.value.code == "NotFound"
        assert client.ping()["ok"]
    finally:
        _wake_fifo_reader(target)
        client.close()


def test_fifo_swapped_in_between_check_and_open_does_not_block(
    dataset: Path, start_agent: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = start_agent(dataset)  # no residency pass: the open takes the full path (resolve, stat, open)
    target = dataset / SHARDS[1]
    real_resolve = ShardIndex._resolve_on_disk

    def resolve_then_swap(self: ShardIndex, name: str) -> Any:
        found = real_resolve(self, name)
        if name == SHARDS[1] and not target.is_fifo():
            _fifo_over(target)  # after the regular-file check, before the open
        return found

    monkeypatch.setattr(ShardIndex, "_resolve_on_disk", resolve_then_swap)
    client = CacheClient(agent.config.socket_path, timeout=3, reconnect_timeout=0)
    try:
        with pytest.raises(CacheError) as err:
            client.open(SHARDS[1])
        assert err.value.code == "NotFound"
        assert client.ping()["ok"]
    finally:
        _wake_fifo_reader(target)
        client.close()


def test_fifo_in_the_index_does_not_stall_residency_passes(dataset: Path, start_agent: Any) -> None:
    agent = start_agent(dataset)
    target = dataset / SHARDS[1]
    _fifo_over(target)  # indexed as a regular file by the first scan, a FIFO by the time the pass opens it
    try:
        agent.call(agent.agent.maintain(), timeout=5)
        entries = agent.agent.index.entries
        assert entries[SHARDS[0]].checksum is not None and entries[SHARDS[2]].checksum is not None
    finally:
        _wake_fifo_reader(target)


# -- symlinks swapped in after the check ---------------------------------------------------------------------
def _swap_parent_for_symlink(dataset: Path, secret: bytes) -> None:
    """Replace ``train/`` by a symlink to a directory outside the root holding a file named like a shard."""
    outside = dataset.parent / "outside"
    outside.mkdir(exist_ok=True)
    (outside / "shard-1.bin").write_bytes(secret)
    os.rename(dataset / "train", dataset.parent / "train-moved")
    os.symlink(outside, dataset / "train")


def test_parent_swapped_for_a_symlink_before_a_residency_pass_is_never_served(
    dataset: Path, start_agent: Any
) -> None:
    agent = start_agent(dataset)  # indexed by the first scan, not yet hashed; the next rescan is far away
    secret = b"outside the root " * 300
    _swap_parent_for_symlink(dataset, secret)
    agent.maintain()  # must not adopt the outside file's identity and checksum for the indexed name
    client = CacheClient(agent.config.socket_path)
    try:
        with pytest.raises(CacheError) as err:
            client.open(SHARDS[1]).close()
        assert err.value.code == "OutsideRoot"
        with pytest.raises(CacheError):
            client.open_many([SHARDS[1]])
    finally:
        client.close()


def test_parent_swapped_for_a_symlink_between_check_and_open_is_refused(
    dataset: Path, start_agent: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = start_agent(dataset)
    real_resolve = ShardIndex._resolve_on_disk

    def resolve_then_swap(self: ShardIndex, name: str) -> Any:
        found = real_resolve(self, name)
        if name == SHARDS[1] and not (dataset / "train").is_symlink():
            _swap_parent_for_symlink(dataset, b"outside the root " * 300)  # after realpath, before the open
        return found

    monkeypatch.setattr(ShardIndex, "_resolve_on_disk", resolve_then_swap)
    client = CacheClient(agent.config.socket_path)
    try:
        with pytest.raises(CacheError) as err:
            client.open(SHARDS[1]).close()
        assert err.value.code == "OutsideRoot"
    finally:
        client.close()


def test_in_root_symlinks_still_resolve(dataset: Path, start_agent: Any) -> None:
    agent = start_agent(dataset)
    agent.maintain()
    client = CacheClient(agent.config.socket_path)
    with client.open("train/alias.bin") as shard:
        assert shard.view[0] == 1
    client.close()


# -- connections ---------------------------------------------------------------------------------------------
def test_accept_failure_does_not_stop_the_agent_accepting(
    dataset: Path, start_agent: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio.selector_events
    import errno

    loop_class = asyncio.selector_events.BaseSelectorEventLoop
    real_accept = loop_class.sock_accept
    failures = [OSError(errno.EMFILE, "Too many open files")]

    async def flaky_accept(self: Any, sock: Any) -> Any:
        if failures:
            raise failures.pop()
        return await real_accept(self, sock)

    monkeypatch.setattr(loop_class, "sock_accept", flaky_accept)
    agent = start_agent(dataset)
    client = CacheClient(agent.config.socket_path, timeout=3, reconnect_timeout=3)
    try:
        assert client.ping()["ok"]
        assert not failures
    finally:
        client.close()


# -- client: descriptors received with a bad reply -----------------------------------------------------------
def _fd_count(settle_to: int | None = None) -> int:
    """Descriptors open in this process; with ``settle_to``, wait up to 2 s for the fake agent's thread (same
    process) to close its copies and its side of the connection."""
    import time

    deadline = time.monotonic() + 2
    while True:
        count = len(os.listdir("/proc/self/fd"))
        if settle_to is None or count <= settle_to or time.monotonic() > deadline:
            return count
        time.sleep(0.01)


class _FakeAgent:
    """Answers every request on every connection with ``frame``, carrying ``fds_per_reply`` descriptors."""

    def __init__(self, path: str, frame: bytes, fds_per_reply: int, source: Path):
        import socket
        import threading

        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(path)
        self.server.listen(8)
        self.frame, self.count, self.source = frame, fds_per_reply, source
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        import socket

        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            with conn:
                try:
                    conn.recv(65536)
                    fds = [os.open(self.source, os.O_RDONLY) for _ in range(self.count)]
                    try:
                        socket.send_fds(conn, [self.frame], fds)
                    finally:
                        for fd in fds:
                            os.close(fd)
                    conn.recv(1)  # hold the connection until the client drops it
                except OSError:
                    pass

    def close(self) -> None:
        import socket

        with contextlib.suppress(OSError):
            self.server.shutdown(socket.SHUT_RDWR)
        self.server.close()
        self.thread.join(5)


@pytest.mark.parametrize(
    "frame, code",
    [
        (b"\x00\x00\x00\x09not json!", "Malformed"),  # garbage body
        (b"\x00\x00\x00\x02[]", "Malformed"),  # JSON, not an object
        (b"\x00\x00\x00\x0b{\"ok\":true}", "Malformed"),  # open reply without a shard
        (b"\xff\xff\xff\xffxxxx", None),  # header over MAX_REPLY_BYTES: reconnects until it gives up
    ],
    ids=["garbage", "not-object", "no-shard", "oversized"],
)
def test_client_closes_descriptors_that_came_with_a_bad_reply(
    tmp_path: Path, dataset: Path, frame: bytes, code: str | None
) -> None:
    from trainguard.cache.client import CacheUnavailable

    fake = _FakeAgent(str(tmp_path / "fake.sock"), frame, 3, dataset / SHARDS[0])
    client = CacheClient(str(tmp_path / "fake.sock"), timeout=2, reconnect_timeout=0.3)
    try:
        client.ping()  # connect first, so the socket itself is not counted as a leak
    except (CacheError, CacheUnavailable):
        pass
    before = _fd_count()
    try:
        for _ in range(3):
            with pytest.raises((CacheError, CacheUnavailable)) as err:
                client.open(SHARDS[0])
            if code is not None:
                assert isinstance(err.value, CacheError) and err.value.code == code
        client.close()
        assert _fd_count(settle_to=before) <= before
    finally:
        client.close()
        fake.close()


# -- init container ------------------------------------------------------------------------------------------
@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/usr/bin/setpriv"), reason="needs root and setpriv")
@pytest.mark.parametrize("state", ["created-by-kubelet", "prepared-before", "prepared-wrong-mode"])
@pytest.mark.parametrize("gid", [None, 64320])
def test_prepare_socket_dir_works_with_cap_chown_alone(tmp_path: Path, state: str, gid: int | None) -> None:
    """As the DaemonSet runs it: root with every capability dropped but CHOWN (so no CAP_FOWNER). The directory
    ends up the agent's, searchable by the socket's group only (0750)."""
    import subprocess
    import sys

    path = tmp_path / "sock"
    path.mkdir(mode=0o755)
    os.chmod(path, 0o700 if state == "prepared-wrong-mode" else 0o755)
    if state != "created-by-kubelet":
        os.chown(path, 65532, 65532)
    code = ("import sys; from trainguard.cache.main import prepare_socket_dir; "
            "sys.exit(prepare_socket_dir(sys.argv[1], 65532, None if sys.argv[2] == '-' else int(sys.argv[2])))")
    result = subprocess.run(
        ["setpriv", "--bounding-set=-all,+chown", "--inh-caps=-all,+chown", "--", sys.executable, "-c", code, str(path),
         "-" if gid is None else str(gid)],
        capture_output=True, text=True, timeout=60, cwd=Path(__file__).resolve().parents[3],
    )
    assert result.returncode == 0, result.stderr
    st = path.stat()
    assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (65532, 65532 if gid is None else gid, 0o750)


# -- pin -----------------------------------------------------------------------------------------------------
class _FakeCudart:
    """A CUDA runtime with one device that supports read-only registration; records what is registered."""

    def __init__(self) -> None:
        self.registered: dict[int, int] = {}

    def cudaGetDeviceCount(self, count: Any) -> int:  # noqa: N802 - mirrors the C symbol
        count._obj.value = 1
        return 0

    def cudaDeviceGetAttribute(self, value: Any, attr: int, device: int) -> int:  # noqa: N802
        value._obj.value = 1
        return 0

    def cudaHostRegister(self, address: Any, length: Any, flags: int) -> int:  # noqa: N802
        self.registered[address.value] = length.value
        return 0

    def cudaHostUnregister(self, address: Any) -> int:  # noqa: N802
        self.registered.pop(address.value)
        return 0


def test_pinned_range_keeps_the_mapping_alive_after_the_shard_is_closed(
    dataset: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trainguard.cache import client as client_module, pinning

    cudart = _FakeCudart()
    monkeypatch.setattr(pinning, "load_cudart", lambda: cudart)
    direct = CacheClient(socket_path="", dataset_root=str(dataset))
    shard = direct.open(SHARDS[1])
    pinned = client_module.pin(shard.view)
    shard.close()  # while CUDA still has the range registered: must not unmap it
    assert not shard._mapping.closed
    assert bytes(pinned.view[:4]) == b"\x02" * 4
    pinned.unpin()
    assert cudart.registered == {}
    shard.close()
    assert shard._mapping.closed


def test_pin_checks_its_arguments_before_touching_cuda(dataset: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from trainguard.cache import client as client_module, pinning

    cudart = _FakeCudart()
    monkeypatch.setattr(pinning, "load_cudart", lambda: cudart)
    with pytest.raises(ValueError, match="device 1 does not exist"):
        client_module.pin(memoryview(b"x" * 10), device=1)
    for bad in ({"device": -1}, {"device": "0"}):
        with pytest.raises(ValueError):
            client_module.pin(memoryview(b"x" * 10), **bad)
    with pytest.raises(ValueError):
        client_module.pin(memoryview(bytearray(b"abcd"))[::2])  # not contiguous
    with pytest.raises(ValueError):
        client_module.pin(memoryview(b""))
    with pytest.raises(TypeError):
        client_module.pin(12345)  # type: ignore[arg-type]
    assert cudart.registered == {}


# -- client fallback (no agent) ------------------------------------------------------------------------------
def test_fallback_does_not_follow_a_symlink_swapped_in_after_the_check(
    dataset: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    direct = CacheClient(socket_path="", dataset_root=str(dataset))
    target = dataset / SHARDS[1]
    real_check = CacheClient._direct_path

    def check_then_swap(self: CacheClient, name: str) -> str:
        path = real_check(self, name)
        target.unlink()
        os.symlink(dataset.parent / "secret.txt", target)  # after the check, before the open
        return path

    monkeypatch.setattr(CacheClient, "_direct_path", check_then_swap)
    with pytest.raises(CacheError) as err:
        direct.open(SHARDS[1]).close()
    assert err.value.code == "OutsideRoot"


def test_fallback_refuses_special_files_without_blocking(dataset: Path) -> None:
    import threading

    target = dataset / SHARDS[1]
    _fifo_over(target)
    direct = CacheClient(socket_path="", dataset_root=str(dataset))
    outcome: list[BaseException | None] = []

    def attempt() -> None:
        try:
            direct.open(SHARDS[1]).close()
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - recorded for the assertion
            outcome.append(exc)

    worker = threading.Thread(target=attempt, daemon=True)
    worker.start()
    worker.join(3)
    _wake_fifo_reader(target)
    worker.join(3)
    assert outcome and isinstance(outcome[0], CacheError) and outcome[0].code == "NotFound"
    with pytest.raises(CacheError):
        direct.open("train")  # a directory
    assert SHARDS[1] not in [s.name for s in direct.list_shards()]
    assert "train/escape.bin" not in [s.name for s in direct.list_shards()]


# -- protocol garbage ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "body, code",
    [
        (b"[" * 5000 + b"]" * 5000, "Malformed"),  # nesting deeper than the JSON decoder's recursion limit
        (b'{"op":"list","offset":' + b"9" * 5000 + b"}", "Malformed"),  # int over Python's 4300-digit limit
        (b'{"op":"open","shard":"train/\\ud800.bin"}', "InvalidName"),  # lone surrogate
        (b'{"op":"open_many","shards":["train/\\udfff"]}', "InvalidName"),
    ],
    ids=["deep", "huge-int", "surrogate", "surrogate-in-batch"],
)
def test_garbage_is_refused_with_its_code_not_internal(dataset: Path, start_agent: Any, body: bytes, code: str) -> None:
    import json
    import socket
    import struct

    agent = start_agent(dataset)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(5)
        sock.connect(agent.config.socket_path)
        sock.sendall(struct.pack(">I", len(body)) + body)
        data = b""
        while len(data) < 4 or len(data) < 4 + struct.unpack(">I", data[:4])[0]:
            data += sock.recv(65536)
        reply = json.loads(data[4:])
        error = reply["error"] if "error" in reply else reply["shards"][0]["error"]
        assert error["code"] == code
