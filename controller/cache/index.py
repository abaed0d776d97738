"""The agent's index of shard files under its dataset root, and the only way a request reaches a file.

Safety rules, all enforced here:
* a name is a canonical relative path (``protocol.validate_shard_name``);
* the file it names must match the shard glob and, after resolving every symlink, lie inside the root;
* the served descriptor is opened on the resolved path by walking down from the root's descriptor with
  ``O_NOFOLLOW`` at every component (``open_file``) and checked with ``fstat`` to be a regular file, so a symlink
  swapped in after the check (for the file or any parent directory) cannot redirect the open;
* a file whose identity (device, inode, size, mtime, ctime) differs from the indexed one is re-indexed and its
  checksum recomputed before it is served: a changed or truncated shard is never described with stale figures.

``open_fast`` is the per-request path once a shard is indexed and checksummed: one ``open(O_NOFOLLOW)`` of the
path verified at index time plus one ``fstat``, no name parsing and no ``realpath`` walk. It serves only when the
descriptor's (device, inode, size, mtime, ctime) equal the verified file's and the verified name contained no
symlink; anything else (a symlinked name, a swapped directory or file, a write, truncation, rename, link, chmod:
each moves ctime or the inode) returns None and the caller takes ``open``, the full path above.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import threading
from dataclasses import dataclass, field

from trainguard.cache.protocol import ErrorCode, ProtocolError, encode, validate_shard_name
from trainguard.cache.shard_glob import ShardGlob

CHECKSUM_ALGORITHM = "sha256"
_HASH_SLICE = 16 << 20
# Every open of a shard: O_NONBLOCK because opening a FIFO for reading waits for a writer (a FIFO renamed over a
# shard would stall the event loop, with the index lock held) and some devices block or act on open; O_NOCTTY so
# a terminal never becomes the agent's. O_NONBLOCK is cleared once fstat shows a regular file, so the descriptor
# the client receives is an ordinary blocking one.
OPEN_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY
_DIR_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_DIRECTORY


class NotARegularFile(OSError):
    """What a shard name reaches is a directory, FIFO, socket or device: never opened for serving."""


@dataclass
class ShardEntry:
    """One shard as indexed: where it is, what it was when last checked, and its cache bookkeeping."""

    name: str
    path: str  # fully resolved path inside the root
    size: int
    mtime_ns: int
    ctime_ns: int
    dev: int
    ino: int
    checksum: str | None = None  # computed lazily (warm pass or first open), reset when the file changes
    last_access: int = 0  # logical clock of the last open; 0 = never opened
    resident: int = 0  # bytes in the page cache at the last measurement
    _reply: tuple[tuple, bytes] | None = field(default=None, repr=False, compare=False)

    @property
    def identity(self) -> tuple[int, int, int, int, int]:
        return (self.dev, self.ino, self.size, self.mtime_ns, self.ctime_ns)

    def refresh(self, st: os.stat_result) -> bool:
        """Adopt a new stat; True (and the checksum dropped) when the file is no longer the indexed one.
        Call with the index's ``lock`` held (worker threads and the event loop both update entries)."""
        new = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        if new == self.identity:
            return False
        self.checksum = None
        self.resident = 0
        self.dev, self.ino, self.size, self.mtime_ns, self.ctime_ns = new
        return True

    def adopt_checksum(self, checksum: str, st: os.stat_result) -> None:
        """Record ``checksum``, computed over the file version ``st`` describes (``checksum_fd``); with the lock
        held, so no reader sees the checksum paired with another version's figures."""
        self.refresh(st)
        self.checksum = checksum

    def describe(self) -> dict:
        return {
            "name": self.name,
            "size": self.size,
            "mtimeNs": self.mtime_ns,
            "checksum": self.checksum,
            "residentBytes": self.resident,
        }

    def open_reply(self) -> bytes:
        """The encoded ``open`` reply frame for this entry, kept until any described figure changes (the fast
        path answers most opens with it, without building or encoding JSON)."""
        key = (self.size, self.mtime_ns, self.checksum, self.resident)
        if self._reply is None or self._reply[0] != key:
            self._reply = (key, encode({"ok": True, "shard": self.describe()}))
        return self._reply[1]


@dataclass
class ScanResult:
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # matched the glob but escape the root or are not files


class ShardIndex:
    """Shards under ``root`` whose relative names match ``pattern``."""

    def __init__(self, root: str, pattern: str = "**/*"):
        self.root = os.path.realpath(root)
        if not os.path.isdir(self.root):
            raise FileNotFoundError(f"dataset root {root!r} is not a directory")
        self.pattern = pattern
        self._prefix = self.root.rstrip("/") + "/"
        # Held while an entry's figures change (scan and residency passes run in worker threads) and by the
        # agent's fast path while it checks a descriptor against them and describes the shard.
        self.lock = threading.Lock()
        self._match = ShardGlob(pattern)  # linear in each name: a glob cannot stall the scan (shard_glob)
        self.entries: dict[str, ShardEntry] = {}
        # Every served descriptor is opened by walking down from this directory one component at a time with
        # O_NOFOLLOW (``open_file``), so no symlink (in the name or in a parent swapped in after realpath) is
        # followed at open time. Held for the agent's life: a root replaced under a running agent is not
        # followed (restart the agent to serve a new root).
        self._root_fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)

    def close(self) -> None:
        with self.lock:
            fd, self._root_fd = self._root_fd, -1
        if fd >= 0:
            os.close(fd)

    # -- scanning ----------------------------------------------------------------------------------------
    def scan(self) -> ScanResult:
        """Walk the root (stat only, no reads) and reconcile the index with what is on disk."""
        result = ScanResult()
        seen: set[str] = set()
        for directory, dirnames, filenames in os.walk(self.root):
            dirnames.sort()
            rel_dir = os.path.relpath(directory, self.root)
            for filename in sorted(filenames + [d for d in dirnames if os.path.islink(os.path.join(directory, d))]):
                name = filename if rel_dir == "." else f"{rel_dir}/{filename}"
                if not self._match.match(name):
                    continue
                try:
                    real, st = self._resolve_on_disk(name)
                except ProtocolError:
                    result.refused.append(name)
                    continue
                seen.add(name)
                entry = self.entries.get(name)
                if entry is None:
                    self.entries[name] = _entry(name, real, st)
                    result.added.append(name)
                else:
                    with self.lock:
                        changed = entry.refresh(st)
                        if entry.path != real:  # a symlinked name now points elsewhere
                            entry.path = real
                            entry.checksum = None
                            changed = True
                    if changed:
                        result.changed.append(name)
        for name in sorted(set(self.entries) - seen):
            del self.entries[name]
            result.removed.append(name)
        return result

    # -- lookups -----------------------------------------------------------------------------------------
    def resolve(self, name: object) -> ShardEntry:
        """The entry for a requested name; picks up a shard added since the last scan."""
        valid = validate_shard_name(name)
        entry = self.entries.get(valid)
        if entry is not None:
            return entry
        real, st = self._resolve_on_disk(valid)  # raises NotFound / OutsideRoot
        if not self._match.match(valid):
            raise ProtocolError(ErrorCode.NOT_FOUND, f"{valid!r} does not match the shard glob {self.pattern!r}")
        entry = self.entries[valid] = _entry(valid, real, st)
        return entry

    def open_fast(self, name: object) -> tuple[int, ShardEntry] | None:
        """A read-only fd of an indexed, checksummed shard that is still exactly the file verified at index time;
        None when that cannot be shown cheaply (then call ``open``). The caller owns the fd, and holds ``lock``
        until it has described the entry, so the figures it sends are the ones checked here."""
        if type(name) is not str:
            return None
        entry = self.entries.get(name)  # keys are canonical names that passed validate_shard_name
        if entry is None or entry.checksum is None or entry.path != self._prefix + name:
            return None  # unknown, not yet hashed, or reached through a symlink: re-resolve every time
        try:
            fd = os.open(entry.path, OPEN_FLAGS)
        except OSError:
            return None
        st = os.fstat(fd)
        if (
            stat.S_ISREG(st.st_mode)
            and st.st_ino == entry.ino
            and st.st_dev == entry.dev
            and st.st_size == entry.size
            and st.st_mtime_ns == entry.mtime_ns
            and st.st_ctime_ns == entry.ctime_ns
        ):
            os.set_blocking(fd, True)
            return fd, entry
        os.close(fd)
        return None

    def open(self, name: object) -> tuple[int, ShardEntry, bool]:
        """Open a shard for serving: (read-only fd, entry, changed-since-indexed).

        The caller owns the fd. ``changed`` means the entry was refreshed from the file and its checksum must be
        recomputed before anything describes it.
        """
        entry = self.resolve(name)
        try:
            real, _ = self._resolve_on_disk(entry.name)
        except ProtocolError:
            self.entries.pop(entry.name, None)
            raise
        try:
            fd, st = self.open_file(real)
        except FileNotFoundError:
            self.entries.pop(entry.name, None)
            raise ProtocolError(ErrorCode.NOT_FOUND, f"shard {entry.name!r} disappeared") from None
        except NotARegularFile:
            raise ProtocolError(ErrorCode.NOT_FOUND, f"shard {entry.name!r} is not a regular file") from None
        except OSError as exc:  # ELOOP: a symlink was swapped in between resolve and open
            raise ProtocolError(ErrorCode.OUTSIDE_ROOT, f"shard {entry.name!r} changed while opening: {exc}") from None
        with self.lock:
            entry.path = real
            changed = entry.refresh(st)
        return fd, entry, changed

    def open_file(self, path: str) -> tuple[int, os.stat_result]:
        """A read-only, blocking descriptor of the regular file at ``path`` (a resolved path inside the root) and
        its fstat; the caller owns the fd. Never blocks on a FIFO or device swapped in (``OPEN_FLAGS``); raises
        ``NotARegularFile`` for those, ``OSError`` (ENOENT, ELOOP for a symlink, ...) otherwise.

        ``path`` is opened below the root's descriptor component by component, each with O_NOFOLLOW, so a
        directory or file replaced by a symlink after ``path`` was resolved fails (ELOOP/ENOTDIR) instead of
        leading outside the root. Every descriptor whose figures the index adopts comes from here, which is what
        lets ``open_fast`` trust an identity match."""
        if not path.startswith(self._prefix):
            raise OSError(errno.EXDEV, "not below the dataset root", path)
        parts = path[len(self._prefix) :].split("/")
        if any(part in ("", ".", "..") for part in parts):
            raise OSError(errno.EINVAL, "not a canonical path below the dataset root", path)
        with self.lock:  # dup under the lock: close() cannot recycle the number while we walk
            dir_fd = os.dup(self._root_fd) if self._root_fd >= 0 else -1
        if dir_fd < 0:
            raise OSError(errno.EBADF, "the index is closed", path)
        try:
            for part in parts[:-1]:
                below = os.open(part, _DIR_FLAGS, dir_fd=dir_fd)
                os.close(dir_fd)
                dir_fd = below
            fd = os.open(parts[-1], OPEN_FLAGS, dir_fd=dir_fd)
        finally:
            os.close(dir_fd)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise NotARegularFile(errno.EINVAL, "not a regular file", path)
            os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        return fd, st

    def _resolve_on_disk(self, name: str) -> tuple[str, os.stat_result]:
        candidate = os.path.join(self.root, name)
        if not os.path.lexists(candidate):
            raise ProtocolError(ErrorCode.NOT_FOUND, f"no shard named {name!r}")
        real = os.path.realpath(candidate)
        if os.path.commonpath([self.root, real]) != self.root:
            raise ProtocolError(ErrorCode.OUTSIDE_ROOT, f"shard {name!r} resolves outside the dataset root")
        try:
            st = os.stat(real)
        except FileNotFoundError:
            raise ProtocolError(ErrorCode.NOT_FOUND, f"shard {name!r} is a dangling link") from None
        if not stat.S_ISREG(st.st_mode):
            raise ProtocolError(ErrorCode.NOT_FOUND, f"{name!r} is not a regular file")
        return real, st


def checksum_fd(fd: int) -> tuple[str, os.stat_result]:
    """``sha256:<hex>`` of the file behind ``fd`` and the stat it belongs to.

    Re-hashes (a few times) when the file changes while being read, so the figure always matches one version.
    Reads to EOF rather than to the stat size, so a file that grows or shrinks meanwhile is caught by the stat
    comparison instead of hashing a mix of versions.
    """
    for _ in range(3):
        before = os.fstat(fd)
        digest = hashlib.sha256()
        # pread, not mmap: a file truncated under a mapping raises SIGBUS and would kill the agent.
        buf = bytearray(min(_HASH_SLICE, max(before.st_size, 1)))
        view = memoryview(buf)
        offset = 0
        while True:
            n = os.preadv(fd, [view], offset)
            if n == 0:
                break
            digest.update(view[:n])
            offset += n
        view.release()
        after = os.fstat(fd)
        if (after.st_size, after.st_mtime_ns, after.st_ctime_ns) == (
            before.st_size,
            before.st_mtime_ns,
            before.st_ctime_ns,
        ):
            return f"{CHECKSUM_ALGORITHM}:{digest.hexdigest()}", after
    raise OSError("file kept changing while its checksum was computed")


def _entry(name: str, real: str, st: os.stat_result) -> ShardEntry:
    return ShardEntry(
        name=name,
        path=real,
        size=st.st_size,
        mtime_ns=st.st_mtime_ns,
        ctime_ns=st.st_ctime_ns,
        dev=st.st_dev,
        ino=st.st_ino,
    )
