"""The manager cluster's view of a TrainJob that Kueue's MultiKueue runs on a worker (``managedBy:
kueue.x-k8s.io/multikueue``).

Nothing is built for such a job here (no runtime snapshot, JobSet, Secret or event): the worker's controller builds
it from MultiKueue's copy, and MultiKueue copies the worker's ``.status`` back, and only that (the worker's
``trainguard.io/state`` label stays on the worker). ``dispatched_state`` gives the manager its own label from what it
can see, in the same vocabulary (``status.job_state``):

* Complete / Failed: the copied condition is True;
* Suspended: the manager's job is suspended (its Kueue has not admitted it, or evicted it), or the copied
  ``Suspended`` condition is True (the worker's Kueue has not admitted the copy yet);
* Running: every replicated job in the copied ``jobsStatus`` has a Job ready or succeeded, none suspended, and
  every Job with active pods is ready. The manager does not know how many Jobs each replicated job should have
  (it has no JobSet), so a replicated job whose Jobs are not all created yet can read Running a little early;
* Created otherwise (dispatched, nothing reported yet).

Pure: a function of the TrainJob as the manager's cache holds it.
"""

from __future__ import annotations

from typing import Any, Mapping

from trainguard.webhook.api.views import TrainJob

from trainguard.controller.reconcile import status as st


def dispatched_state(trainjob: Mapping[str, Any]) -> str:
    view = TrainJob(trainjob)
    conditions = view.conditions
    if st.condition_true(conditions, st.COMPLETE):
        return st.STATE_COMPLETE
    if st.condition_true(conditions, st.FAILED):
        return st.STATE_FAILED
    if st.is_suspended(trainjob) or st.condition_true(conditions, st.SUSPENDED):
        return st.STATE_SUSPENDED
    jobs = [j for j in view.jobs_status if isinstance(j, Mapping)]
    if jobs and all(_running(j) for j in jobs):
        return st.STATE_RUNNING
    return st.STATE_CREATED


def _running(job: Mapping[str, Any]) -> bool:
    def count(key: str) -> int:
        value = job.get(key)
        return value if isinstance(value, int) else 0

    return (count("ready") + count("succeeded") > 0 and count("suspended") == 0
            and count("active") <= count("ready"))
