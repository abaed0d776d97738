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


def test_memory_returner_is_harmless() -> None:
    m = MemoryReturner()
    m.fix_mmap_threshold()
    m.trim()
    assert m.available in (True, False)
