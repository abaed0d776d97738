"""TrainJobPolicies and Kueue's multi-cluster dispatch (MultiKueue), on the manager and on the workers.

**Manager**: Kueue's mutating webhook runs before trainguard's and decides ``spec.managedBy`` and ``spec.suspend``
from the ``kueue.x-k8s.io/queue-name`` label it sees. A queue that a TrainJobPolicy sets arrives after that, so
trainguard finishes Kueue's defaulting for the label it wrote, exactly as Kueue v0.17 would have
(``jobframework.ApplyDefaultForManagedBy`` and ``WorkloadShouldBeSuspended``):

* ``managedBy: kueue.x-k8s.io/multikueue`` when the LocalQueue named by the label exists in the job's namespace
  and its ClusterQueue lists (``spec.admissionChecksStrategy``) an AdmissionCheck whose ``controllerName`` is
  MultiKueue's, and the job's ``managedBy`` is unset or the trainer's default (Kueue overrides nothing else). Without
  it, MultiKueue's admission check rejects the Workload ("The owner is not managed by Kueue") and deactivates it.
* ``suspend: true``, for MultiKueue jobs as for any job with a queue label (``defaults``): Kueue suspends every
  job that carries a queue name and has no Kueue-managed owner, whatever its ``managedBy``.

CREATE only, like Kueue's defaulter; ``managedBy`` is immutable (the CRD says so too), so an UPDATE never flips it,
and a second review of the admitted object changes nothing. The queues come from the snapshot (watches on
LocalQueues, ClusterQueues and AdmissionChecks, empty where Kueue is not installed).

**Which cluster's policy decides** (the rule, for manager and workers alike):

* The manager's policies decide the job's shape and queueing: they ran at the user's ``kubectl apply`` and their
  ``trainguard.io/policy`` runtimePatch is part of what the manager's Kueue admitted.
* A worker takes MultiKueue's copy of the job as it is: its mutating webhook applies none of the worker's policy
  defaults (labels, deadline, the ``trainguard.io/policy`` runtimePatch) to a copy, so no job's shape changes after
  the manager's Kueue admitted it. The worker still judges the copy: its validating webhook and its controller
  apply every Enforce finding (limits, topology fit, scheduling labels, pinned values) as for any TrainJob, so a
  worker policy that pins a queue must allow the manager's (``allowedQueueNames``). A denied copy is not
  created there: Kueue v0.17's MultiKueue retries the create with backoff (its log carries the denial) and the job
  stays pending on the manager; a copy the worker's controller blocks is not built.
* A copy is a CREATE carrying Kueue's ``kueue.x-k8s.io/multikueue-origin`` label made by a user the worker's admin
  names as MultiKueue's (``--multikueue-dispatcher``, the identity of the kubeconfig the manager's
  MultiKueueCluster uses). The label alone proves nothing (any user can write it), the requester's identity is
  set by the apiserver: a namespace user who adds the label gets the worker's policies like any other job.

Pure: no I/O; the requester comes in ``AdmissionInput.username``, the dispatchers in the snapshot.
"""

from __future__ import annotations

import copy
from typing import Any, Mapping

from trainguard.webhook.api.constants import MULTIKUEUE_CONTROLLER, TRAINJOB_CONTROLLER
from trainguard.webhook.api.views import Meta, TrainJob
from trainguard.webhook.policy.defaults import KUEUE_QUEUE_LABEL
from trainguard.webhook.policy.verdict import AdmissionInput, ClusterSnapshot

Object = dict[str, Any]

# Set by MultiKueue on the copies it creates in worker clusters (Kueue v0.17 ``kueue.MultiKueueOriginLabel``).
ORIGIN_LABEL = "kueue.x-k8s.io/multikueue-origin"


def _labels(obj: Object) -> Mapping[str, Any]:
    return Meta.of(obj).labels


def dispatches(namespace: str, queue: str, snapshot: ClusterSnapshot) -> bool:
    """Does the LocalQueue ``namespace/queue`` feed a ClusterQueue with a MultiKueue admission check?"""
    cluster_queue = snapshot.kueue_local_queues.get((namespace, queue))
    if not cluster_queue:
        return False
    return any(snapshot.kueue_admission_checks.get(check) == MULTIKUEUE_CONTROLLER
               for check in snapshot.kueue_cluster_queues.get(cluster_queue, ()))


def default_managed_by(trainjob: Object, namespace: str, snapshot: ClusterSnapshot) -> Object:
    """``trainjob`` with MultiKueue's ``managedBy`` where Kueue's defaulter would set it (a copy when changed)."""
    job = TrainJob(trainjob)
    queue = job.metadata.labels.get(KUEUE_QUEUE_LABEL)
    if not isinstance(queue, str) or not queue or not job.has_spec:
        return trainjob
    if job.managed_by not in (None, TRAINJOB_CONTROLLER):
        return trainjob  # Kueue's CanDefaultManagedBy: another controller's job is left as it is
    if not dispatches(namespace, queue, snapshot):
        return trainjob
    result = copy.deepcopy(trainjob)
    result["spec"]["managedBy"] = MULTIKUEUE_CONTROLLER
    return result


def is_dispatched_copy(review: AdmissionInput, snapshot: ClusterSnapshot) -> bool:
    """Is this CREATE MultiKueue putting a manager's job on this worker (see the module docstring)?"""
    return (review.operation == "CREATE"
            and bool(review.username) and review.username in snapshot.multikueue_dispatchers
            and bool(_labels(review.obj).get(ORIGIN_LABEL)))
