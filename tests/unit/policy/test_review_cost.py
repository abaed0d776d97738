"""Issue 22 part 5: what a denial costs is bounded, whatever the object (work counted, never timed).

* a denial renders each distinct error once, quotes at most ``MAX_VALUE_CHARS`` of a value, holds at most
  ``MAX_SHOWN_ERRORS`` errors and ``MAX_MESSAGE_CHARS`` characters and says how many it left out; ordinary messages
  are upstream's, byte for byte;
* the checks over lists are linear: ``dependsOn`` (one lookup per entry, the message lists at most 16 names) and the
  runtimePatch targets (each runtime job's container names collected once);
* runtimes are capped at the door where the CRDs set no limit (``TRAINGUARD_CAPS``), naming the field and the cap.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from policy_helpers import NOW
from tests.unit.policy.real_world import CLUSTER_RUNTIMES, TRAINJOBS, snapshot
from trainguard.webhook import field
from trainguard.webhook.api.views import jobset as jobset_views
from trainguard.webhook.field import MAX_MESSAGE_CHARS, MAX_SHOWN_ERRORS, MAX_VALUE_CHARS, aggregate, invalid
from trainguard.webhook.policy import pipeline, runtime_rules
from trainguard.webhook.policy.verdict import AdmissionInput
from trainguard.webhook.policy.well_formed import MAX_DEPTH, REASON, depth_error, shape_errors
from trainguard.webhook.runtime import validate_trainjob

JOB = next(j for j in TRAINJOBS if j["metadata"]["name"] == "llm-ddp")
RUNTIME = CLUSTER_RUNTIMES[JOB["spec"]["runtimeRef"]["name"]]
SNAPSHOT = snapshot()
# The bound on a whole denial: the message cap plus one cut marker and the closing count.
MESSAGE_BOUND = MAX_MESSAGE_CHARS + 200


def counting_renders(monkeypatch) -> list[int]:
    calls: list[int] = []
    render = field._render_value

    def counted(value: Any) -> str:
        calls.append(1)
        return render(value)

    monkeypatch.setattr(field, "_render_value", counted)
    return calls


# --- rendering ---------------------------------------------------------------------------------------------------


def test_ordinary_messages_are_upstreams_byte_for_byte() -> None:
    one = invalid("spec.x", {"b": [1, "two"], "a": None}, "must be y")
    assert aggregate([one]) == 'spec.x: Invalid value: {"b":[1,"two"],"a":null}: must be y'
    two = invalid("spec.y", "v", "bad")
    assert aggregate([one, two, one]) == f"[{one}, {two}]"
    value = "x" * (MAX_VALUE_CHARS - 2)  # quoted: exactly the cap
    assert aggregate([invalid("spec.z", value, "d")]) == f'spec.z: Invalid value: "{value}": d'
    assert aggregate([]) == ""


def test_a_long_value_is_cut_with_its_size() -> None:
    value = [{"name": f"job-{i}"} for i in range(5000)]
    text = aggregate([invalid("spec.runtimePatches", value, "must not have ...")])
    full = len(field._render_value(value))
    assert full > 10 * MAX_VALUE_CHARS
    assert f"...(truncated, {full} bytes): must not have ..." in text
    assert len(text) < MAX_VALUE_CHARS + 200


def test_ten_thousand_errors_quoting_one_value_render_it_once(monkeypatch) -> None:
    value = [{"name": f"job-{i}"} for i in range(5000)]
    errors = [invalid("spec.runtimePatches", value, f"must not have job-{i % 100}") for i in range(10_000)]
    calls = counting_renders(monkeypatch)
    text = aggregate(errors)
    assert len(calls) == 1
    assert len(text) <= MESSAGE_BOUND
    shown = text.count("spec.runtimePatches: Invalid value: ")
    assert 1 <= shown <= MAX_SHOWN_ERRORS
    # 100 distinct errors (the detail differs), 10,000 sent: the count is of the distinct ones left out.
    assert text.endswith(f", and {100 - shown} more errors]"), text[-200:]


def test_ten_thousand_distinct_errors_show_the_first_ones_and_count_the_rest(monkeypatch) -> None:
    errors = [invalid(f"spec.x[{i}]", i, "must be y") for i in range(10_000)]
    calls = counting_renders(monkeypatch)
    text = aggregate(errors)
    assert len(calls) == MAX_SHOWN_ERRORS
    assert text.startswith("[spec.x[0]: Invalid value: 0: must be y, spec.x[1]: ")
    assert text.endswith(f"spec.x[{MAX_SHOWN_ERRORS - 1}]: Invalid value: {MAX_SHOWN_ERRORS - 1}: must be y, "
                         f"and {10_000 - MAX_SHOWN_ERRORS} more errors]")


def test_the_message_cap_holds_for_long_details_too() -> None:
    errors = [invalid(f"spec.x[{i}]", i, "d" * 5000) for i in range(100)]
    text = aggregate(errors)
    assert len(text) <= MESSAGE_BOUND
    assert "...(truncated, " in text and text.endswith(" more errors]")
    assert aggregate(["s" * 100_000]).endswith("...(truncated, 100000 bytes)")


# --- the TrainJob with many missing patch targets ----------------------------------------------------------------


def missing_targets_job(jobs_per_patch: int = 100) -> dict[str, Any]:
    """16 runtimePatches (the CRD's maxItems) each naming ``jobs_per_patch`` replicated jobs the runtime lacks."""
    job = copy.deepcopy(JOB)
    job["spec"]["runtimePatches"] = [
        {"manager": f"acme.io/p{p}", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
            {"name": f"ghost-{p}-{j}", "template": {"spec": {"template": {"spec": {"nodeSelector": {"pool": "a100"}}}}}}
            for j in range(jobs_per_patch)]}}}}
        for p in range(16)]
    return job


def test_missing_patch_targets_are_one_bounded_error(monkeypatch) -> None:
    job = missing_targets_job()
    assert shape_errors("TrainJob", job) == []  # within every CRD limit: only the rule can refuse it
    calls = counting_renders(monkeypatch)
    verdict = pipeline.validate_trainjob(AdmissionInput("CREATE", job, None, NOW, namespace="team-a"), SNAPSHOT)
    assert not verdict.allowed
    assert verdict.message.startswith("spec.runtimePatches: Invalid value: [{")
    assert verdict.message.endswith(
        "bytes): must not have replicated job that doesn't exist in the runtime job template"), verdict.message[-300:]
    assert len(verdict.message) <= MAX_VALUE_CHARS + 200
    assert len(calls) <= 2  # was 1,600: every error rendered the whole list before the duplicates were dropped


def test_patch_targets_collect_each_runtime_jobs_containers_once(monkeypatch) -> None:
    job = copy.deepcopy(JOB)
    job["spec"]["runtimePatches"] = [
        {"manager": f"acme.io/p{p}", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
            {"name": "node", "template": {"spec": {"template": {"spec": {"containers": [{"name": "node"}]}}}}}]}}}}
        for p in range(16)]
    calls: list[int] = []
    names = jobset_views.ReplicatedJob.container_names

    def counted(self):
        calls.append(1)
        return names(self)

    monkeypatch.setattr(jobset_views.ReplicatedJob, "container_names", counted)
    errors, _ = validate_trainjob(job, None, RUNTIME, None)
    assert errors == []
    assert len(calls) == 1  # was 16: once per patch naming the job


# --- dependsOn over a runtime of 10,000 jobs (a stored one, past the door's cap: the rule alone) ------------------


class Name(str):
    """A job name that counts how often it is compared (a scan compares, a dict lookup hashes)."""

    compared = 0

    def __eq__(self, other: object) -> bool:
        Name.compared += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def runtime_of(n: int, *, forward: bool) -> dict[str, Any]:
    runtime = copy.deepcopy(RUNTIME)
    node = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]
    jobs = []
    for i in range(n):
        rj = copy.deepcopy(node) if i == 0 else {"name": Name(f"job-{i}"), "template": {"spec": {}}}
        if i:
            rj["dependsOn"] = [{"name": Name(f"job-{i + 1 if forward else i - 1}" if i > 1 or forward else "node"),
                                "status": "Ready"}]
        jobs.append(rj)
    runtime["spec"]["template"]["spec"]["replicatedJobs"] = jobs
    return runtime


def test_depends_on_is_checked_in_one_pass_with_bounded_messages() -> None:
    n = 10_000
    Name.compared = 0
    assert runtime_rules.runtime_errors(runtime_of(n, forward=False)) == []
    assert Name.compared <= 2 * n  # a scan of the jobs before each one: n * n / 2
    Name.compared = 0
    errors = runtime_rules.runtime_errors(runtime_of(n, forward=True))
    assert len(errors) == n - 1 and Name.compared <= 2 * n
    assert errors[0].detail == ("must name a replicatedJob defined before job-1; this one is defined after this job "
                                "(replicatedJobs: node, job-1, job-2, job-3, job-4, job-5, job-6, job-7, job-8, "
                                "job-9, job-10, job-11, job-12, job-13, job-14, job-15, ... (10000 in all))")
    assert errors[-1].detail.startswith(f"must name a replicatedJob defined before job-{n - 1}; this one does not exist")
    assert max(len(e.detail) for e in errors) < 300  # each listed all 10,000 names (88 KB)
    assert len(aggregate(errors)) <= MESSAGE_BOUND


def test_ordinary_depends_on_message_lists_every_job() -> None:
    errors = runtime_rules.runtime_errors(runtime_of(3, forward=True))
    assert [e.detail for e in errors][0] == (
        "must name a replicatedJob defined before job-1; this one is defined after this job "
        "(replicatedJobs: node, job-1, job-2)")


# --- the door: caps on runtimes where the CRD sets none -----------------------------------------------------------


RUNTIME_CAPS = [
    ("replicatedJobs", lambda rt, n: rt["spec"]["template"]["spec"]["replicatedJobs"].extend(
        {"name": f"job-{i}", "template": {"spec": {}}} for i in range(n - 1)), 100,
     "spec.template.spec.replicatedJobs: Too many: {n}: must have at most 100 items (trainguard's limit for runtimes)"),
    ("containers", lambda rt, n: rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"][
        "spec"]["containers"].extend({"name": f"c{i}", "image": "x"} for i in range(n - 1)), 64,
     "spec.template.spec.replicatedJobs[0].template.spec.template.spec.containers: Too many: {n}: must have at most "
     "64 items (trainguard's limit for runtimes)"),
    ("initContainers", lambda rt, n: rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"][
        "template"]["spec"].__setitem__("initContainers", [{"name": f"i{i}", "image": "x"} for i in range(n)]), 64,
     "spec.template.spec.replicatedJobs[0].template.spec.template.spec.initContainers: Too many: {n}: must have at "
     "most 64 items (trainguard's limit for runtimes)"),
    ("dependsOn (the CRD's own limit)", lambda rt, n: rt["spec"]["template"]["spec"]["replicatedJobs"].append(
        {"name": "after", "template": {"spec": {"template": {}}}, "dependsOn": [{"name": "node", "status": "Ready"}] * n}), 5,
     "spec.template.spec.replicatedJobs[1].dependsOn: Too many: {n}: must have at most 5 items"),
]


@pytest.mark.parametrize(("case", "grow", "cap", "message"), RUNTIME_CAPS, ids=[c[0] for c in RUNTIME_CAPS])
@pytest.mark.parametrize("entry", [pipeline.validate_training_runtime, pipeline.validate_cluster_training_runtime],
                         ids=lambda f: f.__name__)
def test_runtimes_are_capped_at_the_door_naming_the_field_and_the_cap(case, grow, cap, message, entry) -> None:
    kind = "TrainingRuntime" if entry is pipeline.validate_training_runtime else "ClusterTrainingRuntime"
    at_cap = copy.deepcopy(RUNTIME)
    at_cap["kind"] = kind
    grow(at_cap, cap)
    assert [e for e in shape_errors(kind, at_cap) if e.path.endswith(case.split()[0])] == []
    for n in (cap + 1, 5_000):
        over = copy.deepcopy(RUNTIME)
        over["kind"] = kind
        grow(over, n)
        for operation, old in (("CREATE", None), ("UPDATE", RUNTIME)):
            verdict = entry(AdmissionInput(operation, over, old, NOW, namespace="team-a"), SNAPSHOT)
            assert not verdict.allowed and verdict.reason == REASON, verdict
            assert verdict.message == message.format(n=n)


def nested_job(depth: int) -> dict[str, Any]:
    """The example job with an unknown field nested so that its innermost object sits ``depth`` levels deep."""
    job = copy.deepcopy(JOB)
    inner = job["spec"]["runtimePatches"] = [{"manager": "acme.io/deep", "futureField": {}}]
    inner = inner[0]["futureField"]
    for _ in range(depth - 4):  # spec, runtimePatches, [0], futureField
        inner["next"] = {}
        inner = inner["next"]
    return job


@pytest.mark.parametrize("entry", [pipeline.mutate_trainjob, pipeline.validate_trainjob], ids=lambda f: f.__name__)
def test_nesting_past_the_depth_cap_is_denied_at_the_door(entry) -> None:
    """900 levels of an unknown field (the apiserver decodes up to 10,000) made the copies recurse past Python's
    limit: a RecursionError, i.e. a policy error (admitted under --on-policy-error allow)."""
    assert depth_error(nested_job(MAX_DEPTH)) is None
    for depth in (MAX_DEPTH + 1, 900):
        verdict = entry(AdmissionInput("CREATE", nested_job(depth), None, NOW, namespace="team-a"), SNAPSHOT)
        assert not verdict.allowed and verdict.reason == REASON
        assert verdict.message == ('spec.runtimePatches[0].futureField: Invalid value: "object": must not nest deeper '
                                   f"than {MAX_DEPTH} levels (trainguard's limit)")
