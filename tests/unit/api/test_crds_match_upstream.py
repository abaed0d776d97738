"""The checked-in trainer.kubeflow.org CRDs are upstream Kubeflow Trainer's, plus only the listed additions.

Upstream's CRDs are read from the Go module ``hack/tools/trainer/go.mod`` pins (``go mod download``; present after
``make test``'s tools step). A difference that is not an entry of ``hack/crdgen/upstream.py``'s ``ADDITIONS`` fails,
listed path by path (descriptions included: they are upstream's, copied verbatim).
"""

from __future__ import annotations

import copy
import functools
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "hack"))

from crdgen import upstream  # noqa: E402

pytestmark = pytest.mark.tools


@pytest.fixture(scope="module")
def upstream_docs() -> dict[str, dict[str, Any]]:
    return upstream.upstream_crds(upstream.module_dir())


@functools.cache
def _checked_in(name: str) -> dict[str, Any]:
    return yaml.load((REPO / "crds" / name).read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def checked_in(name: str) -> dict[str, Any]:
    return copy.deepcopy(_checked_in(name))


def differences(a: Any, b: Any, path: str = "") -> list[str]:
    """Where ``b`` departs from ``a``: one line per path (lists of named items compared by name)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | set(b), key=str):
            sub = f"{path}.{key}" if path else str(key)
            if key not in b:
                out.append(f"{sub}: only upstream has it")
            elif key not in a:
                out.append(f"{sub}: only trainguard has it: {str(b[key])[:120]}")
            else:
                out += differences(a[key], b[key], sub)
        return out
    if isinstance(a, list) and isinstance(b, list) and all(isinstance(i, dict) and "name" in i for i in a + b):
        return differences({i["name"]: i for i in a}, {i["name"]: i for i in b}, path) + (
            [f"{path}: order {[i['name'] for i in a]} -> {[i['name'] for i in b]}"]
            if [i["name"] for i in a if i["name"] in {j["name"] for j in b}]
            != [i["name"] for i in b if i["name"] in {j["name"] for j in a}] else [])
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: upstream {str(a)[:120]!r}, trainguard {str(b)[:120]!r}"]


def test_the_pinned_module_is_the_one_read(upstream_docs):
    version = upstream.pinned_version()
    assert upstream.module_dir().name == f"v2@{version}"
    for name in upstream.FILES:
        assert (REPO / "crds" / name).read_text().startswith(upstream.header(version))


@pytest.mark.parametrize("name", upstream.FILES)
def test_crd_is_upstreams_plus_listed_additions(upstream_docs, name):
    expected = copy.deepcopy(upstream_docs[name])
    for addition in upstream.ADDITIONS:
        if addition.file == name:
            addition.apply(expected)
    unlisted = differences(expected, checked_in(name))
    assert not unlisted, f"crds/{name} differs from upstream's beyond hack/crdgen/upstream.py ADDITIONS:\n" + \
        "\n".join(unlisted)


@pytest.mark.parametrize("addition", upstream.ADDITIONS, ids=[a.name for a in upstream.ADDITIONS])
def test_each_addition_changes_upstream_and_says_why(upstream_docs, addition):
    """An addition that upstream already has (or that adds nothing) would hide a real difference in the list."""
    assert len(addition.reason) > 40, "say why trainguard adds it"
    before = upstream_docs[addition.file]
    after = copy.deepcopy(before)
    addition.apply(after)
    assert differences(before, after), f"{addition.name} changes nothing"
    assert checked_in(addition.file) != before


def test_addition_names_are_unique():
    names = [a.name for a in upstream.ADDITIONS]
    assert len(names) == len(set(names))
