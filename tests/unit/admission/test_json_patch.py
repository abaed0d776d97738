"""``json_patch.make_patch``, the mutating review's answer: applied to the object the apiserver sent (with the
``jsonpatch`` library, as an independent applier) it gives exactly the policy's object, for table cases, for random
JSON trees and edits, and for the real TrainJob mutation of ``examples/``."""

from __future__ import annotations

import copy
import json
import random
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

from trainguard.webhook.admission.json_patch import make_patch
from trainguard.webhook.policy.pipeline import mutate_trainjob
from trainguard.webhook.policy.verdict import AdmissionInput, ClusterSnapshot

REPO = Path(__file__).resolve().parents[3]


def applied(old: Any, ops: list[dict[str, Any]]) -> Any:
    return jsonpatch.apply_patch(copy.deepcopy(old), ops)


def exact(value: Any) -> str:
    """JSON text: 1, 1.0 and true are different values for the apiserver."""
    return json.dumps(value, sort_keys=True)


CASES = [
    ("nothing", {"a": 1}, {"a": 1}, []),
    ("add key", {"a": 1}, {"a": 1, "b": {"c": 2}}, [{"op": "add", "path": "/b", "value": {"c": 2}}]),
    ("remove key", {"a": 1, "b": 2}, {"a": 1}, [{"op": "remove", "path": "/b"}]),
    ("replace scalar", {"a": {"b": 1}}, {"a": {"b": 2}}, [{"op": "replace", "path": "/a/b", "value": 2}]),
    ("int to bool", {"a": 1}, {"a": True}, [{"op": "replace", "path": "/a", "value": True}]),
    ("int to float", {"a": 1}, {"a": 1.0}, [{"op": "replace", "path": "/a", "value": 1.0}]),
    ("escaped key", {"l": {}}, {"l": {"trainguard.io/x~y": "1"}},
     [{"op": "add", "path": "/l/trainguard.io~1x~0y", "value": "1"}]),
    ("prepend", {"p": [{"m": "u"}]}, {"p": [{"m": "tg"}, {"m": "u"}]}, [{"op": "add", "path": "/p/0", "value": {"m": "tg"}}]),
    ("append", {"p": [1]}, {"p": [1, 2, 3]}, [{"op": "add", "path": "/p/1", "value": 2}, {"op": "add", "path": "/p/2", "value": 3}]),
    ("to empty list", {"p": []}, {"p": [1]}, [{"op": "add", "path": "/p/0", "value": 1}]),
    ("same length", {"p": [1, {"a": 1}]}, {"p": [1, {"a": 2}]}, [{"op": "replace", "path": "/p/1/a", "value": 2}]),
    ("other list change", {"p": [1, 2, 3]}, {"p": [3, 1]}, [{"op": "replace", "path": "/p", "value": [3, 1]}]),
    ("type change", {"a": {"b": 1}}, {"a": [1]}, [{"op": "replace", "path": "/a", "value": [1]}]),
]


@pytest.mark.parametrize("old, new, expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_cases(old: Any, new: Any, expected: list[dict[str, Any]]) -> None:
    ops = make_patch(old, new)
    assert ops == expected
    assert exact(applied(old, ops)) == exact(new)


def random_value(rng: random.Random, depth: int) -> Any:
    kind = rng.choice(["dict", "list", "scalar"] if depth < 4 else ["scalar"])
    if kind == "dict":
        return {rng.choice(["a", "b", "c/d", "e~f", "g"]): random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))}
    if kind == "list":
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return rng.choice([0, 1, 1.0, True, False, None, "", "x", "1"])


def edit(rng: random.Random, value: Any, depth: int = 0) -> Any:
    if type(value) is dict:
        out = {k: (edit(rng, v, depth + 1) if rng.random() < 0.5 else v) for k, v in value.items() if rng.random() > 0.15}
        if rng.random() < 0.3:
            out[rng.choice(["a", "n", "z/z", "t~"])] = random_value(rng, depth + 1)
        return out
    if type(value) is list:
        out = [edit(rng, v, depth + 1) if rng.random() < 0.3 else v for v in value]
        r = rng.random()
        if r < 0.2:
            out.insert(0, random_value(rng, depth + 1))
        elif r < 0.4:
            out.append(random_value(rng, depth + 1))
        elif r < 0.5 and out:
            out.pop(rng.randrange(len(out)))
        return out
    return random_value(rng, depth) if rng.random() < 0.5 else value


def test_random_trees_and_edits() -> None:
    rng = random.Random(14)
    for _ in range(3000):
        old = {"root": random_value(rng, 0)}
        new = edit(rng, old)
        assert exact(applied(old, make_patch(old, new))) == exact(new), (old, new)


def test_the_trainjob_mutation_of_the_examples() -> None:
    docs = [d for name in ("torch-distributed-gpu.yaml", "gpu-topology-policy.yaml")
            for d in yaml.safe_load_all((REPO / "examples" / name).read_text()) if d]
    by_kind = {d["kind"]: d for d in docs}
    job = by_kind["TrainJob"]
    snapshot = ClusterSnapshot(cluster_training_runtimes={"torch-distributed": by_kind["ClusterTrainingRuntime"]},
                               policies={"gpu-teams": by_kind["TrainJobPolicy"]},
                               namespace_labels={"team-a": {"trainguard.io/tier": "gpu"}})
    out = mutate_trainjob(AdmissionInput("CREATE", copy.deepcopy(job), None,
                                         datetime(2026, 9, 1, tzinfo=timezone.utc), namespace="team-a"), snapshot).obj
    ops = make_patch(job, out)
    assert exact(applied(job, ops)) == exact(out)
    assert len(ops) <= len(jsonpatch.make_patch(job, out).patch)  # no bigger than the library's
    assert {op["op"] for op in ops} <= {"add", "replace"}
