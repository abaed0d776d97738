"""Fuzz the REAL pipeline (real policies, runtimes, DatasetCache) with hostile variants of real objects.

For every case, fixed seed:

* no exception escapes an entry point (the admission server would answer it with an AdmissionReview code 500, or
  admit it under ``--on-policy-error allow``);
* a malformed object (``well_formed.shape_errors``) is denied by every entry point, mutating included, with the
  path of a field, before any rule runs;
* the mutation is idempotent, as ``reinvocationPolicy: IfNeeded`` needs: admitting the admitted object again, a
  second later, changes nothing; for CREATE and for UPDATE, including UPDATEs that change a runtimePatch.
"""

from __future__ import annotations

import copy
import random
from datetime import timedelta

import pytest

from policy_helpers import NOW
from tests.unit.policy import real_world
from tests.unit.policy.real_world import OBJECTS, mutate_once
from trainguard.webhook.policy import pipeline
from trainguard.webhook.policy.verdict import AdmissionInput, Verdict
from trainguard.webhook.policy.well_formed import REASON, shape_errors

CASES = 4000
SNAPSHOT = real_world.snapshot()
LATER = NOW + timedelta(seconds=1)
CREATED = NOW - timedelta(hours=1)  # when the stored object of an UPDATE was admitted
VALIDATORS = {
    "TrainJob": pipeline.validate_trainjob,
    "TrainingRuntime": pipeline.validate_training_runtime,
    "ClusterTrainingRuntime": pipeline.validate_cluster_training_runtime,
    "TrainJobPolicy": pipeline.validate_trainjob_policy,
    "DatasetCache": pipeline.validate_dataset_cache,
}


def _call(fn, operation: str, obj: dict, old: dict | None, now=NOW) -> Verdict:
    before = copy.deepcopy(obj)
    try:
        verdict = fn(AdmissionInput(operation, obj, old, now, namespace=real_world.NAMESPACE), SNAPSHOT)
    except Exception as e:  # noqa: BLE001 - what the test is looking for
        pytest.fail(f"{fn.__name__} {operation} raised {type(e).__name__}: {e}\nobject: {str(obj)[:2000]}")
    assert obj == before, f"{fn.__name__} modified its input"
    if not verdict.allowed:
        assert verdict.message and verdict.reason, verdict
    return verdict


def _admitted(verdict: Verdict, obj: dict) -> dict:
    return verdict.obj if verdict.obj is not None else obj


def _check_idempotent(operation: str, obj: dict, old: dict | None) -> dict | None:
    """Mutate, then reinvoke one second later with the result; the second call must change nothing."""
    first = _call(pipeline.mutate_trainjob, operation, obj, old)
    if not first.allowed:
        return None
    once = _admitted(first, obj)
    again = _call(pipeline.mutate_trainjob, operation, once, old, LATER)
    assert again.allowed and _admitted(again, once) == once, (operation, once, again.obj)
    return once


def _cases():
    rng = random.Random(20261201)
    kinds = sorted(OBJECTS)
    for i in range(CASES):
        kind = kinds[i % len(kinds)] if i % 3 else "TrainJob"  # TrainJobs get half of the cases
        base = rng.choice(OBJECTS[kind])
        yield kind, base, mutate_once(base, rng), rng.choice(["CREATE", "UPDATE"])


def _stored(kind: str, base: dict, cache: dict[int, dict]) -> dict:
    """What storage holds for ``base``: a TrainJob as the webhook admitted it at CREATE (computed once per base)."""
    if id(base) not in cache:
        old = copy.deepcopy(base)
        if kind == "TrainJob":
            old = _admitted(_call(pipeline.mutate_trainjob, "CREATE", old, None, CREATED), old)
        cache[id(base)] = old
    return cache[id(base)]


def test_fuzz_real_pipeline_never_raises_denies_malformed_and_mutates_idempotently() -> None:
    malformed = denied = admitted = 0
    stored: dict[int, dict] = {}
    for kind, base, obj, operation in _cases():
        old = _stored(kind, base, stored) if operation == "UPDATE" else None
        bad = shape_errors(kind, obj)
        malformed += bool(bad)
        if kind == "TrainJob":
            once = _check_idempotent(operation, obj, old)
            verdict = _call(pipeline.validate_trainjob, operation, once if once is not None else obj, old)
            if bad:
                assert once is None, f"the mutating webhook admitted a malformed TrainJob: {bad}"
        else:
            verdict = _call(VALIDATORS[kind], operation, obj, old)
        if bad:
            assert not verdict.allowed and verdict.reason == REASON, (kind, bad, verdict)
            assert verdict.message.split(":")[0].strip("[") == bad[0].path
        denied += not verdict.allowed
        admitted += verdict.allowed
    # The fuzz reaches the rules, not only the door: many cases are well-formed, many admitted, many denied.
    assert CASES // 4 < malformed < CASES * 3 // 4, malformed
    assert admitted > CASES // 10 and denied > CASES // 4, (admitted, denied)


@pytest.mark.parametrize("job", real_world.TRAINJOBS, ids=lambda j: j["metadata"]["name"])
def test_update_changing_a_runtime_patch_is_stamped_once(job: dict) -> None:
    """The attack of issue 10 item 11: an UPDATE that changes a runtimePatch, reinvoked a second later."""
    old = _admitted(_call(pipeline.mutate_trainjob, "CREATE", copy.deepcopy(job), None, CREATED), job)
    new = copy.deepcopy(old)
    user = [p for p in new["spec"].get("runtimePatches") or [] if p["manager"] == "acme.io/platform"]
    if not user:
        new["spec"]["runtimePatches"] = (new["spec"].get("runtimePatches") or []) + [
            {"manager": "acme.io/platform", "trainingRuntimeSpec": {"template": {"spec": {}}}}]
        old = copy.deepcopy(new)
        old["spec"]["runtimePatches"][-1]["time"] = "2026-08-01T00:00:00Z"
        user = new["spec"]["runtimePatches"][-1:]
    user[0]["trainingRuntimeSpec"]["template"].setdefault("metadata", {})["labels"] = {"changed": "yes"}
    once = _check_idempotent("UPDATE", new, old)
    assert once is not None
    stamped = next(p for p in once["spec"]["runtimePatches"] if p["manager"] == "acme.io/platform")
    assert stamped["time"] == "2026-09-01T12:00:00Z"  # NOW: the change is stamped, and only once
