"""Client library for training code: map dataset shards served by the node's cache agent. Standard library only.

    from trainguard.cache.client import open_shard
    with open_shard("train/00042.bin") as shard:
        data = shard.view            # read-only memoryview over the shared page-cache pages
        arr = shard.numpy()          # when numpy is installed (no copy)

    for shard in open_shards(names):   # a DataLoader's walk: up to 32 shards per round trip to the agent
        with shard: ...

The agent answers ``open`` with the shard's file descriptor; mapping it here shares the very pages the agent keeps
resident, so no byte is copied on the host. Configuration comes from the environment the JobSet wiring sets:
``TRAINGUARD_CACHE_SOCKET`` (agent socket) and ``TRAINGUARD_DATASET``; ``TRAINGUARD_DATASET_ROOT`` names a local
directory to read shards from directly when no agent socket exists (development, or a node without the agent).

``pin(view)`` (``pinning``, re-exported here) registers a mapped range with CUDA (``cudaHostRegister``) so
host-to-device copies DMA straight from the cached pages; without a GPU it raises ``PinningUnavailable`` saying why.
"""

from __future__ import annotations

import array
import collections
import itertools
import logging
import mmap
import os
import random
import socket
import stat as stat_module
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

from trainguard.cache import protocol
from trainguard.cache.pinning import PinnedRange, PinningUnavailable, load_cudart, pin, unpin  # noqa: F401 (the client's face)

ENV_SOCKET = "TRAINGUARD_CACHE_SOCKET"
ENV_DATASET = "TRAINGUARD_DATASET"
ENV_DATASET_ROOT = "TRAINGUARD_DATASET_ROOT"
DEFAULT_OPEN_BATCH = 32  # shards opened per round trip by open_shards
BUSY_BACKOFF_FIRST = 0.01  # seconds; doubled per Busy answer up to BUSY_BACKOFF_MAX, each delay drawn with full jitter
BUSY_BACKOFF_MAX = 1.0
_SCM_MAX_FD = 253  # the most descriptors Linux passes in one message
_DIRECT_DIR_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_DIRECTORY
_DIRECT_FILE_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY

log = logging.getLogger("trainguard.cache.client")


class CacheUnavailable(RuntimeError):
    """Neither an agent socket nor a local dataset root is configured or reachable."""


class CacheError(RuntimeError):
    """The agent refused a request; ``code`` is the protocol's error code (e.g. ``NotFound``)."""

    def __init__(self, code: str, message: str):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


@dataclass(frozen=True)
class ShardInfo:
    name: str
    size: int
    checksum: str | None = None
    mtime_ns: int | None = None
    resident_bytes: int | None = None


class Shard:
    """A read-only mapping of one shard. ``source`` is ``"agent"`` (fd from the agent) or ``"direct"``."""

    def __init__(self, info: ShardInfo, mapping: mmap.mmap | None, source: str):
        self.info = info
        self.source = source
        self._mapping = mapping
        self.view: memoryview = memoryview(mapping) if mapping is not None else memoryview(b"")

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def size(self) -> int:
        return self.info.size

    @property
    def checksum(self) -> str | None:
        return self.info.checksum

    def numpy(self, dtype: Any = "uint8") -> Any:
        """A read-only numpy array over the mapping (no copy); needs numpy."""
        import numpy  # optional dependency, imported only here

        return numpy.frombuffer(self.view, dtype=dtype)

    def torch(self, dtype: Any = None) -> Any:
        """A torch tensor over the mapping (no copy); needs torch. Torch warns that the buffer is not
        writable: writing to the tensor would fault, so treat it as read-only."""
        import torch  # optional dependency, imported only here

        # torch.frombuffer keeps a reference to the object it is given but releases the buffer export at once, so
        # over self.view the tensor would not keep the pages: close() releases self.view, the mapping has no export
        # left, unmaps, and the next read of the tensor is a segfault. A memoryview of its own shares self.view's
        # export of the mapping and lives as long as the tensor, so close() leaves the mapping to it (as numpy's
        # array does with the view it makes).
        return torch.frombuffer(memoryview(self.view), dtype=dtype or torch.uint8)

    def close(self) -> None:
        """Unmap, unless numpy/torch views still reference the pages (then the mapping lives until they go)."""
        self.view.release()
        if self._mapping is not None:
            try:
                self._mapping.close()
            except BufferError:
                pass

    def __enter__(self) -> "Shard":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class CacheClient:
    """A connection to the node's cache agent, reconnecting when the agent restarts; or direct reads.

    Thread-safe: one request at a time on the connection (requests are tiny; the data never crosses it).

    Retries (every request is idempotent): a lost connection (agent restarting, or closing an idle connection)
    is re-established within ``reconnect_timeout``; a ``Busy`` answer (the agent's connection or descriptor limits)
    is retried after a delay drawn uniformly from [0, d], d doubling from ``BUSY_BACKOFF_FIRST`` up to
    ``BUSY_BACKOFF_MAX`` (full jitter, so clients turned away together do not return together), until
    ``busy_timeout`` has passed since the request began, when the last ``Busy`` is raised. Every other refusal is
    raised at once.
    """

    def __init__(
        self,
        socket_path: str | None = None,
        *,
        dataset_root: str | None = None,
        timeout: float = 10.0,
        reconnect_timeout: float = 30.0,
        busy_timeout: float = 30.0,
    ):
        self.socket_path = socket_path if socket_path is not None else os.environ.get(ENV_SOCKET)
        self.dataset_root = dataset_root if dataset_root is not None else os.environ.get(ENV_DATASET_ROOT)
        self.timeout = timeout
        self.reconnect_timeout = reconnect_timeout
        self.busy_timeout = busy_timeout
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self.mode = self._choose_mode()

    def _choose_mode(self) -> str:
        if self.socket_path and os.path.exists(self.socket_path):
            return "agent"
        if self.dataset_root:
            log.warning(
                "trainguard cache: no agent socket at %r; reading shards directly from %r "
                "(no node-local cache, pages are not shared with other jobs)",
                self.socket_path,
                self.dataset_root,
            )
            return "direct"
        if self.socket_path:
            # Configured for an agent that has not created its socket yet (starting up): keep trying.
            return "agent"
        raise CacheUnavailable(
            f"no cache agent configured: set {ENV_SOCKET} to the agent socket, or {ENV_DATASET_ROOT} to a local "
            "dataset directory to read shards directly"
        )

    # -- public API --------------------------------------------------------------------------------------
    def open(self, name: str) -> Shard:
        if self.mode == "direct":
            return self._open_direct(name)
        for _ in range(3):
            reply, fds = self._request({"op": "open", "shard": name})
            if not fds:
                raise CacheError("Internal", "agent replied to open without a file descriptor")
            for extra in fds[1:]:
                os.close(extra)
            try:
                info = _info(reply.get("shard"))
            except CacheError:
                os.close(fds[0])
                raise
            shard = self._map(info, fds[0])
            if shard is not None:
                return shard
            # changed between the agent's check and ours: ask again for a fresh description
        raise CacheError("Changed", f"shard {name!r} kept changing while being opened")

    def open_shards(self, names: Iterable[str], *, batch: int = DEFAULT_OPEN_BATCH) -> Iterator[Shard]:
        """Map each of ``names`` in order, lazily: what a DataLoader walking a shard list wants.

        Opens up to ``batch`` shards per round trip to the agent (one ``open_many`` request, all descriptors in
        one reply) and maps each one only when it is yielded, checking then that the file still has the size and
        mtime the agent described (else it is opened again on its own). A shard the agent refuses raises
        ``CacheError`` at its turn, after the shards before it were yielded. Descriptors not yet yielded are
        closed when the iterator is closed or dropped.
        """
        if not 0 < batch <= protocol.MAX_OPEN_BATCH:
            raise ValueError(f"batch must be within 1..{protocol.MAX_OPEN_BATCH}")
        it = iter(names)
        while True:
            chunk = list(itertools.islice(it, batch))
            if not chunk:
                return
            if self.mode == "direct":
                for name in chunk:
                    yield self._open_direct(name)
                continue
            pending = collections.deque(self._open_batch(chunk))
            try:
                while pending:
                    name, outcome, fd = pending.popleft()
                    if isinstance(outcome, CacheError):
                        raise outcome
                    assert fd is not None
                    shard = self._map(outcome, fd)
                    yield shard if shard is not None else self.open(name)
            finally:
                for _, _, fd in pending:
                    if fd is not None:
                        os.close(fd)

    def open_many(self, names: Iterable[str], *, batch: int = DEFAULT_OPEN_BATCH) -> list[Shard]:
        """``open_shards`` as a list; on an error the shards already mapped are closed before it is raised."""
        shards: list[Shard] = []
        try:
            for shard in self.open_shards(names, batch=batch):
                shards.append(shard)
        except BaseException:
            for shard in shards:
                shard.close()
            raise
        return shards

    def _open_batch(self, names: list[str]) -> list[tuple[str, "ShardInfo | CacheError", int | None]]:
        """One ``open_many`` round trip: (name, info or the refusal, fd or None) per name, in order."""
        reply, fds = self._request({"op": "open_many", "shards": names})
        items = reply.get("shards")
        if not isinstance(items, list) or len(items) != len(names):
            _close_all(fds)
            raise CacheError("Internal", f"agent answered open_many for {len(names)} shards with a malformed list")
        if not all(isinstance(item, dict) for item in items):
            _close_all(fds)
            raise CacheError("Internal", "agent answered open_many with a malformed item")
        served = sum(1 for item in items if "error" not in item)
        if served != len(fds):
            _close_all(fds)
            raise CacheError("Internal", f"agent sent {len(fds)} descriptors for {served} opened shards")
        out: list[tuple[str, ShardInfo | CacheError, int | None]] = []
        remaining = iter(fds)
        for name, item in zip(names, items):
            if "error" in item:
                error = item["error"] or {}
                out.append((name, CacheError(str(error.get("code", "Internal")), str(error.get("message", ""))), None))
            else:
                try:
                    info = _info(item)
                except CacheError:
                    _close_all(fds)
                    raise
                out.append((name, info, next(remaining)))
        return out

    @staticmethod
    def _map(info: ShardInfo, fd: int) -> "Shard | None":
        """Map ``fd`` (always closed here; the mapping keeps the file open); None when the file no longer has the
        size and mtime the agent described, i.e. it changed after the agent checked it."""
        try:
            st = os.fstat(fd)
            if st.st_size != info.size or (info.mtime_ns is not None and st.st_mtime_ns != info.mtime_ns):
                return None
            mapping = mmap.mmap(fd, st.st_size, access=mmap.ACCESS_READ) if st.st_size else None
        finally:
            os.close(fd)
        return Shard(info, mapping, "agent")

    def stat(self, name: str) -> ShardInfo:
        if self.mode == "direct":
            fd, st = self._open_direct_fd(name)
            os.close(fd)
            return ShardInfo(name, st.st_size, None, st.st_mtime_ns, None)
        reply, _ = self._request({"op": "stat", "shard": name})
        return _info(reply["shard"])

    def list_shards(self) -> list[ShardInfo]:
        if self.mode == "direct":
            root = os.path.realpath(self.dataset_root or ".")
            found = []
            for directory, _, files in os.walk(root):
                for f in files:
                    real = os.path.realpath(os.path.join(directory, f))
                    if os.path.commonpath([root, real]) != root or not os.path.isfile(real):
                        continue  # what open would refuse: links leading outside, FIFOs, sockets, devices
                    rel = os.path.relpath(os.path.join(directory, f), root)
                    found.append(ShardInfo(rel, os.path.getsize(real)))
            return sorted(found, key=lambda s: s.name)
        shards: list[ShardInfo] = []
        offset: int | None = 0
        while offset is not None:
            reply, _ = self._request({"op": "list", "offset": offset, "limit": protocol.LIST_PAGE_LIMIT})
            shards += [ShardInfo(s["name"], s["size"]) for s in reply["shards"]]
            offset = reply.get("next")
        return shards

    def ping(self) -> dict:
        reply, _ = self._request({"op": "ping"})
        return reply

    def close(self) -> None:
        with self._lock:
            self._disconnect()

    # -- direct fallback ---------------------------------------------------------------------------------
    def _direct_path(self, name: str) -> str:
        try:
            protocol.validate_shard_name(name)
        except protocol.ProtocolError as exc:
            raise CacheError(exc.code.value, exc.message) from None
        root = os.path.realpath(self.dataset_root or ".")
        real = os.path.realpath(os.path.join(root, name))
        if os.path.commonpath([root, real]) != root:
            raise CacheError("OutsideRoot", f"shard {name!r} resolves outside {root}")
        return real

    def _open_direct_fd(self, name: str) -> tuple[int, os.stat_result]:
        """A read-only descriptor of the regular file ``name`` names below the dataset root, with the agent's
        rules: the resolved path is opened by walking down from the root with O_NOFOLLOW at every component (a
        symlink swapped in after the check fails instead of leading outside), O_NONBLOCK (a FIFO cannot block
        the training process), and only a regular file is accepted."""
        real = self._direct_path(name)
        root = os.path.realpath(self.dataset_root or ".")
        parts = [] if real == root else os.path.relpath(real, root).split("/")
        if not parts or any(part in ("", ".", "..") for part in parts):
            raise CacheError("NotFound", f"{name!r} is not a regular file")
        dir_fd = -1
        try:
            dir_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            for part in parts[:-1]:
                below = os.open(part, _DIRECT_DIR_FLAGS, dir_fd=dir_fd)
                os.close(dir_fd)
                dir_fd = below
            fd = os.open(parts[-1], _DIRECT_FILE_FLAGS, dir_fd=dir_fd)
        except FileNotFoundError:
            raise CacheError("NotFound", f"no shard named {name!r} under {self.dataset_root}") from None
        except OSError as exc:  # ELOOP / ENOTDIR: a symlink was swapped in after the check
            raise CacheError("OutsideRoot", f"shard {name!r} changed while opening: {exc}") from None
        finally:
            if dir_fd >= 0:
                os.close(dir_fd)
        try:
            st = os.fstat(fd)
            if not stat_module.S_ISREG(st.st_mode):
                raise CacheError("NotFound", f"{name!r} is not a regular file")
            os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        return fd, st

    def _open_direct(self, name: str) -> Shard:
        fd, st = self._open_direct_fd(name)
        try:
            mapping = mmap.mmap(fd, st.st_size, access=mmap.ACCESS_READ) if st.st_size else None
        finally:
            os.close(fd)
        return Shard(ShardInfo(name, st.st_size, None, st.st_mtime_ns, None), mapping, "direct")

    # -- agent connection --------------------------------------------------------------------------------
    def _request(self, message: dict) -> tuple[dict, list[int]]:
        """Send one request and read its reply, reconnecting (requests are idempotent) if the agent went away."""
        frame = protocol.encode(message)
        started = time.monotonic()
        deadline = started + self.reconnect_timeout
        busy_deadline = started + self.busy_timeout
        busy_answers = 0
        with self._lock:
            while True:
                try:
                    if self._sock is None:
                        self._connect()
                    assert self._sock is not None
                    try:
                        self._sock.sendall(frame)
                    except (BrokenPipeError, ConnectionResetError):
                        pass  # closed at once: the agent's reason (Busy, Forbidden) may be queued; else end of stream
                    reply, fds = self._read_reply()
                    if _is_busy(reply):
                        _close_all(fds)
                        self._disconnect()  # a connection turned away at accept is closed by the agent anyway
                        now = time.monotonic()
                        if now >= busy_deadline:
                            break  # raised below as the agent's Busy
                        delay = random.uniform(0, min(BUSY_BACKOFF_MAX, BUSY_BACKOFF_FIRST * 2**busy_answers))
                        busy_answers += 1
                        time.sleep(min(delay, busy_deadline - now))
                        deadline = time.monotonic() + self.reconnect_timeout  # the agent is up: reconnects are new
                        continue
                    break
                except (ConnectionError, FileNotFoundError, EOFError, socket.timeout, BrokenPipeError) as exc:
                    self._disconnect()
                    if time.monotonic() >= deadline:
                        raise CacheUnavailable(
                            f"cache agent at {self.socket_path} unreachable for {self.reconnect_timeout:.0f}s: {exc}"
                        ) from exc
                    time.sleep(0.05)
                except protocol.ProtocolError as exc:  # not a JSON object: the stream cannot be trusted any more
                    self._disconnect()
                    raise CacheError("Malformed", f"agent sent a malformed reply: {exc.message}") from None
                except BaseException:
                    self._disconnect()  # e.g. KeyboardInterrupt mid-reply: the next request must not read its tail
                    raise
        if not reply.get("ok"):
            for fd in fds:
                os.close(fd)
            error = reply.get("error") or {}
            raise CacheError(str(error.get("code", "Internal")), str(error.get("message", "no message")))
        return reply, fds

    def _connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.socket_path or "")
        except OSError:
            sock.close()
            raise ConnectionError(f"cannot connect to {self.socket_path}") from None
        self._sock = sock

    def _disconnect(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _read_reply(self) -> tuple[dict, list[int]]:
        """One reply frame and the descriptors that came with it; on any failure the descriptors received so far
        are closed (they are this process's from the moment recvmsg returns)."""
        fds: list[int] = []
        try:
            return self._read_reply_into(fds)
        except BaseException:
            _close_all(fds)
            raise

    def _read_reply_into(self, fds: list[int]) -> tuple[dict, list[int]]:
        assert self._sock is not None
        buf = bytearray()
        need = protocol.HEADER.size
        length: int | None = None
        cmsg_space = socket.CMSG_SPACE(4 * _SCM_MAX_FD)
        truncated = False
        while len(buf) < need:
            data, ancillary, flags, _ = self._sock.recvmsg(max(need - len(buf), 65536), cmsg_space)  # one reply in flight: never over-reads
            truncated = truncated or bool(flags & socket.MSG_CTRUNC)
            for level, kind, payload in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    received = array.array("i")
                    received.frombytes(payload[: len(payload) - len(payload) % received.itemsize])
                    fds += list(received)
            if not data:
                raise EOFError("agent closed the connection")
            buf += data
            if length is None and len(buf) >= protocol.HEADER.size:
                (length,) = protocol.HEADER.unpack_from(buf)
                if length > protocol.MAX_REPLY_BYTES:
                    raise ConnectionError(f"reply of {length} bytes exceeds {protocol.MAX_REPLY_BYTES}")
                need = protocol.HEADER.size + length
        if truncated:
            raise CacheError("Internal", "descriptors in the agent's reply were cut short (MSG_CTRUNC)")
        return protocol.decode_body(bytes(buf[protocol.HEADER.size :])), fds


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
    fds.clear()


def _is_busy(reply: dict) -> bool:
    return not reply.get("ok") and isinstance(reply.get("error"), dict) and reply["error"].get("code") == "Busy"


def _info(raw: Any) -> ShardInfo:
    try:
        return ShardInfo(
            name=raw["name"],
            size=int(raw["size"]),
            checksum=raw.get("checksum"),
            mtime_ns=raw.get("mtimeNs"),
            resident_bytes=raw.get("residentBytes"),
        )
    except (TypeError, KeyError, ValueError, AttributeError):
        raise CacheError("Malformed", f"agent described a shard without a name and size: {raw!r:.200}") from None


_default: tuple[int, CacheClient] | None = None
_default_lock = threading.Lock()


def default_client() -> CacheClient:
    """The process-wide client (recreated after fork: a socket must not be shared by parent and child)."""
    global _default
    with _default_lock:
        if _default is None or _default[0] != os.getpid():
            _default = (os.getpid(), CacheClient())
        return _default[1]


def open_shard(name: str, *, client: CacheClient | None = None) -> Shard:
    """Map shard ``name`` read-only: through the node's cache agent, or directly when none is configured."""
    return (client or default_client()).open(name)


def open_shards(
    names: Iterable[str], *, client: CacheClient | None = None, batch: int = DEFAULT_OPEN_BATCH
) -> Iterator[Shard]:
    """Map each of ``names`` in order, opening up to ``batch`` per round trip (``CacheClient.open_shards``)."""
    return (client or default_client()).open_shards(names, batch=batch)
