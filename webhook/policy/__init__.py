"""webhook/policy: admission decisions (the pipeline's entry points) and the controller's policy check."""

from webhook.policy.pipeline import (
    enforce_trainjob,
    mutate_trainjob,
    validate_cluster_training_runtime,
    validate_dataset_cache,
    validate_training_runtime,
    validate_trainjob,
    validate_trainjob_policy,
)
from webhook.policy.verdict import AdmissionInput, ClusterSnapshot, Verdict

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
