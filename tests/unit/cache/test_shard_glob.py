"""The agent's shard glob (issue 22 part 4): fnmatch's meaning on ordinary patterns, and linear time on patterns
that make a backtracking regex explode.

The attack: a CRD-valid ``shards: "*a*a*a*a*a*a*a*b"`` and a dataset directory of long ``aaaa...`` names. The agent
used to translate the glob into a Python regex, which backtracks over every way of placing the stars (about
n**6 steps per name here) while it scans, before it binds its socket: one core burned and the agent never serves.
"""

from __future__ import annotations

import fnmatch
import time
from pathlib import Path

import pytest

from trainguard.cache.index import ShardIndex
from trainguard.cache.shard_glob import ShardGlob

PATHOLOGICAL = "*a*a*a*a*a*a*a*b"  # 8 stars: within the CRD's and the webhook's bound

# Ordinary patterns and names without "/": the answer must be fnmatch.fnmatchcase's.
FNMATCH_PATTERNS = [
    "*", "*.arrow", "train-*.arrow", "shard-?.bin", "shard-??.bin", "s-[0-9].bin", "s-[!0-9].bin", "[abc]*",
    "[a-c][x-z]", "[]a]", "[!]a]", "[a-]", "[-a]", "[a-c-e]", "[z-a]", "[!z-a]", "[^a]", "[", "a[", "a[b", "[]",
    "[!]", "*[", "\\*", "[\\]", "a*b*c", "*a*", "**", "***", "?*?", "*?", "", "a", "train-0000[0-4]-of-*.tar",
]
FNMATCH_NAMES = [
    "", "a", "b", "^", "]", "-", "[", "!", "\\", "*", "ab", "abc", "axbyc", "acb", "bx", "az", "cx", "d", "e",
    "train-0001.arrow", "train-.arrow", "train-0001.tar", "shard-1.bin", "shard-12.bin", "s-7.bin", "s-x.bin",
    "train-00003-of-00010.tar", "train-00007-of-00010.tar", "a[", "a[b", "]a",
]


@pytest.mark.parametrize("pattern", FNMATCH_PATTERNS)
def test_ordinary_patterns_mean_what_fnmatch_says(pattern: str) -> None:
    glob = ShardGlob(pattern)
    differ = [name for name in FNMATCH_NAMES if glob.match(name) != fnmatch.fnmatchcase(name, pattern)]
    assert not differ, f"{pattern!r} differs from fnmatch on {differ}"


@pytest.mark.parametrize("pattern, name, matches", [
    ("*.bin", "x/a.bin", False),  # * stays within one directory
    ("?", "/", False),
    ("[!a]", "/", False),  # so does a class, negated or not
    ("x[/]y", "x/y", False),
    ("train/*.bin", "train/a.bin", True),
    ("*/*.bin", "train/a.bin", True),
    ("**/*.bin", "a.bin", True),  # **/ spans any number of directories, none included
    ("**/*.bin", "x/y/a.bin", True),
    ("**/*.bin", "x/y/a.tar", False),
    ("x/**/y", "x/y", True),
    ("x/**/y", "x/a/b/y", True),
    ("x/**/y", "xy", False),
    ("a**b", "a/x/b", True),  # ** elsewhere crosses directories
    ("**", "a/b/c", True),
    ("**/", "a/", True),
    ("**/", "a", False),
])
def test_paths(pattern: str, name: str, matches: bool) -> None:
    assert ShardGlob(pattern).match(name) is matches


def test_the_transition_table_stays_bounded() -> None:
    glob = ShardGlob("*a*b*c*d")
    for i in range(3000):
        glob.match(f"{chr(0x4e00 + i)}a{chr(0x5e00 + i)}b")  # a new character, hence new transitions, each time
    assert len(glob._steps) <= 4096
    assert glob.match("xaybzcwd") and not glob.match("xaybzcw")


def _scan_seconds(root: Path, pattern: str) -> float:
    index = ShardIndex(str(root), pattern)
    try:
        start = time.perf_counter()
        result = index.scan()
        elapsed = time.perf_counter() - start
    finally:
        index.close()
    assert result.added == []  # no name ends in "b" or ".bin": both globs reject every name
    return elapsed


def test_a_pathological_glob_over_adversarial_names_scans_as_fast_as_a_simple_one(tmp_path: Path) -> None:
    # 60 names of 36 "a": the old regex matcher took over 5 s here (about 0.1 s per name), growing as n**6.
    for i in range(60):
        (tmp_path / ("a" * 36 + f"{i:02d}")).write_bytes(b"")
    simple = min(_scan_seconds(tmp_path, "*.bin") for _ in range(3))
    pathological = min(_scan_seconds(tmp_path, PATHOLOGICAL) for _ in range(3))
    # Relative, with an absolute floor for a loaded machine: the linear matcher costs a few microseconds per name.
    assert pathological <= max(10 * simple, 0.25), (pathological, simple)
