"""Defence in depth: the reconciler does not materialize a TrainJob that an Enforce TrainJobPolicy would deny.

Admission is the first line, but a TrainJob can reach the controller without it: the webhook was down under
``failurePolicy: Ignore``, the job predates the policy, or an admin exempted its namespace from the webhooks. Before the
controller CREATES a JobSet, or RESUMES one (the TrainJob is no longer suspended while its JobSet still is), it
asks ``trainguard.webhook.policy.pipeline.enforce_trainjob`` - the admission pipeline's own check, pure - with the runtime
it would build from (the snapshot) and the TrainJobPolicies and Namespace labels from its watch caches.

A denied job is *blocked*: nothing is created or changed for it (no JobSet, no Secret, no PodGroup), its label
``trainguard.io/state`` is ``Blocked`` and a Warning event ``PolicyDenied`` carries the denial message (the same
text ``kubectl apply`` would have printed). No condition is added: the ``kubeflow`` SDK 0.5 reads the conditions
list and infers "Running" from pods only when it is empty (see ``status``), and a blocked job may be unblocked
later - when a TrainJobPolicy or a Namespace's labels change, every blocked job is reconciled again and built if
it is allowed now. A JobSet that is already running is never touched, whatever the policies say now, and a
suspended JobSet of a still-suspended TrainJob is re-applied as before (it runs nothing; the resume is checked).
This check is trainguard's own: upstream Kubeflow Trainer v2.3 has no policies and builds whatever it is given.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from trainguard.webhook.api.views import KubeObject, TrainJob
from trainguard.webhook.policy.pipeline import enforce_trainjob
from trainguard.webhook.policy.verdict import ClusterSnapshot, Verdict

from trainguard.controller.reconcile import status as st

REASON_POLICY_DENIED = "PolicyDenied"


def materializes(trainjob: Mapping[str, Any], jobset: Mapping[str, Any] | None) -> bool:
    """Would building now create the JobSet, or let a suspended one run? Only then is the policy asked."""
    if jobset is None:
        return True
    trainjob_suspended = TrainJob(trainjob).suspend
    jobset_suspended = bool(KubeObject(jobset).get("spec.suspend"))
    return jobset_suspended and not trainjob_suspended


def verdict(trainjob: Mapping[str, Any], runtime: Mapping[str, Any], snapshot: ClusterSnapshot) -> Verdict:
    namespace = TrainJob(trainjob).metadata.namespace
    return enforce_trainjob(dict(trainjob), dict(runtime), namespace, snapshot)


def event_message(message: str | None) -> str:
    return f"TrainJob is not materialized: a TrainJobPolicy in mode Enforce denies it: {message or 'denied'}"


def blocked_trainjobs(trainjobs: Iterable[tuple[tuple[str, str], Mapping[str, Any]]],
                      namespace: str | None = None) -> list[tuple[str, str]]:
    """Keys of the unfinished TrainJobs labelled Blocked (in ``namespace`` when given): the ones a policy or
    namespace change may unblock."""
    keys = []
    for (ns, name), job in trainjobs:
        if namespace is not None and ns != namespace:
            continue
        if TrainJob(job).metadata.labels.get(st.STATE_LABEL) == st.STATE_BLOCKED \
                and not st.is_finished(job):
            keys.append((ns, name))
    return keys
