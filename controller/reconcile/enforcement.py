"""Defence in depth: the reconciler does not materialize a TrainJob that an Enforce TrainJobPolicy would deny.

Admission is the first line, but a TrainJob can reach the controller without it: the webhook was down under
``failurePolicy: Ignore``, the job predates the policy, or an admin exempted its namespace from the webhooks. Whenever
its JobSet does not run - before the controller CREATES a JobSet, RESUMES one (the TrainJob is no longer suspended
while its JobSet still is) or re-applies a suspended one - it asks ``trainguard.webhook.policy.pipeline.enforce_trainjob``
- the admission pipeline's own check, pure - with the runtime it would build from (the snapshot) and the
TrainJobPolicies and Namespace labels from its watch caches.

A denied job is *blocked*: nothing is created or changed for it (no JobSet, no Secret, no PodGroup), its label
``trainguard.io/state`` is ``Blocked``, its ``Suspended`` condition (upstream's type, so the ``kubeflow`` SDK and
``kubectl describe`` read it) is ``True`` with reason ``PolicyDenied`` and the denial as message (the same text
``kubectl apply`` would have printed; never ``Resumed``), and a Warning event ``PolicyDenied`` says so once per
denial (again only when the denial changes). Its Kueue Workload is deactivated so the quota goes back (``quota``). A
blocked job may be unblocked later: when a TrainJobPolicy or a Namespace's labels change, every unfinished job is
reconciled again, and built (its Workload reactivated) if it is allowed now.

A JobSet that is already running is never touched, whatever the policies say now; a running job a policy change now
denies gets one Warning event ``PolicyDenied`` saying it keeps running but is not resumed once suspended (by Kueue's
preemption, say), and is checked again then. This check is trainguard's own: upstream Kubeflow Trainer v2.3 has no
policies and builds whatever it is given.

Audit policies only warn the requester at admission. The same check returns their findings, and each becomes one
Warning event ``PolicyViolation`` on the TrainJob naming the policy and the field error, once per (policy, message)
per job (the reconciler remembers what it recorded; a restarted controller records them once more), so an admin
sees what Audit let through with ``kubectl get events`` or the ``kubeflow`` SDK's ``get_job_events()``.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from trainguard.webhook.api.views import KubeObject, TrainJob
from trainguard.webhook.policy.pipeline import AuditFinding, TrainJobCheck, check_trainjob
from trainguard.webhook.policy.verdict import ClusterSnapshot

from trainguard.controller.reconcile import status as st

REASON_POLICY_DENIED = "PolicyDenied"
REASON_POLICY_VIOLATION = "PolicyViolation"


def checked(jobset: Mapping[str, Any] | None) -> bool:
    """Does the policy decide what is built now? Yes unless the JobSet exists and runs (is not suspended)."""
    return jobset is None or bool(KubeObject(jobset).get("spec.suspend"))


def check(trainjob: Mapping[str, Any], runtime: Mapping[str, Any], snapshot: ClusterSnapshot) -> TrainJobCheck:
    """The Enforce verdict and the Audit findings, from the admission pipeline's own pure check."""
    namespace = TrainJob(trainjob).metadata.namespace
    return check_trainjob(dict(trainjob), dict(runtime), namespace, snapshot)


def audit_event_message(finding: AuditFinding) -> str:
    return (f'TrainJobPolicy "{finding.policy}" in mode Audit would deny this TrainJob (it is allowed): '
            f"{finding.message}")


def event_message(message: str | None) -> str:
    return f"TrainJob is not materialized: a TrainJobPolicy in mode Enforce denies it: {message or 'denied'}"


def running_event_message(message: str | None) -> str:
    return ("TrainJob keeps running, but is not resumed once suspended: a TrainJobPolicy in mode Enforce denies it: "
            f"{message or 'denied'}")


def rechecked_trainjobs(trainjobs: Iterable[tuple[tuple[str, str], Mapping[str, Any]]],
                        namespace: str | None = None) -> list[tuple[str, str]]:
    """Keys of the unfinished TrainJobs (in ``namespace`` when given): the ones a policy or namespace change may
    block, unblock, or warn about."""
    return [(ns, name) for (ns, name), job in trainjobs
            if (namespace is None or ns == namespace) and not st.is_finished(job)]
