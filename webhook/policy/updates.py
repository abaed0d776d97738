"""What an UPDATE of a TrainJob may not do while an Enforce policy selects it (issue 10 item 8: Kueue was escaped
after admission by removing ``kueue.x-k8s.io/queue-name`` and then setting ``suspend: false``).

* The policies that judge an UPDATE are those selecting the OLD object or the NEW one: editing the TrainJob's own
  labels so that a ``trainJobSelector`` no longer matches does not step out of a policy (namespace labels are an
  admin's; ``runtimeRef`` and ``trainer`` are immutable in the CRD).
* A scheduling label one of those policies sets (``kueue.x-k8s.io/queue-name``, ``kueue.x-k8s.io/priority-class``,
  ``kai.scheduler/queue``), or the ``trainguard.io/scheduler-name`` annotation of a policy's schedulerName, that
  the old object carries cannot be removed or changed to another value.
* A scheduling value the pinning policy does not allow (``pinning``: a label or annotation added, a runtimePatch
  naming another queue or scheduler) is refused when the update introduces it.
* Unsuspending (``spec.suspend`` true -> false or unset) a job that lacks such a label is refused: the job would
  run outside the queue the policy puts it in.
* Limits and topology fit: only violations the update INTRODUCES are refused (``runtimePatches`` stay mutable, so an
  update can change the merged job); violations the old object already had are not re-judged, so a policy
  tightened after admission does not block status-like updates (Kueue's unsuspend and its
  ``kueue.x-k8s.io/manager`` runtimePatch, a finalizer removal) of jobs admitted before.

Adding a missing label, or keeping it as it was, is always fine; Kueue's own updates (suspend, its runtimePatch)
keep the labels and so pass.
"""

from __future__ import annotations

from typing import Any

from trainguard.webhook.api.views import TrainJob
from trainguard.webhook.field import forbidden, required
from trainguard.webhook.policy import framework
from trainguard.webhook.policy.defaults import SCHEDULER_NAME_ANNOTATION
from trainguard.webhook.policy.capacity import Queues
from trainguard.webhook.policy.enforcement import SCHEDULING, SCHEDULING_LABELS, Finding, findings, label_path
from trainguard.webhook.policy.limits import Violation
from trainguard.webhook.policy.matching import application_order
from trainguard.webhook.policy.pinning import pin_violations
from trainguard.webhook.policy.policy_model import Policy

# What an update may not remove or change: (path, reader, picker of the policy's value, needed to unsuspend).
KEPT: tuple[tuple[str, Any, Any, bool], ...] = tuple(
    (label_path(key), lambda obj, key=key: TrainJob(obj).metadata.labels.get(key), pick, True)
    for key, pick in SCHEDULING_LABELS
) + ((f"metadata.annotations[{SCHEDULER_NAME_ANNOTATION}]",
      lambda obj: TrainJob(obj).metadata.annotations.get(SCHEDULER_NAME_ANNOTATION),
      lambda p: p.spec.scheduling.scheduler_name, False),)


def judging_policies(matched_new: list[Policy], matched_old: list[Policy]) -> list[Policy]:
    """Policies selecting the old object or the new one, in application order."""
    by_name = {p.name: p for p in matched_old}
    by_name.update({p.name: p for p in matched_new})
    return application_order(by_name.values())


def _suspended(obj: dict[str, Any]) -> bool:
    return TrainJob(obj).get("spec.suspend") is True


def scheduling_update_findings(obj: dict[str, Any], old: dict[str, Any], runtime: dict[str, Any],
                               policies: list[Policy]) -> list[Finding]:
    unsuspending = _suspended(old) and not _suspended(obj)
    found: list[Finding] = []
    for path, read, pick, needed_to_run in KEPT:
        setters = [p for p in policies if pick(p)]
        if not setters:
            continue
        owner = next((p for p in setters if p.enforcing), setters[0])
        before, after = read(old), read(obj)
        if before and after != before:
            what = "removed" if not after else f"changed to {after!r}"
            found.append(Finding(SCHEDULING, Violation(owner, forbidden(
                path, f'cannot be {what} while TrainJobPolicy "{owner.name}" selects this job '
                f"(it was {before!r})"))))
        elif not after and unsuspending and needed_to_run:
            found.append(Finding(SCHEDULING, Violation(owner, required(
                path, f'TrainJobPolicy "{owner.name}" schedules this job through {pick(owner)!r}; '
                "a job without the label cannot be unsuspended"))))
    # Pinned values: only what the update brings in (a job admitted before a policy was tightened keeps its
    # status-like updates; the controller's check still refuses to run it). One finding per path.
    reported = {f.violation.error.path for f in found}
    before = {str(v.error) for v in pin_violations(old, runtime, policies,
                                                   lambda: framework.effective_job_or_none(old, runtime))}
    found += [Finding(SCHEDULING, v) for v in pin_violations(obj, runtime, policies,
                                                             lambda: framework.effective_job_or_none(obj, runtime))
              if str(v.error) not in before and v.error.path not in reported]
    return found


def _build_inputs(obj: dict[str, Any]) -> tuple[Any, Any]:
    """What the merged job depends on, less what cannot change it (suspend, runtimePatch times)."""
    job = TrainJob(obj)
    spec = {k: v for k, v in job.spec.items() if k != "suspend"}
    patches = job.runtime_patches
    if patches:  # a list with entries; anything else compares as written
        spec["runtimePatches"] = [{k: v for k, v in p.items() if k != "time"} if isinstance(p, dict) else p
                                  for p in patches]
    return spec, job.metadata.annotations


def update_findings(obj: dict[str, Any], old: dict[str, Any], runtime: dict[str, Any],
                    policies: list[Policy], *, queues: Queues | None = None, namespace: str = "") -> list[Finding]:
    """Findings for an UPDATE from ``old`` to ``obj`` under the judging ``policies`` (``queues``: Kueue's, for the
    capacity check)."""
    if not policies:
        return []
    if _build_inputs(obj) == _build_inputs(old):
        return scheduling_update_findings(obj, old, runtime, policies)
    before = {str(f.violation.error)
              for f in findings(old, runtime, policies, scheduling=False, queues=queues, namespace=namespace)}
    introduced = [f for f in findings(obj, runtime, policies, scheduling=False, queues=queues, namespace=namespace)
                  if str(f.violation.error) not in before]
    return introduced + scheduling_update_findings(obj, old, runtime, policies)
