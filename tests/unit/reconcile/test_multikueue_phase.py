"""The manager's view of a MultiKueue-dispatched TrainJob: nothing built, the Phase label from the copied status."""

from __future__ import annotations

import pytest

from trainguard.controller.reconcile import status as st
from trainguard.controller.reconcile.multikueue import dispatched_state

from test_trainjob import reconciler, runtime, trainjob

MULTIKUEUE = "kueue.x-k8s.io/multikueue"


def cond(type_: str, status: str = "True", reason: str = "r") -> dict:
    return {"type": type_, "status": status, "reason": reason, "message": "", "lastTransitionTime": "2026-01-01T12:00:00Z"}


def jobs(*counts: tuple[str, int, int, int, int]) -> list[dict]:
    """(name, ready, succeeded, active, suspended) per replicated job, as the worker's controller reports them."""
    return [{"name": n, "ready": r, "succeeded": s, "failed": 0, "active": a, "suspended": u} for n, r, s, a, u in counts]


@pytest.mark.parametrize(("case", "suspend", "status", "state"), [
    ("dispatched, nothing reported yet", False, {}, st.STATE_CREATED),
    ("the manager's Kueue has not admitted it", True, {}, st.STATE_SUSPENDED),
    ("the worker's Kueue has not admitted the copy", False, {"conditions": [cond(st.SUSPENDED)]}, st.STATE_SUSPENDED),
    ("resumed on the worker, pods starting", False,
     {"conditions": [cond(st.SUSPENDED, "False", "Resumed")], "jobsStatus": jobs(("node", 0, 0, 1, 0))}, st.STATE_CREATED),
    ("every job ready", False,
     {"conditions": [cond(st.SUSPENDED, "False", "Resumed")], "jobsStatus": jobs(("node", 2, 0, 2, 0))}, st.STATE_RUNNING),
    ("initializer done, trainer ready", False,
     {"jobsStatus": jobs(("dataset-initializer", 0, 1, 0, 0), ("node", 1, 0, 1, 0))}, st.STATE_RUNNING),
    ("initializer running, trainer not created", False,
     {"jobsStatus": jobs(("dataset-initializer", 1, 0, 1, 0), ("node", 0, 0, 0, 0))}, st.STATE_CREATED),
    ("one of two jobs active but not ready", False, {"jobsStatus": jobs(("node", 1, 0, 2, 0))}, st.STATE_CREATED),
    ("jobs suspended on the worker", False, {"jobsStatus": jobs(("node", 1, 0, 0, 1))}, st.STATE_CREATED),
    ("complete", False, {"conditions": [cond(st.COMPLETE)], "jobsStatus": jobs(("node", 0, 2, 0, 0))}, st.STATE_COMPLETE),
    ("failed", False, {"conditions": [cond(st.FAILED)]}, st.STATE_FAILED),
    ("finished beats a suspended manager job", True, {"conditions": [cond(st.COMPLETE)]}, st.STATE_COMPLETE),
])
def test_dispatched_state(case, suspend, status, state):
    assert dispatched_state(trainjob(managedBy=MULTIKUEUE, suspend=suspend, status=status)) == state, case


RUNNING = {"conditions": [cond(st.SUSPENDED, "False", "Resumed")], "jobsStatus": jobs(("node", 2, 0, 2, 0))}


@pytest.mark.parametrize(("case", "suspend", "status", "state"), [
    ("admitted on the manager, running on a worker", False, RUNNING, st.STATE_RUNNING),
    ("admitted on the manager, nothing reported", False, {}, st.STATE_CREATED),
    ("waiting for the manager's Kueue", True, {}, st.STATE_SUSPENDED),
    ("complete on the worker", False, {"conditions": [cond(st.COMPLETE)]}, st.STATE_COMPLETE),
])
async def test_manager_builds_nothing_and_labels_the_phase(case, suspend, status, state):
    """No runtime snapshot, JobSet, status write or event on the manager: one label patch, and none when current."""
    job = trainjob(managedBy=MULTIKUEUE, suspend=suspend, status=status)
    r, kube, events = reconciler(job, rt=runtime())
    await r.reconcile("ns", "job")
    assert kube.calls == [("patch", "TrainJob", "job", None, {"metadata": {"labels": {st.STATE_LABEL: state}}})], case
    assert events.events == []

    labelled = trainjob(managedBy=MULTIKUEUE, suspend=suspend, status=status, labels={st.STATE_LABEL: state})
    r, kube, events = reconciler(labelled, rt=runtime())
    await r.reconcile("ns", "job")
    assert kube.calls == [] and events.events == [], case


async def test_our_own_jobs_still_build():
    r, kube, _ = reconciler(trainjob(), rt=runtime())
    await r.reconcile("ns", "job")
    assert ("apply", "JobSet", "job") in kube.verbs()
