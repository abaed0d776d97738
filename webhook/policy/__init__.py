"""webhook/policy: admission decisions (the pipeline's entry points) and the controller's policy check."""

from trainguard.webhook.policy.pipeline import (
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
    "ClusterSnapshot",
    "Verdict",
    "enforce_trainjob",
    "mutate_trainjob",
    "validate_cluster_training_runtime",
    "validate_dataset_cache",
    "validate_training_runtime",
    "validate_trainjob",
    "validate_trainjob_policy",
]
