"""TrainJob status from (TrainJob, JobSet, now): conditions, jobsStatus, deadline math, the state label."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from trainguard.controller.reconcile import status as st

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def trainjob(*, suspend: bool | None = None, deadline: int | None = None, conditions: list[dict] | None = None,
             jobs_status: list[dict] | None = None, managed_by: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"runtimeRef": {"name": "torch"}}
    if suspend is not None:
        spec["suspend"] = suspend
    if deadline is not None:
        spec["activeDeadlineSeconds"] = deadline
    if managed_by is not None:
        spec["managedBy"] = managed_by
    status: dict[str, Any] = {}
    if conditions is not None:
        status["conditions"] = conditions
    if jobs_status is not None:
        status["jobsStatus"] = jobs_status
    return {"metadata": {"name": "j", "namespace": "n", "creationTimestamp": st.format_time(T0)},
            "spec": spec, "status": status}


def cond(type_: str, status: str, reason: str, message: str = "", time: datetime = T0) -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": st.format_time(time)}


def jobset(*, suspend: bool = False, conditions: list[dict] | None = None, rjobs: list[dict] | None = None,
           replicated: list[tuple[str, str]] = (("node", "trainer"),)) -> dict[str, Any]:
    return {
        "metadata": {"name": "j", "namespace": "n"},
        "spec": {"suspend": suspend, "replicatedJobs": [
            {"name": name, "replicas": 1, "template": {"metadata": {"labels": {st.ANCESTOR_LABEL: step}}}}
            for name, step in replicated]},
        "status": {"conditions": conditions or [], "replicatedJobsStatus": rjobs or []},
    }


def types(decision: st.StatusDecision) -> dict[str, tuple[str, str, str]]:
    return {c["type"]: (c["status"], c["reason"], c["message"]) for c in decision.status.get("conditions", [])}


# ---- conditions table ------------------------------------------------------------------------------------------
CASES = [
    ("never suspended, running JobSet: no conditions at all",
     trainjob(), jobset(), {}),
    ("suspend sets Suspended=True",
     trainjob(suspend=True), jobset(suspend=True),
     {"Suspended": ("True", "Suspended", "TrainJob is suspended")}),
    ("resume removes Suspended (upstream: False/Resumed; the SDK reads Running only without conditions)",
     trainjob(suspend=False, conditions=[cond("Suspended", "True", "Suspended", "TrainJob is suspended")]),
     jobset(), {}),
    ("a stored Suspended=False/Resumed (upstream's, an earlier trainguard's) is removed",
     trainjob(conditions=[cond("Suspended", "False", "Resumed", "TrainJob is resumed")]), jobset(), {}),
    ("resume keeps the other conditions",
     trainjob(conditions=[cond("Suspended", "True", "Suspended"), cond("Failed", "False", "FailedJobs")]),
     jobset(), {"Failed": ("False", "FailedJobs", "")}),
    ("JobSet Completed is copied as Complete with reason and message",
     trainjob(), jobset(conditions=[cond("Completed", "True", "AllJobsCompleted", "jobset completed successfully")]),
     {"Complete": ("True", "AllJobsCompleted", "jobset completed successfully")}),
    ("JobSet Failed is copied as Failed with reason and message",
     trainjob(), jobset(conditions=[cond("Failed", "True", "FailedJobs",
                                         "jobset failed due to one or more job failures")]),
     {"Failed": ("True", "FailedJobs", "jobset failed due to one or more job failures")}),
    ("JobSet Failed=False is not copied",
     trainjob(), jobset(conditions=[cond("Failed", "False", "FailedJobs")]), {}),
    ("failed job whose JobSet was deleted stays failed (#3779)",
     trainjob(conditions=[cond("Failed", "True", "FailedJobs", "x")]), None,
     {"Failed": ("True", "FailedJobs", "x")}),
    ("complete job keeps Complete when JobSet is gone",
     trainjob(conditions=[cond("Complete", "True", "AllJobsCompleted", "done")]), None,
     {"Complete": ("True", "AllJobsCompleted", "done")}),
    ("deadline-failed job stays failed even if the JobSet later reports Completed",
     trainjob(deadline=5, conditions=[cond("Failed", "True", "DeadlineExceeded",
                                            "TrainJob exceeded its active deadline")]),
     jobset(conditions=[cond("Completed", "True", "AllJobsCompleted")]),
     {"Failed": ("True", "DeadlineExceeded", "TrainJob exceeded its active deadline")}),
]


@pytest.mark.parametrize("name, job, js, expected", CASES, ids=[c[0] for c in CASES])
def test_conditions(name: str, job: dict, js: dict | None, expected: dict) -> None:
    assert types(st.next_status(job, js, at(1))) == expected


def test_copied_condition_keeps_jobset_transition_time() -> None:
    js = jobset(conditions=[cond("Completed", "True", "AllJobsCompleted", "ok", time=at(42))])
    decision = st.next_status(trainjob(), js, at(100))
    (complete,) = decision.status["conditions"]
    assert complete["lastTransitionTime"] == st.format_time(at(42))


def test_resume_time_is_now_and_unchanged_on_next_reconcile() -> None:
    job = trainjob(suspend=False, conditions=[cond("Suspended", "True", "Suspended", "TrainJob is suspended")])
    first = st.next_status(job, jobset(), at(10))
    assert first.status["lastResumeTime"] == st.format_time(at(10))
    assert "conditions" not in first.status
    again = st.next_status({**job, "status": first.status}, jobset(), at(20))
    assert again.status["lastResumeTime"] == st.format_time(at(10))
    assert not again.changed({**job, "status": first.status}), "no write when nothing changed"


def test_a_stored_resume_condition_becomes_the_resume_time() -> None:
    job = trainjob(conditions=[cond("Suspended", "False", "Resumed", "TrainJob is resumed", time=at(7))])
    decision = st.next_status(job, jobset(), at(30))
    assert decision.status["lastResumeTime"] == st.format_time(at(7))
    assert decision.transitions == (), "migrating is not a resume: no second Resumed event"


def test_suspending_again_keeps_the_resume_time_and_the_next_resume_moves_it() -> None:
    resumed = trainjob(suspend=True)
    resumed["status"] = {"lastResumeTime": st.format_time(at(10))}
    suspended = st.next_status(resumed, jobset(suspend=True), at(20))
    assert types(suspended)["Suspended"][0] == "True"
    again = st.next_status({**trainjob(), "status": suspended.status}, jobset(), at(40))
    assert again.status["lastResumeTime"] == st.format_time(at(40)) and "conditions" not in again.status


def test_jobs_status_copied_with_every_count() -> None:
    js = jobset(rjobs=[{"name": "node", "ready": 1, "active": 1}, {"name": "init", "succeeded": 1}])
    assert st.next_status(trainjob(), js, at(1)).status["jobsStatus"] == [
        {"name": "node", "ready": 1, "succeeded": 0, "failed": 0, "active": 1, "suspended": 0},
        {"name": "init", "ready": 0, "succeeded": 1, "failed": 0, "active": 0, "suspended": 0},
    ]


def test_changed_detects_only_real_changes() -> None:
    job = trainjob()
    assert not st.next_status(job, jobset(), at(1)).changed(job)
    assert st.next_status(job, jobset(rjobs=[{"name": "node", "active": 1}]), at(1)).changed(job)


# ---- transitions (events) ------------------------------------------------------------------------------------
TRANSITIONS = [
    ("suspend", trainjob(suspend=True), jobset(suspend=True), ["Suspended"]),
    ("already suspended: no repeat", trainjob(suspend=True, conditions=[cond("Suspended", "True", "Suspended")]),
     jobset(suspend=True), []),
    ("resume", trainjob(conditions=[cond("Suspended", "True", "Suspended")]), jobset(), ["Resumed"]),
    ("complete", trainjob(), jobset(conditions=[cond("Completed", "True", "AllJobsCompleted")]), ["Completed"]),
    ("already complete: no repeat", trainjob(conditions=[cond("Complete", "True", "AllJobsCompleted")]),
     jobset(conditions=[cond("Completed", "True", "AllJobsCompleted")]), []),
    ("fail", trainjob(), jobset(conditions=[cond("Failed", "True", "FailedJobs")]), ["Failed"]),
]


@pytest.mark.parametrize("name, job, js, reasons", TRANSITIONS, ids=[c[0] for c in TRANSITIONS])
def test_transitions(name: str, job: dict, js: dict | None, reasons: list[str]) -> None:
    assert [t.reason for t in st.next_status(job, js, at(1)).transitions] == reasons


# ---- deadline math (injected clock) ----------------------------------------------------------------------------
def test_deadline_counts_from_creation_when_never_resumed() -> None:
    decision = st.next_status(trainjob(deadline=60), jobset(), at(20))
    assert decision.requeue_after == pytest.approx(40)
    assert not decision.delete_jobset
    assert "Failed" not in types(decision)


def test_deadline_counts_from_last_resume() -> None:
    job = trainjob(deadline=60)
    job["status"]["lastResumeTime"] = st.format_time(at(1000))
    assert st.deadline(job) == at(1060)
    assert st.next_status(job, jobset(), at(1030)).requeue_after == pytest.approx(30)


def test_deadline_of_a_job_resumed_by_upstream_counts_from_that_resume() -> None:
    """A job resumed under upstream's controller (or an earlier trainguard) keeps its deadline across the move."""
    job = trainjob(deadline=60, conditions=[cond("Suspended", "False", "Resumed", "TrainJob is resumed",
                                                 time=at(1000))])
    assert st.next_status(job, jobset(), at(1030)).requeue_after == pytest.approx(30)


def test_deadline_restarts_at_the_resume_this_reconcile_records() -> None:
    job = trainjob(deadline=60, conditions=[cond("Suspended", "True", "Suspended", time=at(0))])
    decision = st.next_status(job, jobset(), at(500))  # resumed now: 60 s from 500
    assert decision.requeue_after == pytest.approx(60)


@pytest.mark.parametrize("now, exceeded", [(59.0, False), (60.0, True), (61.0, True)])
def test_deadline_boundary(now: float, exceeded: bool) -> None:
    decision = st.next_status(trainjob(deadline=60), jobset(), at(now))
    assert decision.delete_jobset is exceeded
    if exceeded:
        assert types(decision)["Failed"] == ("True", "DeadlineExceeded", "TrainJob exceeded its active deadline")
        assert decision.requeue_after is None
        assert decision.state == st.STATE_FAILED
    else:
        assert decision.requeue_after == pytest.approx(60 - now)


@pytest.mark.parametrize("job, js", [
    (trainjob(deadline=1, suspend=True), jobset(suspend=True)),
    (trainjob(deadline=1), jobset(conditions=[cond("Completed", "True", "AllJobsCompleted")])),
    (trainjob(), jobset()),
], ids=["suspended", "completed", "no deadline"])
def test_no_deadline_while_suspended_finished_or_unset(job: dict, js: dict) -> None:
    decision = st.next_status(job, js, at(10_000))
    assert decision.requeue_after is None
    assert not decision.delete_jobset


def test_deadline_failed_job_deletes_a_jobset_that_is_still_there() -> None:
    job = trainjob(deadline=5, conditions=[cond("Failed", "True", "DeadlineExceeded")])
    assert st.next_status(job, jobset(), at(100)).delete_jobset
    assert not st.next_status(job, None, at(100)).delete_jobset


# ---- state label --------------------------------------------------------------------------------------------
STATES = [
    ("no JobSet yet", trainjob(), None, "Created"),
    ("pods not ready", trainjob(), jobset(rjobs=[{"name": "node", "active": 1}]), "Created"),
    ("trainer ready", trainjob(), jobset(rjobs=[{"name": "node", "ready": 1, "active": 1}]), "Running"),
    ("only the initializer ready",
     trainjob(), jobset(rjobs=[{"name": "dataset-initializer", "ready": 1}],
                        replicated=[("dataset-initializer", "dataset-initializer"), ("node", "trainer")]),
     "Created"),
    ("resumed and ready",
     trainjob(conditions=[cond("Suspended", "True", "Suspended")]),
     jobset(rjobs=[{"name": "node", "ready": 1}]), "Running"),
    ("suspended", trainjob(suspend=True), jobset(suspend=True), "Suspended"),
    ("complete", trainjob(), jobset(conditions=[cond("Completed", "True", "AllJobsCompleted")]), "Complete"),
    ("failed", trainjob(), jobset(conditions=[cond("Failed", "True", "FailedJobs")]), "Failed"),
]


@pytest.mark.parametrize("name, job, js, expected", STATES, ids=[c[0] for c in STATES])
def test_state(name: str, job: dict, js: dict | None, expected: str) -> None:
    assert st.next_status(job, js, at(1)).state == expected


# ---- managedBy, runtime kind --------------------------------------------------------------------------------
@pytest.mark.parametrize("managed_by, ours", [
    (None, True), ("trainer.kubeflow.org/trainjob-controller", True), ("kueue.x-k8s.io/multikueue", False)])
def test_managed_by(managed_by: str | None, ours: bool) -> None:
    assert st.is_managed_by_us(trainjob(managed_by=managed_by)) is ours


def test_unsupported_runtime_sets_failed_once() -> None:
    decision = st.unsupported_runtime(trainjob(), "example.com/Other/x", at(1))
    assert types(decision)["Failed"] == ("True", "TrainingRuntimeNotSupported", "unsupported runtime: example.com/Other/x")
    again = st.unsupported_runtime({**trainjob(), "status": decision.status}, "example.com/Other/x", at(2))
    assert again.transitions == ()


# ---- the Nodes and GPUs columns --------------------------------------------------------------------------------
def sized_jobset(*jobs: tuple[str, str, int, int | None, list[dict], list[dict]]) -> dict[str, Any]:
    """(name, ancestor step, replicas, parallelism, containers, initContainers) per replicatedJob."""
    rjobs = []
    for name, step, replicas, parallelism, containers, init in jobs:
        spec: dict[str, Any] = {"template": {"spec": {"containers": containers, "initContainers": init}}}
        if parallelism is not None:
            spec["parallelism"] = parallelism
        rjobs.append({"name": name, "replicas": replicas,
                      "template": {"metadata": {"labels": {st.ANCESTOR_LABEL: step}}, "spec": spec}})
    return {"metadata": {"name": "j", "namespace": "n"}, "spec": {"replicatedJobs": rjobs}, "status": {}}


def gpu(n: int | str, key: str = "limits") -> dict[str, Any]:
    return {"name": "c", "resources": {key: {"nvidia.com/gpu": n}}}


@pytest.mark.parametrize("js, nodes, gpus", [
    (sized_jobset(("node", "trainer", 1, 4, [gpu(8)], [])), "4", "32"),
    (sized_jobset(("dataset-initializer", "dataset-initializer", 1, None, [{"name": "i"}], []),
                  ("node", "trainer", 1, 2, [gpu(4, "requests")], [])), "2", "8"),
    (sized_jobset(("launcher", "launcher", 1, 1, [{"name": "l"}], []),
                  ("node", "trainer", 1, 3, [gpu(1)], [])), "3", "3"),
    (sized_jobset(("node", "trainer", 2, 2, [gpu(1), gpu(2)], [gpu(8)])), "4", "32"),
    (sized_jobset(("node", "trainer", 1, None, [{"name": "cpu-only"}], [])), "1", "0"),
], ids=["torch 4x8", "initializer without GPUs", "MPI launcher", "init container larger than the sum", "CPU job"])
def test_job_size_is_read_off_the_jobset_as_built(js: dict, nodes: str, gpus: str) -> None:
    decision = st.next_status(trainjob(), js, at(1))
    assert decision.size == {st.NODES_LABEL: nodes, st.GPUS_LABEL: gpus}


def test_no_jobset_no_size_labels() -> None:
    """A finished job whose JobSet is gone keeps the labels it had: nothing is written for them."""
    assert st.next_status(trainjob(conditions=[cond("Complete", "True", "AllJobsCompleted")]), None, at(1)).size == {}


# ---- why the job waits (Kueue) -----------------------------------------------------------------------------
WAITING = "Kueue has not admitted its Workload w (Pending): insufficient quota for nvidia.com/gpu"


def test_kueues_reason_is_in_the_suspended_condition_and_one_event_per_reason() -> None:
    job = trainjob(suspend=True)
    first = st.next_status(job, jobset(suspend=True), at(1), pending=WAITING)
    assert types(first)["Suspended"] == ("True", "Suspended", f"TrainJob is suspended: {WAITING}")
    assert [(t.reason, t.message) for t in first.transitions] == [("Suspended", "TrainJob is suspended"),
                                                                  ("WaitingForKueue", WAITING)]
    again = st.next_status({**job, "status": first.status}, jobset(suspend=True), at(2), pending=WAITING)
    assert again.transitions == () and not again.changed({**job, "status": first.status})
    moved = st.next_status({**job, "status": first.status}, jobset(suspend=True), at(3), pending=WAITING + ", 8 more")
    assert [t.reason for t in moved.transitions] == ["WaitingForKueue"]
    admitted = st.next_status({**job, "status": moved.status}, jobset(suspend=True), at(4))
    assert types(admitted)["Suspended"] == ("True", "Suspended", "TrainJob is suspended") and not admitted.transitions


def test_the_merge_patch_deletes_what_the_new_status_drops() -> None:
    """A merge patch that leaves ``conditions`` out keeps them as stored: the resume must send null."""
    job = trainjob(conditions=[cond("Suspended", "True", "Suspended", "TrainJob is suspended")])
    decision = st.next_status(job, jobset(), at(10))
    assert decision.merge_patch(job) == {"conditions": None, "lastResumeTime": st.format_time(at(10))}
    same = trainjob(conditions=[cond("Complete", "True", "AllJobsCompleted")])
    assert "conditions" in st.next_status(same, None, at(1)).merge_patch(same)
