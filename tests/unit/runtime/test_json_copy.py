"""``json_copy.deep_copy``, the build's copy of JSON-shaped objects: equal to the input, independent of it at every
depth (a merge that edits the copy never reaches the runtime in the cache), and no weaker than ``copy.deepcopy`` for
anything that is not JSON."""

from __future__ import annotations

import copy
from collections import OrderedDict
from typing import Any

import pytest

from trainguard.webhook.runtime.json_copy import deep_copy

RUNTIME_SPEC: dict[str, Any] = {
    "mlPolicy": {"numNodes": 2, "torch": {"numProcPerNode": "auto"}},
    "template": {"spec": {"replicatedJobs": [{"name": "node", "replicas": 1, "template": {"spec": {"template": {
        "spec": {"containers": [{"name": "node", "image": "i", "env": [{"name": "A", "value": "1"}],
                                 "resources": {"limits": {"nvidia.com/gpu": 8}, "requests": {"cpu": 1.5}}}],
                 "hostNetwork": False, "nodeSelector": None}}}}}]}},
}


def paths(value: Any, at: tuple = ()) -> list[tuple]:
    """Every dict/list container's path, to poke each one."""
    out = []
    if isinstance(value, dict):
        out.append(at)
        for k, v in value.items():
            out += paths(v, at + (k,))
    elif isinstance(value, list):
        out.append(at)
        for i, v in enumerate(value):
            out += paths(v, at + (i,))
    return out


def get(value: Any, at: tuple) -> Any:
    for step in at:
        value = value[step]
    return value


def test_equal_and_same_types() -> None:
    out = deep_copy(RUNTIME_SPEC)
    assert out == RUNTIME_SPEC and out is not RUNTIME_SPEC
    assert repr(out) == repr(RUNTIME_SPEC)  # True stays True, 8 stays int, 1.5 float, None None


@pytest.mark.parametrize("at", paths(RUNTIME_SPEC), ids=lambda p: ".".join(map(str, p)) or "root")
def test_every_container_is_a_new_one(at: tuple) -> None:
    original = copy.deepcopy(RUNTIME_SPEC)
    out = deep_copy(original)
    target = get(out, at)
    assert target is not get(original, at)
    if isinstance(target, dict):
        target["poked"] = 1
    else:
        target.append("poked")
    assert original == RUNTIME_SPEC


def test_anything_else_is_copied_as_deepcopy_would() -> None:
    class Model:
        def __init__(self) -> None:
            self.items = [{"a": 1}]

    odd = {"tuple": ({"x": [1]},), "ordered": OrderedDict(k=[1]), "model": Model()}
    out = deep_copy(odd)
    assert out["tuple"][0] is not odd["tuple"][0] and out["tuple"] == odd["tuple"]
    assert type(out["ordered"]) is OrderedDict and out["ordered"]["k"] is not odd["ordered"]["k"]
    assert out["model"] is not odd["model"] and out["model"].items is not odd["model"].items
