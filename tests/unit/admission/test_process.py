"""The admission port's connection cap fits the open-files limit; the limit is raised to the hard one."""

from __future__ import annotations

import resource
import subprocess
import sys

import pytest

from trainguard.webhook.admission.process import FD_RESERVE, MIN_CONNECTIONS, MemoryReturner, connection_cap


@pytest.mark.parametrize(
    ("requested", "soft", "cap"),
    [(1024, 1 << 20, 1024), (1024, 1024, 1024 - FD_RESERVE), (100, 1024, 100), (1024, 100, MIN_CONNECTIONS),
     (1024, resource.RLIM_INFINITY, 1024)],
)
def test_connection_cap(requested: int, soft: int, cap: int) -> None:
    assert connection_cap(requested, soft) == cap


def test_the_soft_limit_is_raised_to_the_hard_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    low = min(256, hard)
    code = ("import resource; resource.setrlimit(resource.RLIMIT_NOFILE, (%d, %d));"
            "from trainguard.process import raise_nofile_limit; l = raise_nofile_limit();"
            "print(l.soft_before, l.soft, l.hard, resource.getrlimit(resource.RLIMIT_NOFILE)[0])") % (low, hard)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert [int(x) for x in out] == [low, hard, hard, hard]


# In a child process: 200 MB of heap chunks freed behind one live chunk (so the top of the heap cannot shrink by
# itself), then RSS before and after trim(), in MB.
_TRIM_PROBE = """
import gc, platform
from trainguard.webhook.admission.process import MemoryReturner
def rss():
    return int(open('/proc/self/statm').read().split()[1]) * 4096 / 2**20
m = MemoryReturner()
print(m.available, platform.libc_ver()[0])
m.fix_mmap_threshold()
chunks = [bytearray(4000) for _ in range(50_000)]
keep = bytearray(4000)
del chunks
gc.collect()
before = rss()
m.trim()
print(before, rss())
"""


def test_memory_returner_gives_freed_heap_back() -> None:
    """On glibc (every image trainguard ships) trim() returns freed heap pages to the kernel."""
    out = subprocess.run([sys.executable, "-c", _TRIM_PROBE], capture_output=True, text=True, check=True,
                         timeout=60).stdout.split()
    available, libc, before, after = out[0] == "True", out[1], float(out[2]), float(out[3])
    assert libc == "glibc" and available, (libc, available)
    assert before - after > 100, f"RSS {before:.0f} MB before trim, {after:.0f} MB after"
