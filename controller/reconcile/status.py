"""TrainJob status from the TrainJob and its JobSet: a pure function of (trainjob, jobset, now).

Matches the status half of Kubeflow Trainer v2.3's ``TrainJobReconciler.Reconcile``
(``pkg/controller/trainjob_controller.go``) with one deliberate fix:

* ``Suspended`` is True/Suspended/"TrainJob is suspended" while ``spec.suspend`` is true. Beyond upstream, a job
  the controller blocks (``enforcement``) is True/PolicyDenied with the denial as message, whatever
  ``spec.suspend`` says: nothing of it runs, its active deadline does not count, and it is never resumed while
  blocked.
* Deliberate difference: on resume the ``Suspended`` condition is removed, where upstream keeps
  False/Resumed. The ``kubeflow`` SDK 0.5 (``TrainerClient.get_job()``, ``wait_for_job_status``) reads Running
  from the pods only when ``status.conditions`` is empty, so upstream's leftover condition turns every job that
  Kueue (or anyone) once suspended into "Created" for as long as it runs. Kueue's TrainJob integration reads
  ``spec.suspend``, ``jobsStatus`` and Complete/Failed, never this condition. The resume time, which upstream
  keeps as that condition's lastTransitionTime, moves to ``status.lastResumeTime`` (a CRD addition); a stored
  ``Suspended=False`` (upstream's, or an earlier trainguard's) is migrated the same way on the next reconcile.
  The ``Resumed`` event stays.
* Beyond upstream, under Kueue: while a suspended job's Workload waits, the Suspended condition's message carries
  Kueue's reason after upstream's text ("TrainJob is suspended: Kueue has not admitted its Workload ... (Pending):
  couldn't assign flavors ...") and each new reason is one Normal ``WaitingForKueue`` event, which the SDK's
  ``get_job_events()`` lists. Kueue remains the only writer of the Workload; this only reads it.
* ``Complete`` / ``Failed`` are copied from the JobSet's ``Completed`` / ``Failed`` conditions (status, reason,
  message, lastTransitionTime); ``jobsStatus`` is the JobSet's ``replicatedJobsStatus``.
* ``activeDeadlineSeconds`` counts from the last resume (``status.lastResumeTime``), else from creation; past
  it the job gets ``Failed/DeadlineExceeded`` and its JobSet is deleted; before it the caller requeues at the
  deadline. Suspended or finished jobs have no running deadline.
* Fix of upstream #3779: upstream drops every non-deadline ``Failed`` condition at the start of each reconcile
  and recomputes it from the JobSet, so once a failed JobSet is deleted (TTL) the job looks unfinished and its
  JobSet is rebuilt, resetting maxRestarts. Here ``Complete=True`` and ``Failed=True`` are terminal: a finished
  job keeps its conditions and nothing is rebuilt for it. For jobs whose JobSet still exists the result is the
  same as upstream's (the Failed condition is copied back unchanged).

Beyond upstream (no Running state; users ask for one, #2713), ``job_state`` condenses the status into the
vocabulary of the ``kubeflow`` SDK: Created, Running, Suspended, Complete, Failed. It is published as the label
``trainguard.io/state`` on the TrainJob, NOT as a condition: SDK 0.5 ``TrainerClient.get_job()``
(``kubeflow/trainer/backends/kubernetes/backend.py``) infers "Running" from pods only when
``status.conditions`` is empty and otherwise reports only a True Complete/Failed condition, defaulting to
"Created" - so any extra condition (e.g. ``Running``) would turn every running job into "Created" in the SDK.
A label keeps the conditions list free of trainguard's own types; it is ``kubectl get trainjobs``' State column and
selectable with ``-l trainguard.io/state=Running``. ``job_size`` gives the labels of the Nodes and GPUs columns
(``trainguard.io/nodes``, ``trainguard.io/gpus``), read off the JobSet as built. They are for reading only: a user
can rewrite them and the reconciler sets them back; nothing decides on them.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Iterable, Mapping

from trainguard.webhook.api import constants as api_constants
from trainguard.webhook.api.apimachinery import format_time, parse_time
from trainguard.webhook.api.constants import LABEL_GPUS, LABEL_NODES, LABEL_STATE, LABEL_TRAINJOB_ANCESTOR
from trainguard.webhook.api.views import Condition, JobSet, TrainJob, find_condition
from trainguard.webhook.runtime.resources import gpus_of, pod_requests

Object = dict[str, Any]

# spec.managedBy values: ours (the default) and MultiKueue's, which this controller must leave alone.
TRAINJOB_CONTROLLER = api_constants.TRAINJOB_CONTROLLER

# Condition types and reasons (upstream pkg/constants).
SUSPENDED = "Suspended"
COMPLETE = "Complete"
FAILED = "Failed"
REASON_SUSPENDED = "Suspended"
REASON_RESUMED = "Resumed"  # the event's reason; no condition carries it (see the module docstring)
REASON_DEADLINE_EXCEEDED = "DeadlineExceeded"
REASON_RUNTIME_NOT_SUPPORTED = "TrainingRuntimeNotSupported"
REASON_POLICY_DENIED = "PolicyDenied"  # trainguard's: the Suspended condition of a Blocked job
MESSAGE_SUSPENDED = "TrainJob is suspended"
REASON_WAITING_FOR_KUEUE = "WaitingForKueue"  # trainguard's event: Kueue's reason for holding the job
MESSAGE_RESUMED = "TrainJob is resumed"
MESSAGE_DEADLINE_EXCEEDED = "TrainJob exceeded its active deadline"
LAST_RESUME_TIME = "lastResumeTime"  # status field (trainguard's CRD addition)

# JobSet condition types copied into the TrainJob.
JOBSET_COMPLETED = "Completed"
JOBSET_FAILED = "Failed"

# The user-visible state label (beyond upstream) and its values, in the SDK's words.
STATE_LABEL = LABEL_STATE
NODES_LABEL = LABEL_NODES
GPUS_LABEL = LABEL_GPUS
STATE_CREATED = "Created"
STATE_RUNNING = "Running"
STATE_SUSPENDED = "Suspended"
STATE_COMPLETE = "Complete"
STATE_FAILED = "Failed"
STATE_BLOCKED = "Blocked"  # an Enforce policy denies the job: nothing is built (enforcement.py)

ANCESTOR_LABEL = LABEL_TRAINJOB_ANCESTOR
# metav1.Condition's message may hold 32768 bytes; a denial lists every finding, so it is cut well before.
MAX_CONDITION_MESSAGE = 4096
_JOB_COUNTS = ("ready", "succeeded", "failed", "active", "suspended")


@dataclass(frozen=True)
class Transition:
    """A change worth a Kubernetes Event: ``type`` is Normal or Warning."""

    type: str
    reason: str
    message: str


@dataclass(frozen=True)
class StatusDecision:
    """What the reconciler should do about status after the objects are applied."""

    status: Object
    # The active deadline passed just now: the JobSet must be deleted.
    delete_jobset: bool = False
    # Seconds until the active deadline, when one is running; the caller requeues then.
    requeue_after: float | None = None
    transitions: tuple[Transition, ...] = field(default_factory=tuple)
    state: str = STATE_CREATED
    # The Nodes and GPUs labels (``job_size``); empty when there is no JobSet to read them from.
    size: Mapping[str, str] = field(default_factory=dict)

    def changed(self, trainjob: Mapping[str, Any]) -> bool:
        return _comparable(self.status) != _comparable(TrainJob(trainjob).status)

    def merge_patch(self, trainjob: Mapping[str, Any]) -> Object:
        """The status as a JSON merge patch over the stored one: a key the new status drops (the conditions after
        a resume) is sent as null, since a merge patch that leaves a key out leaves it as stored."""
        dropped = {k: None for k in _comparable(TrainJob(trainjob).status) if k not in _comparable(self.status)}
        return {**dropped, **self.status}


# ---- predicates -------------------------------------------------------------------------------------------------
def is_managed_by_us(trainjob: Mapping[str, Any]) -> bool:
    managed_by = TrainJob(trainjob).managed_by
    return managed_by in (None, "", TRAINJOB_CONTROLLER)


def condition_true(conditions: Iterable[Mapping[str, Any]], type_: str) -> bool:
    found = find_condition(conditions, type_)
    return found is not None and found.is_true


def is_finished(trainjob: Mapping[str, Any]) -> bool:
    """Complete=True or Failed=True (any reason): terminal, nothing is built for it again (#3779 fix)."""
    conditions = TrainJob(trainjob).conditions
    return condition_true(conditions, COMPLETE) or condition_true(conditions, FAILED)


def is_suspended(trainjob: Mapping[str, Any]) -> bool:
    return TrainJob(trainjob).suspend


# ---- deadline -----------------------------------------------------------------------------------------------------
def deadline_start(trainjob: Mapping[str, Any]) -> datetime:
    """When the active deadline started counting: the last resume, else the creation time."""
    resumed = TrainJob(trainjob).last_resume_time
    return parse_time(resumed if resumed else _created(trainjob))


def _created(trainjob: Mapping[str, Any]) -> str:
    created = TrainJob(trainjob).metadata.creation_timestamp
    if created is None:  # the apiserver always sets it: an object without one did not come from it
        raise KeyError("creationTimestamp")
    return created


def deadline(trainjob: Mapping[str, Any]) -> datetime | None:
    seconds = TrainJob(trainjob).active_deadline_seconds
    if seconds is None:
        return None
    return deadline_start(trainjob) + timedelta(seconds=int(seconds))


# ---- conditions -----------------------------------------------------------------------------------------------
def set_condition(conditions: list[Object], new: Object, now: datetime) -> None:
    """meta.SetStatusCondition: replace by type; keep lastTransitionTime unless the status flips."""
    wanted = Condition(new)
    found = find_condition(conditions, wanted.type)
    if found is None:
        conditions.append({**new, "lastTransitionTime": wanted.last_transition_time or format_time(now)})
        return
    current: Object = found.raw  # type: ignore[assignment]  # the list's own dict, updated in place
    if found.status != wanted.status:
        current["status"] = wanted.status
        current["lastTransitionTime"] = wanted.last_transition_time or format_time(now)
    current["reason"] = wanted.reason
    current["message"] = wanted.message


def _without(conditions: list[Object], type_: str) -> list[Object]:
    return [c for c in conditions if Condition(c).type != type_]


def _copied(jobset_condition: Condition, type_: str) -> Object:
    out: Object = {
        "type": type_,
        "status": jobset_condition.status,
        "reason": jobset_condition.reason,
        "message": jobset_condition.message,
    }
    if jobset_condition.last_transition_time:
        out["lastTransitionTime"] = jobset_condition.last_transition_time
    return out


def jobs_status(jobset: Mapping[str, Any]) -> list[Object]:
    """``jobsStatus`` from the JobSet's ``replicatedJobsStatus``; every count present (upstream [2.1+])."""
    out: list[Object] = []
    for item in JobSet(jobset).replicated_jobs_status or []:
        entry: Object = {"name": item["name"]}
        for key in _JOB_COUNTS:
            entry[key] = int(item.get(key) or 0)
        out.append(entry)
    return out


def unsupported_runtime(trainjob: Mapping[str, Any], key: str, now: datetime) -> StatusDecision:
    """Status for a runtimeRef kind/group this controller does not serve (upstream step 3)."""
    status = copy.deepcopy(dict(TrainJob(trainjob).status))
    conditions: list[Object] = status.setdefault("conditions", [])
    was_failed = condition_true(conditions, FAILED)
    message = f"unsupported runtime: {key}"
    set_condition(conditions, {"type": FAILED, "status": "True", "reason": REASON_RUNTIME_NOT_SUPPORTED,
                               "message": message}, now)
    transitions = () if was_failed else (Transition("Warning", REASON_RUNTIME_NOT_SUPPORTED, message),)
    return StatusDecision(status=status, transitions=transitions, state=STATE_FAILED)


# ---- the decision --------------------------------------------------------------------------------------------
def next_status(trainjob: Mapping[str, Any], jobset: Mapping[str, Any] | None, now: datetime,
                blocked: str | None = None, pending: str | None = None) -> StatusDecision:
    """The TrainJob status the reconciler should store, and what follows from it.

    ``jobset`` is the JobSet as the apiserver last returned it (None when it does not exist); ``blocked`` the
    condition message when an Enforce policy denies the job (``enforcement``; its event is the caller's);
    ``pending`` Kueue's reason for not admitting the job's Workload (``quota.pending_message``).
    """
    status = copy.deepcopy(dict(TrainJob(trainjob).status))
    conditions: list[Object] = [dict(c) for c in TrainJob(trainjob).conditions]
    finished_before = is_finished(trainjob)
    transitions: list[Transition] = []

    # Suspended mirrors spec.suspend; a never-suspended job gets no condition. A blocked job is held, not resumed.
    if blocked is not None:
        set_condition(conditions, {"type": SUSPENDED, "status": "True", "reason": REASON_POLICY_DENIED,
                                   "message": blocked[:MAX_CONDITION_MESSAGE]}, now)
    elif is_suspended(trainjob):
        if not condition_true(conditions, SUSPENDED):
            transitions.append(Transition("Normal", REASON_SUSPENDED, MESSAGE_SUSPENDED))
        message = MESSAGE_SUSPENDED if pending is None else f"{MESSAGE_SUSPENDED}: {pending}"[:MAX_CONDITION_MESSAGE]
        before = find_condition(conditions, SUSPENDED)
        if pending is not None and (before is None or before.message != message):
            transitions.append(Transition("Normal", REASON_WAITING_FOR_KUEUE, pending[:MAX_CONDITION_MESSAGE]))
        set_condition(conditions, {"type": SUSPENDED, "status": "True", "reason": REASON_SUSPENDED,
                                   "message": message}, now)
    elif condition_true(conditions, SUSPENDED):
        transitions.append(Transition("Normal", REASON_RESUMED, MESSAGE_RESUMED))
        conditions = _without(conditions, SUSPENDED)
        status[LAST_RESUME_TIME] = format_time(now)
    elif (stale := find_condition(conditions, SUSPENDED)) is not None:
        # Suspended=False from upstream's controller or an earlier trainguard: its time is the last resume.
        if not TrainJob(trainjob).last_resume_time and stale.last_transition_time:
            status[LAST_RESUME_TIME] = stale.last_transition_time
        conditions = _without(conditions, SUSPENDED)

    # Complete/Failed and jobsStatus from the JobSet. A finished job keeps its terminal condition even if the
    # JobSet now says otherwise or is gone (terminal means terminal).
    if jobset is not None:
        js_conditions = JobSet(jobset).conditions
        if not finished_before:
            completed = find_condition(js_conditions, JOBSET_COMPLETED)
            failed = find_condition(js_conditions, JOBSET_FAILED)
            if completed is not None and completed.is_true:
                set_condition(conditions, _copied(completed, COMPLETE), now)
                transitions.append(Transition("Normal", "Completed", completed.message or "TrainJob completed"))
            elif failed is not None and failed.is_true:
                set_condition(conditions, _copied(failed, FAILED), now)
                transitions.append(Transition("Warning", "Failed", f"{failed.reason}: {failed.message}".strip(": ")))
        replicated = jobs_status(jobset)
        if replicated or "jobsStatus" in status:
            status["jobsStatus"] = replicated

    status["conditions"] = conditions
    finished_now = condition_true(conditions, COMPLETE) or condition_true(conditions, FAILED)

    # activeDeadlineSeconds: only while the job runs (not suspended, not finished).
    delete_jobset = False
    requeue_after: float | None = None
    probe = {**trainjob, "status": status}
    due = deadline(probe)
    if due is not None and not finished_now and not is_suspended(trainjob) and blocked is None:
        if now >= due:
            set_condition(conditions, {"type": FAILED, "status": "True", "reason": REASON_DEADLINE_EXCEEDED,
                                       "message": MESSAGE_DEADLINE_EXCEEDED}, now)
            transitions.append(Transition("Warning", REASON_DEADLINE_EXCEEDED, MESSAGE_DEADLINE_EXCEEDED))
            delete_jobset = True
        else:
            requeue_after = (due - now).total_seconds()

    # A deadline-failed job must not keep a JobSet: delete again if an earlier delete did not go through.
    failed = find_condition(conditions, FAILED)
    if jobset is not None and failed is not None and failed.reason == REASON_DEADLINE_EXCEEDED:
        delete_jobset = True

    if not status["conditions"]:
        del status["conditions"]
    return StatusDecision(
        status=status,
        delete_jobset=delete_jobset,
        requeue_after=requeue_after,
        transitions=tuple(transitions),
        state=STATE_BLOCKED if blocked is not None else job_state({**trainjob, "status": status}, jobset),
        size=job_size(jobset) if jobset is not None else {},
    )


def job_size(jobset: Mapping[str, Any]) -> dict[str, str]:
    """The Nodes and GPUs labels from the JobSet as built: the trainer's pods (Jobs x parallelism), and the GPUs of
    every pod, counted from its effective requests as the scheduler counts them (``resources.pod_requests``)."""
    trainers = set(_trainer_jobs(jobset))
    nodes = gpus = 0
    for job in JobSet(jobset).replicated_jobs:
        pods = job.replicas * (job.parallelism if job.parallelism is not None else 1)
        gpus += pods * gpus_of(pod_requests(job.pod_spec))
        if job.name in trainers:
            nodes += pods
    return {NODES_LABEL: str(nodes), GPUS_LABEL: str(gpus)}


def job_state(trainjob: Mapping[str, Any], jobset: Mapping[str, Any] | None) -> str:
    """The SDK's vocabulary for where the job is: Complete/Failed/Suspended from conditions, else Running when
    every trainer replicated job has all its Jobs ready or succeeded (the SDK's "all nodes running or
    succeeded"), else Created."""
    conditions = TrainJob(trainjob).conditions
    if condition_true(conditions, COMPLETE):
        return STATE_COMPLETE
    if condition_true(conditions, FAILED):
        return STATE_FAILED
    if condition_true(conditions, SUSPENDED) or is_suspended(trainjob):
        return STATE_SUSPENDED
    if jobset is None:
        return STATE_CREATED
    trainer_jobs = _trainer_jobs(jobset)
    by_name = {s["name"]: s for s in jobs_status(jobset)}
    if trainer_jobs and all(
        name in by_name and by_name[name]["ready"] + by_name[name]["succeeded"] >= replicas
        for name, replicas in trainer_jobs.items()
    ):
        return STATE_RUNNING
    return STATE_CREATED


def _trainer_jobs(jobset: Mapping[str, Any]) -> dict[str, int]:
    """replicatedJob name -> replicas for the trainer step (ancestor label ``trainer``, else the job ``node``)."""
    jobs = JobSet(jobset).replicated_jobs
    labelled = {j.name: j.replicas for j in jobs if j.ancestor == "trainer"}
    if labelled:
        return labelled
    return {j.name: j.replicas for j in jobs if j.name == "node"}


def _comparable(status: Mapping[str, Any]) -> Object:
    """Status as stored: key order and absent-vs-empty lists do not count as a change."""
    out = {k: v for k, v in status.items() if v not in (None, [], {})}
    return out
