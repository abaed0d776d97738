"""The policy engine's six entry points, each ``(AdmissionInput, ClusterSnapshot) -> Verdict``.

The admission server (and ``trainguard render``) call exactly these; every rule lives in its own module and this
one only fixes the ORDER in which they run, so that the result is deterministic and idempotent:

``mutate_trainjob`` (the mutating webhook):
  1. trainguard policy defaults from the matching TrainJobPolicies (labels, Kueue/KAI, the ``trainguard.io/policy``
     runtimePatch with topology hints) -- only where the user has not written the value;
  2. §2.4 runtimePatch time stamping, last, so the policy's own patch is stamped like any other.
``validate_trainjob`` (the validating webhook):
  1. §2.5 runtime lookup (unsupported kind, missing runtime, deprecation warning);
  2. the runtime framework's plugin validations (``webhook.runtime``), on the merged view;
  3. trainguard: DatasetCache reference, policy limits and topology fit (Enforce -> denial, Audit -> warning).
Runtimes, TrainJobPolicies and DatasetCaches have their own validators below.

Nothing here performs I/O or reads a clock: cluster state comes in the snapshot and time in ``AdmissionInput.now``.
"""

from __future__ import annotations

from webhook.field import FieldError, aggregate
from webhook.policy import runtime_rules
from webhook.policy.runtime_ref import CLUSTER_TRAINING_RUNTIME, UnsupportedRuntime, is_deprecated, resolve_runtime
from webhook.policy.timestamps import stamp_runtime_patches
from webhook.policy.verdict import AdmissionInput, ClusterSnapshot, Verdict

UPSTREAM = "UpstreamValidation"


def _namespace(review: AdmissionInput) -> str:
    return review.namespace or (review.obj.get("metadata") or {}).get("namespace") or ""


def _decide(errors: list[FieldError], warnings: list[str], reason: str) -> Verdict:
    if errors:
        return Verdict.deny(aggregate(errors), reason, warnings)
    return Verdict.allow(None, warnings)


# --- TrainJob ---------------------------------------------------------------------------------------------------


def mutate_trainjob(review: AdmissionInput, snapshot: ClusterSnapshot) -> Verdict:
    """Default a TrainJob: policy defaults, then runtimePatch times. Never denies."""
    if review.operation not in ("CREATE", "UPDATE"):
        return Verdict.allow()
    obj = stamp_runtime_patches(review.obj, review.old_obj, review.now)
    return Verdict.allow(obj)


def validate_trainjob(review: AdmissionInput, snapshot: ClusterSnapshot) -> Verdict:
    """Upstream's TrainJob validation, then trainguard's policy checks."""
    if review.operation not in ("CREATE", "UPDATE"):
        return Verdict.allow()
    try:
        resolved = resolve_runtime(review.obj, _namespace(review), snapshot)
    except UnsupportedRuntime as e:
        return Verdict.deny(str(e), UPSTREAM)
    errors = list(resolved.errors)
    warnings = list(resolved.warnings)
    return _decide(errors, warnings, UPSTREAM)


# --- runtimes ---------------------------------------------------------------------------------------------------


def validate_training_runtime(review: AdmissionInput, snapshot: ClusterSnapshot) -> Verdict:
    """TrainingRuntime CREATE and (unlike upstream) UPDATE; see ``runtime_rules``."""
    if review.operation not in ("CREATE", "UPDATE"):
        return Verdict.allow()
    return _decide(runtime_rules.runtime_errors(review.obj), [], UPSTREAM)


def validate_cluster_training_runtime(review: AdmissionInput, snapshot: ClusterSnapshot) -> Verdict:
    """ClusterTrainingRuntime CREATE and UPDATE; a deprecated runtime warns on CREATE as upstream does."""
    if review.operation not in ("CREATE", "UPDATE"):
        return Verdict.allow()
    warnings: list[str] = []
    if review.operation == "CREATE" and is_deprecated(review.obj):
        name = (review.obj.get("metadata") or {}).get("name", "")
        warnings.append(
            f'{CLUSTER_TRAINING_RUNTIME} "{name}" is deprecated and will be removed in a future release of '
            "Kubeflow Trainer. See runtime deprecation policy: "
            "https://trainer.kubeflow.org/en/latest/operator-guides/runtime.html#runtime-deprecation-policy"
        )
    return _decide(runtime_rules.runtime_errors(review.obj), warnings, UPSTREAM)


# --- trainguard.io objects ----------------------------------------------------------------------------------------


def validate_trainjob_policy(review: AdmissionInput, snapshot: ClusterSnapshot) -> Verdict:
    """TrainJobPolicy: conflicts with other policies, unknown topology labels, impossible limits."""
    if review.operation not in ("CREATE", "UPDATE"):
        return Verdict.allow()
    return Verdict.allow()


def validate_dataset_cache(review: AdmissionInput, snapshot: ClusterSnapshot) -> Verdict:
    """DatasetCache: checks that need more than the CRD's CEL rules."""
    if review.operation not in ("CREATE", "UPDATE"):
        return Verdict.allow()
    return Verdict.allow()
