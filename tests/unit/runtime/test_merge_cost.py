"""Merges by key are linear (issue 10 item 4) and give exactly what the nested scans they replace gave.

Work is counted, never timed: merge keys are a ``str`` subclass that counts its ``==`` and ``hash`` calls, so a
quadratic merge shows as 100x the work for 10x the input on any machine.
"""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest

from trainguard.webhook.runtime import merge
from trainguard.webhook.runtime.merge import MergeError, strategic_merge, upsert

from .scan_merges import scan_keyed_list, scan_upsert


class CountedKey(str):
    """A merge-key value that counts how often it is compared or hashed."""

    calls = 0

    def __eq__(self, other: object) -> bool:
        CountedKey.calls += 1
        return str.__eq__(self, other)

    def __hash__(self) -> int:
        CountedKey.calls += 1
        return str.__hash__(self)


def env(n: int, prefix: str = "V") -> list[dict[str, Any]]:
    return [{"name": CountedKey(f"{prefix}{i}"), "value": "x"} for i in range(n)]


def work(fn) -> int:
    CountedKey.calls = 0
    fn()
    return CountedKey.calls


SIZES = (2_000, 20_000)


@pytest.mark.parametrize(
    "case",
    [
        ("upsert of new names", lambda n: upsert(env(16, "R"), env(n), "name")),
        ("upsert replacing names", lambda n: upsert(env(n), env(n), "name")),
        ("strategic merge of a keyed list", lambda n: strategic_merge({"env": env(n, "R")}, {"env": env(n)})),
        ("strategic merge with deletions", lambda n: strategic_merge(
            {"env": env(n)}, {"env": [{"name": f"V{i}", "$patch": "delete"} for i in range(0, n, 2)]})),
    ],
    ids=lambda c: c[0],
)
def test_keyed_merges_do_linear_work(case) -> None:
    _, run = case
    small, large = (work(lambda n=n: run(n)) for n in SIZES)
    assert small > 0
    assert large <= 12 * small, f"{SIZES[1]} items cost {large / small:.0f}x the work of {SIZES[0]} (quadratic: 100x)"


# --- the old implementations (scan_merges) are the specification the linear ones must match ------------------------


def random_list(rng: random.Random, keyed: bool) -> list[Any]:
    names = ["a", "b", "c", None, 1, 1.0, True, ["l"], {"d": 1}]
    out: list[Any] = []
    for _ in range(rng.randint(0, 6)):
        item: dict[str, Any] = {"value": rng.randint(0, 9), "sub": {"k": rng.randint(0, 2)}}
        if not keyed or rng.random() < 0.9:
            item["name"] = rng.choice(names)
        if keyed and rng.random() < 0.25:
            item["$patch"] = "delete"
        out.append(item if rng.random() < 0.95 or keyed else "not-a-map")
    return out


def test_linear_merges_equal_the_scans_on_duplicates_deletions_and_odd_keys(monkeypatch) -> None:
    rng = random.Random(10)
    for _ in range(3000):
        base, patch = random_list(rng, keyed=False), random_list(rng, keyed=True)
        new = [p for p in patch if isinstance(p, dict)]
        assert upsert(base and [b for b in base if isinstance(b, dict)], new, "name") == \
            scan_upsert(base and [b for b in base if isinstance(b, dict)], new, "name")
        try:
            want: Any = scan_keyed_list(copy.deepcopy(base), copy.deepcopy(patch), "name", "env")
        except MergeError as e:
            want = str(e)
        try:
            got: Any = merge._merge_keyed_list(copy.deepcopy(base), copy.deepcopy(patch), "name", "env")
        except MergeError as e:
            got = str(e)
        assert got == want, (base, patch)
