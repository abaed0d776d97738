"""The door check (``trainguard.webhook.policy.well_formed``): malformed or oversized objects are denied naming the field and
the limit, before any rule runs; every real object passes; the cost of a huge object is that of its length."""

from __future__ import annotations

import copy
import sys
from typing import Any

import pytest

from policy_helpers import NOW
from tests.unit.policy.real_world import OBJECTS, TRAINJOBS, snapshot
from trainguard.webhook.policy import pipeline, well_formed
from trainguard.webhook.policy.verdict import AdmissionInput
from trainguard.webhook.policy.well_formed import MAX_ERRORS, REASON, shape_errors

JOB = next(j for j in TRAINJOBS if j["metadata"]["name"] == "llm-ddp")
SNAPSHOT = snapshot()


def job_with(path: str, value: Any, base: dict = JOB) -> dict:
    """A copy of ``base`` with the dotted ``path`` set (``[i]`` indexes a list)."""
    obj = copy.deepcopy(base)
    parent: Any = obj
    keys = path.replace("[", ".[").split(".")
    for key in keys[:-1]:
        parent = parent[int(key[1:-1])] if key.startswith("[") else parent.setdefault(key, {})
    last = keys[-1]
    parent[int(last[1:-1]) if last.startswith("[") else last] = value
    return obj


ENV_60K = [{"name": f"V{i}", "value": "x"} for i in range(60_000)]

CASES = [
    ("runtimeRef as a string", job_with("spec.runtimeRef", "torch-distributed"),
     'spec.runtimeRef: Invalid value: "torch-distributed": must be of type object'),
    ("runtimeRef without name", job_with("spec.runtimeRef", {"kind": "TrainingRuntime"}),
     "spec.runtimeRef.name: Required value"),
    ("GPU quantity with a trailing blank", job_with("spec.trainer.resourcesPerNode.limits", {"nvidia.com/gpu": "8 "}),
     'spec.trainer.resourcesPerNode.limits[nvidia.com/gpu]: Invalid value: "8 ": quantities must match the regular '
     "expression"),
    ("quantity as a boolean", job_with("spec.trainer.resourcesPerNode.requests", {"cpu": True}),
     "spec.trainer.resourcesPerNode.requests[cpu]: Invalid value: true: must be of type integer or number or string"),
    ("60,000 env entries", job_with("spec.trainer.env", ENV_60K),
     "spec.trainer.env: Too many: 60000: must have at most 128 items"),
    ("env item not an object", job_with("spec.trainer.env", ["A=1"]),
     'spec.trainer.env[0]: Invalid value: "A=1": must be of type object'),
    ("env value a number", job_with("spec.trainer.env", [{"name": "A", "value": 1}]),
     "spec.trainer.env[0].value: Invalid value: 1: must be of type string"),
    ("numNodes a string", job_with("spec.trainer.numNodes", "4"),
     'spec.trainer.numNodes: Invalid value: "4": must be of type integer'),
    ("numNodes past int64", job_with("spec.trainer.numNodes", 2**63),
     "spec.trainer.numNodes: Invalid value: 9223372036854775808: must fit in a 64-bit integer"),
    ("numNodes a boolean", job_with("spec.trainer.numNodes", True),
     "spec.trainer.numNodes: Invalid value: true: must be of type integer"),
    ("image too long", job_with("spec.trainer.image", "a" * 501),
     "spec.trainer.image: Too long: may not be more than 500 characters"),
    ("a null trainer", job_with("spec.trainer", None), "spec.trainer: Invalid value: null: must be of type object"),
    ("labels a list", job_with("metadata.labels", ["a"]), 'metadata.labels: Invalid value: "array": must be of type object'),
    ("label value a number", job_with("metadata.labels", {"a": 1}), "metadata.labels[a]: Invalid value: 1: must be of type string"),
    ("runtimePatches an object", job_with("spec.runtimePatches", {"manager": "x"}),
     'spec.runtimePatches: Invalid value: "object": must be of type array'),
    ("17 runtimePatches", job_with("spec.runtimePatches", [{"manager": f"a.io/{i}"} for i in range(17)]),
     "spec.runtimePatches: Too many: 17: must have at most 16 items"),
    ("patch manager empty", job_with("spec.runtimePatches", [{"manager": ""}]),
     'spec.runtimePatches[0].manager: Invalid value: "": should be at least 1 chars long'),
    ("command item too long", job_with("spec.trainer.command", ["x" * 1_048_577]),
     "spec.trainer.command[0]: Too long: may not be more than 1048576 characters"),
    ("not an object at all", ["TrainJob"], '<root>: Invalid value: "array": must be of type object'),
]


@pytest.mark.parametrize(("case", "obj", "message"), CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("entry", [pipeline.mutate_trainjob, pipeline.validate_trainjob], ids=lambda f: f.__name__)
def test_malformed_trainjob_is_denied_naming_the_field(case, obj, message, entry) -> None:
    for operation, old in (("CREATE", None), ("UPDATE", JOB)):
        verdict = entry(AdmissionInput(operation, obj, old, NOW, namespace="team-a"), SNAPSHOT)
        assert not verdict.allowed and verdict.reason == REASON, (case, verdict)
        assert verdict.message.startswith(message), verdict.message


OTHER_KINDS = [
    ("TrainJobPolicy", ["spec", "mode"], "Sometimes",
     'spec.mode: Unsupported value: "Sometimes": supported values: "Enforce", "Audit"'),
    ("TrainJobPolicy", ["spec", "topology", "levels"], [{"nodeLabel": "x"}] * 9,
     "spec.topology.levels: Too many: 9: must have at most 8 items"),
    ("TrainJobPolicy", ["spec", "limits", "maxNodes"], 0, "spec.limits.maxNodes: Invalid value: 0: should be greater than or equal to 1"),
    ("DatasetCache", ["spec", "memoryBudget"], "lots", 'spec.memoryBudget: Invalid value: "lots": quantities must match'),
    ("DatasetCache", ["spec", "source"], None, "spec.source: Required value"),
    ("ClusterTrainingRuntime", ["spec", "mlPolicy", "numNodes"], "1", 'spec.mlPolicy.numNodes: Invalid value: "1": must be of type integer'),
    ("ClusterTrainingRuntime", ["spec", "template", "spec", "replicatedJobs"], "node",
     'spec.template.spec.replicatedJobs: Invalid value: "node": must be of type array'),
    ("TrainingRuntime", ["spec", "mlPolicy"], [], 'spec.mlPolicy: Invalid value: "array": must be of type object'),
    ("TrainingRuntime", ["spec", "podGroupPolicy", "coscheduling", "scheduleTimeoutSeconds"], 1.5,
     "spec.podGroupPolicy.coscheduling.scheduleTimeoutSeconds: Invalid value: 1.5: must be of type integer"),
]
VALIDATORS = {
    "TrainingRuntime": pipeline.validate_training_runtime,
    "ClusterTrainingRuntime": pipeline.validate_cluster_training_runtime,
    "TrainJobPolicy": pipeline.validate_trainjob_policy,
    "DatasetCache": pipeline.validate_dataset_cache,
}


@pytest.mark.parametrize(("kind", "path", "value", "message"), OTHER_KINDS, ids=lambda v: str(v)[:40])
def test_malformed_runtime_policy_and_cache_are_denied_naming_the_field(kind, path, value, message) -> None:
    obj = copy.deepcopy(OBJECTS[kind][0])
    parent = obj
    for key in path[:-1]:
        parent = parent.setdefault(key, {})
    parent[path[-1]] = value
    verdict = VALIDATORS[kind](AdmissionInput("CREATE", obj, None, NOW, namespace="team-a"), SNAPSHOT)
    assert not verdict.allowed and verdict.reason == REASON, verdict
    assert verdict.message.startswith(message), verdict.message


@pytest.mark.parametrize("kind", sorted(OBJECTS))
def test_every_real_object_passes(kind) -> None:
    for obj in OBJECTS[kind]:
        assert shape_errors(kind, obj) == []
        # As the apiserver sends a CREATE: metadata rebuilt from the typed ObjectMeta, unset times as null.
        sent = copy.deepcopy(obj)
        sent["metadata"]["creationTimestamp"] = None
        assert shape_errors(kind, sent) == []


def test_unknown_fields_and_delete_and_connect_pass_untouched() -> None:
    obj = job_with("spec.futureField", {"anything": [1, "x", None]})
    assert shape_errors("TrainJob", obj) == []
    bad = job_with("spec.runtimeRef", 7)
    for operation in ("DELETE", "CONNECT"):
        assert pipeline.validate_trainjob(AdmissionInput(operation, bad, None, NOW), SNAPSHOT).allowed


def test_a_broken_old_object_is_named_as_such() -> None:
    old = job_with("spec.trainer.numNodes", "many")
    verdict = pipeline.mutate_trainjob(AdmissionInput("UPDATE", JOB, old, NOW, namespace="team-a"), SNAPSHOT)
    assert not verdict.allowed
    assert verdict.message == 'oldObject.spec.trainer.numNodes: Invalid value: "many": must be of type integer'


def test_errors_are_capped_and_aggregated() -> None:
    obj = job_with("metadata.labels", {f"l{i}": i for i in range(1000)})
    errors = shape_errors("TrainJob", obj)
    assert len(errors) == MAX_ERRORS
    verdict = pipeline.validate_trainjob(AdmissionInput("CREATE", obj, None, NOW), SNAPSHOT)
    assert verdict.message.startswith("[metadata.labels[l0]: Invalid value: 0: must be of type string, ")


def _calls(fn, *args) -> int:
    """Python function calls made while running ``fn`` (work, not time: deterministic on any machine)."""
    count = 0

    def profile(frame, event, arg):
        nonlocal count
        if event == "call":
            count += 1

    sys.setprofile(profile)
    try:
        fn(*args)
    finally:
        sys.setprofile(None)
    return count


@pytest.mark.parametrize("entry", [pipeline.mutate_trainjob, pipeline.validate_trainjob], ids=lambda f: f.__name__)
def test_an_oversized_list_costs_no_more_than_a_small_one(entry) -> None:
    """60,000 env entries are refused from the list's length: the admission does less work than for 200."""
    def run(n: int):
        obj = job_with("spec.trainer.env", [{"name": f"V{i}", "value": "x"} for i in range(n)])
        return _calls(entry, AdmissionInput("CREATE", obj, None, NOW, namespace="team-a"), SNAPSHOT)

    assert run(60_000) <= run(200) < run(100)  # the 100-entry job is admitted and runs every rule
    assert well_formed.shape_errors("TrainJob", job_with("spec.trainer.env", ENV_60K))
