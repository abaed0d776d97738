"""Admission decisions: the policy engine behind every webhook, and the reconciler's policy check.

Entry points (``pipeline``, re-exported here), each ``(AdmissionInput, ClusterSnapshot) -> Verdict`` (``verdict``):
``mutate_trainjob``, ``validate_trainjob``, ``validate_training_runtime``, ``validate_cluster_training_runtime``,
``validate_trainjob_policy``, ``validate_dataset_cache``; and ``check_trainjob`` (``enforce_trainjob``,
``audit_trainjob``), the policies' findings the reconciler checks before it builds a TrainJob that may have skipped
admission, and records as events for Audit. Pure: the cluster comes in as
the snapshot, the time as ``AdmissionInput.now``.

Modules, roughly in the order a TrainJob meets them:

* ``well_formed``    the door check: the CRD's types and size limits, before any policy work
* ``runtime_ref``    the runtime a TrainJob names, looked up as upstream's ``TrainJobValidator`` does
* ``framework``      the door into the runtime framework (effective job, the plugins' TrainJob rules); ``shape``
                     the numbers policies reason about, read off the effective job
* ``matching``       which TrainJobPolicies select a TrainJob, in priority order; ``policy_model`` their door
                     check (the API model), which hands the rules a read-only view of each
* ``defaults``       what policies write at CREATE (Kueue and KAI labels, scheduler name, deadline, one
                     ``trainguard.io/policy`` runtimePatch with topology hints); ``topology`` the narrowest level that
                     holds the job; ``multikueue`` Kueue's ``managedBy``/``suspend`` defaulting for a queue a policy
                     set, and MultiKueue's copies on a worker
* ``timestamps``     ``runtimePatches[].time``, stamped as upstream's defaulter does
* ``enforcement``    what Enforce and Audit policies find wrong (``limits``, ``pod_security``, topology fit);
                     ``updates`` what an UPDATE may not do; ``agent_identity`` and ``dataset_cache`` (cache references
                     and sources)
* ``runtime_rules``  TrainingRuntime and ClusterTrainingRuntime validation; ``policy_rules`` TrainJobPolicy validation
"""

from trainguard.webhook.policy.pipeline import (
    AuditFinding,
    TrainJobCheck,
    audit_trainjob,
    check_trainjob,
    enforce_trainjob,
    mutate_trainjob,
    validate_cluster_training_runtime,
    validate_dataset_cache,
    validate_training_runtime,
    validate_trainjob,
    validate_trainjob_policy,
)
from trainguard.webhook.policy.verdict import AdmissionInput, ClusterSnapshot, Verdict

__all__ = [
    "AdmissionInput",
    "AuditFinding",
    "ClusterSnapshot",
    "TrainJobCheck",
    "Verdict",
    "audit_trainjob",
    "check_trainjob",
    "enforce_trainjob",
    "mutate_trainjob",
    "validate_cluster_training_runtime",
    "validate_dataset_cache",
    "validate_training_runtime",
    "validate_trainjob",
    "validate_trainjob_policy",
]
