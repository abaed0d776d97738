"""Process-wide resources the admission server sizes itself by: file descriptors and returned memory.

* ``connection_cap``: at a soft RLIMIT_NOFILE of 1024 a flood of idle connections made ``accept`` fail with EMFILE
  and took every listener (health included) down with it. The soft limit is raised to the hard limit at start
  (``trainguard.process.raise_nofile_limit``), and ``connection_cap`` keeps the admission port's cap below what is
  left after a reserve for everything else (health port, watches, the apiserver client, logs).
* ``MemoryReturner``: glibc keeps freed heap memory mapped, and its mmap threshold grows with the largest block
  freed, so after a burst of 8 MiB bodies even large blocks stop being returned. A fixed mmap threshold returns
  every large block on free; ``malloc_trim`` after a burst hands back the freed small-block arenas. Both are no-ops
  where glibc is absent.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import resource

# File descriptors kept for everything but admission connections: the health listener's own cap, informer
# watches and the apiserver client pool, the log, the certificate files.
FD_RESERVE = 192
MIN_CONNECTIONS = 16
# glibc's default initial mmap threshold; fixing it stops the dynamic growth described above.
MMAP_THRESHOLD = 128 * 1024
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


def connection_cap(requested: int, soft_nofile: int, reserve: int = FD_RESERVE) -> int:
    """The admission port's connection cap: ``requested`` unless the descriptors left after ``reserve`` are fewer."""
    if soft_nofile == resource.RLIM_INFINITY:
        return requested
    return max(MIN_CONNECTIONS, min(requested, soft_nofile - reserve))


class MemoryReturner:
    def __init__(self) -> None:
        self._libc = None
        try:
            name = ctypes.util.find_library("c")
            libc = ctypes.CDLL(name) if name else None
            if libc is not None and hasattr(libc, "malloc_trim") and hasattr(libc, "mallopt"):
                self._libc = libc
        except OSError:
            self._libc = None

    @property
    def available(self) -> bool:
        return self._libc is not None

    def fix_mmap_threshold(self) -> None:
        if self._libc is not None:
            self._libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
            self._libc.mallopt(_M_TRIM_THRESHOLD, MMAP_THRESHOLD)

    def trim(self) -> None:
        if self._libc is not None:
            self._libc.malloc_trim(0)
