"""The policy engine's six entry points, each ``(AdmissionInput, ClusterSnapshot) -> Verdict``.

The admission server (and ``trainguard render``) call exactly these; every rule lives in its own module and this
one only fixes the ORDER in which they run, so the result is deterministic and idempotent:

Every entry point first passes the object through the door check (``well_formed.checked``): a CREATE or UPDATE
whose object is not the shape of its CRD, or exceeds its size limits, is denied with the field path before any
rule runs, mutating webhook included.

``mutate_trainjob`` (mutating webhook; denies only at the door):
  1. CREATE only: resolve the runtime, match TrainJobPolicies (``matching``), compute the effective job through
     ``trainguard.webhook.runtime`` and apply the policies' defaults (``defaults``): labels, Kueue suspend, KAI, the one
     ``trainguard.io/policy`` runtimePatch with topology hints; then MultiKueue's ``managedBy`` for a queue that
     dispatches to worker clusters (``multikueue``); nothing for a MultiKueue copy on a worker (``multikueue``);
  UPDATE only: an update that drops the ``trainguard.io/policy`` runtimePatch gets the old entry back, unchanged
     (``kubectl apply`` of the user's own manifest replaces the whole runtimePatches list, which would silently
     undo the policy decision on a suspended job and be refused as a patch change on a running one);
  2. upstream's runtimePatch time stamps (``timestamps``), last, so the policy's patch is stamped like any other.
``validate_trainjob`` (validating webhook):
  1. upstream's runtime lookup: unsupported kind, missing runtime (``spec.RuntimeRef`` quirk kept), deprecation warning;
  2. the runtime plugins' validations (upstream's CustomValidation plugins), on the merged view;
  3. trainguard: the DatasetCache reference; no pod running as a cache agent's ServiceAccount
     (``agent_identity``; on UPDATE only what the update introduces); the policies' findings (``enforcement``),
     each a denial under ``mode: Enforce`` and a warning under ``Audit``: on CREATE limits on every container,
     topology fit, whether the Kueue ClusterQueue could ever admit it (``capacity``), the scheduling labels the
     policies set and the values they pin (``pinning``); on UPDATE
     (``updates``) what the update introduces, judged by the policies selecting the old OR the new object: a
     policy's scheduling label or scheduler annotation removed or changed, an unsuspend without the label, a new
     limit, topology or pinned-value violation.
  Upstream errors come first in the message; trainguard's follow.
``check_trainjob`` (the controller's defence-in-depth check; ``enforce_trainjob`` and ``audit_trainjob`` are its
  halves): the CREATE findings of the policies for a TrainJob as it stands, against the runtime the controller
  builds from: the Enforce ones as a denial, the Audit ones as findings for the controller's events, and each
  matching policy's result (pass / warn / fail) for the TrainJobPolicy status counts.
``validate_training_runtime`` / ``validate_cluster_training_runtime``: upstream's
  ``validateReplicatedJobs`` plus stricter checks
  (``runtime_rules``; TrainingRuntime UPDATEs are validated too, unlike upstream) and ``agent_identity``.
``validate_trainjob_policy`` (``policy_rules``) and ``validate_dataset_cache`` (``dataset_cache``).

Nothing here performs I/O or reads a clock: cluster state comes in the snapshot, time in ``AdmissionInput.now``.
DELETE and CONNECT are always allowed unchanged.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from trainguard.webhook.api.constants import (
    CLUSTER_TRAINING_RUNTIME_KIND,
    DATASET_CACHE_KIND,
    TRAINING_RUNTIME_KIND,
    TRAINJOB_KIND,
    TRAINJOB_POLICY_KIND,
)
from trainguard.webhook.api.views import Meta, TrainJob
from trainguard.webhook.field import FieldError, aggregate
from trainguard.webhook.policy import (
    agent_identity, dataset_cache, dataset_cache_agents, framework, multikueue, runtime_rules,
)
from trainguard.webhook.policy.capacity import QUEUE_CAPACITY, queues_of
from trainguard.webhook.policy.defaults import POLICY_MANAGER, apply_policies
from trainguard.webhook.policy.enforcement import POLICY_LIMITS, SCHEDULING, TOPOLOGY, UNSET, Finding, findings
from trainguard.webhook.policy.matching import matching_policies, parse_all
from trainguard.webhook.policy.policy_model import Policy
from trainguard.webhook.policy.policy_rules import policy_errors
from trainguard.webhook.policy.runtime_ref import (
    CLUSTER_TRAINING_RUNTIME,
    DEPRECATION_POLICY_URL,
    UnsupportedRuntime,
    is_deprecated,
    resolve_runtime,
    runtime_ref,
)
from trainguard.webhook.policy.timestamps import stamp_runtime_patches
from trainguard.webhook.policy.updates import judging_policies, update_findings
from trainguard.webhook.policy.verdict import AdmissionInput, ClusterSnapshot, Verdict
from trainguard.webhook.policy.well_formed import checked

UPSTREAM = "UpstreamValidation"
DATASET_CACHE = "DatasetCache"
AGENT_IDENTITY = "AgentIdentity"
POLICY_OBJECT = "TrainJobPolicyValidation"
CACHE_OBJECT = "DatasetCacheValidation"


def _namespace(review: AdmissionInput) -> str:
    return review.namespace or Meta.of(review.obj).namespace or ""


def _admits(review: AdmissionInput) -> bool:
    return review.operation in ("CREATE", "UPDATE")


def _decide(errors: list[FieldError], warnings: list[str], reason: str) -> Verdict:
    if errors:
        return Verdict.deny(aggregate(errors), reason, _unique(warnings))
    return Verdict.allow(None, _unique(warnings))


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


# --- TrainJob ---------------------------------------------------------------------------------------------------


@checked(TRAINJOB_KIND)
def mutate_trainjob(review: AdmissionInput, snapshot: ClusterSnapshot) -> Verdict:
    """Default a TrainJob: policy effects (CREATE), then runtimePatch times. Denies only a malformed object."""
    if not _admits(review):
        return Verdict.allow()
    obj = review.obj
    warnings: list[str] = []
    if review.operation == "CREATE":
        namespace = _namespace(review)
        try:
            runtime = resolve_runtime(obj, namespace, snapshot).runtime
        except UnsupportedRuntime:
            runtime = None  # the validating webhook refuses it with upstream's message
        # A MultiKueue copy on a worker keeps the manager's policy decisions as they are (``multikueue``).
        if runtime is not None and not multikueue.is_dispatched_copy(review, snapshot):
            policies, problems = parse_all(snapshot.policies)
            warnings += problems
            matched = matching_policies(policies, obj, namespace, snapshot.namespace_labels, runtime)
            if matched:
                effective = framework.effective_job_or_none(obj, runtime)
                obj = apply_policies(obj, runtime, effective, matched)
                obj = multikueue.default_managed_by(obj, namespace, snapshot)
    elif review.old_obj is not None:
        obj = _keep_policy_patch(obj, review.old_obj)
    obj = stamp_runtime_patches(obj, review.old_obj, review.now)
    return Verdict.allow(obj, _unique(warnings))


def _policy_entry(obj: dict[str, Any]) -> dict[str, Any] | None:
    patches = TrainJob(obj).runtime_patches
    return next((p for p in patches if isinstance(p, dict) and p.get("manager") == POLICY_MANAGER), None)


def _keep_policy_patch(obj: dict[str, Any], old: dict[str, Any]) -> dict[str, Any]:
    """Put the old ``trainguard.io/policy`` entry back, first, when an UPDATE left it out (policy effects are
    decided at CREATE; an update may edit the entry, but omitting it is what list-replacing clients do)."""
    kept = _policy_entry(old)
    if kept is None or _policy_entry(obj) is not None or not TrainJob(obj).has_spec:
        return obj  # no spec: nothing to keep it in (adding one would make a spec without runtimeRef)
    result = copy.deepcopy(obj)
    result["spec"]["runtimePatches"] = [copy.deepcopy(kept)] + list(TrainJob(result).runtime_patches)
    return result


@checked(TRAINJOB_KIND)
def validate_trainjob(review: AdmissionInput, snapshot: ClusterSnapshot) -> Verdict:
    """Upstream's ``TrainJobValidator``, then trainguard's DatasetCache, limit and topology checks."""
    if not _admits(review):
        return Verdict.allow()
    obj, old, namespace = review.obj, review.old_obj, _namespace(review)
    try:
        resolved = resolve_runtime(obj, namespace, snapshot)
    except UnsupportedRuntime as e:
        return Verdict.deny(str(e), UPSTREAM)
    warnings = list(resolved.warnings)
    if resolved.runtime is None:
        return _decide(list(resolved.errors), warnings, UPSTREAM)
    runtime = resolved.runtime
    name = Meta.of(obj).name
    upstream, plugin_warnings = framework.plugin_validation(
        obj, old, runtime, snapshot.jobsets.get((namespace, name)), snapshot.priority_classes or None)
    warnings += plugin_warnings
    if upstream:
        return _decide(list(upstream), warnings, UPSTREAM)

    cache_errors = dataset_cache.reference_errors(obj, old, namespace, snapshot.dataset_caches)
    # built once for the agent-identity check and the policy findings (the costly part of a review)
    effective = framework.effective_job_or_none(obj, runtime)
    identity_errors = _introduced(
        agent_identity.agent_identity_errors(effective.spec) if effective is not None else [],
        agent_identity.trainjob_errors(old, runtime) if old is not None else [])
    policies, problems = parse_all(snapshot.policies)
    warnings += problems
    if review.operation == "CREATE" or old is None:
        found = _policy_findings(obj, runtime, namespace, snapshot, policies, effective)
    else:
        judges = judging_policies(
            matching_policies(policies, obj, namespace, snapshot.namespace_labels, runtime),
            matching_policies(policies, old, namespace, snapshot.namespace_labels, runtime))
        found = update_findings(obj, old, runtime, judges, queues=queues_of(snapshot), namespace=namespace)
    warnings += [f.violation.warning() for f in found if not f.enforced]
    enforced = _by_reason([f for f in found if f.enforced])
    reason = (DATASET_CACHE if cache_errors else AGENT_IDENTITY if identity_errors
              else enforced[0].reason if enforced else POLICY_LIMITS)
    return _decide(cache_errors + identity_errors + [f.violation.error for f in enforced], warnings, reason)


def _introduced(errors: list[FieldError], before: list[FieldError]) -> list[FieldError]:
    """On UPDATE, what the update brings in (a job admitted before a check existed keeps its status updates)."""
    seen = {str(e) for e in before}
    return [e for e in errors if str(e) not in seen]


def _policy_findings(obj: dict[str, Any], runtime: dict[str, Any], namespace: str, snapshot: ClusterSnapshot,
                     policies: list[Policy], effective: Any = UNSET) -> list[Finding]:
    matched = matching_policies(policies, obj, namespace, snapshot.namespace_labels, runtime)
    return findings(obj, runtime, matched, effective=effective, queues=queues_of(snapshot), namespace=namespace)


def _by_reason(found: list[Finding]) -> list[Finding]:
    """Limits first, then topology, then scheduling labels: the order the message lists them in."""
    order = {POLICY_LIMITS: 0, TOPOLOGY: 1, QUEUE_CAPACITY: 2, SCHEDULING: 3}
    return sorted(found, key=lambda f: order.get(f.reason, 3))


@dataclass(frozen=True)
class AuditFinding:
    """What an Audit policy says about a TrainJob: the same field error its apply-time warning carries."""

    policy: str
    message: str


# What one matching policy makes of a TrainJob (the TrainJobPolicy status counts): no finding, findings under
# ``mode: Audit`` (warnings), findings under ``mode: Enforce`` (a denial).
PASS, WARN, FAIL = "pass", "warn", "fail"


@dataclass(frozen=True)
class PolicyResult:
    """One matching policy's result for a TrainJob."""

    policy: str
    result: str  # PASS, WARN or FAIL


@dataclass(frozen=True)
class TrainJobCheck:
    """The controller's reading of the policies for a TrainJob as it stands: the Enforce verdict, the Audit
    findings and each matching policy's result, from one evaluation."""

    verdict: Verdict
    audit: tuple[AuditFinding, ...] = ()
    # One per matching policy, in application order; a policy that does not select the job has none.
    results: tuple[PolicyResult, ...] = ()


def _results(matched: list[Policy], found: list[Finding]) -> tuple[PolicyResult, ...]:
    # A finding names the matching policy that raised it; a policy has one mode, so its findings all warn or all deny.
    flagged = {f.violation.policy.name for f in found}
    return tuple(PolicyResult(p.name, (FAIL if p.enforcing else WARN) if p.name in flagged else PASS)
                 for p in matched)


def check_trainjob(obj: dict[str, Any], runtime: dict[str, Any], namespace: str,
                   snapshot: ClusterSnapshot) -> TrainJobCheck:
    """Would an Enforce policy deny this TrainJob as it stands now, built from ``runtime``, and what do the Audit
    policies find?

    The controller's defence-in-depth check before it builds (or unsuspends) a JobSet: the same policy checks a
    CREATE gets (limits on every container, topology fit, allowed runtimes, the scheduling labels the matching
    policies set and the values they pin), against the runtime the controller will build from (its snapshot, not
    the live object) and the snapshot's policies and namespace labels. Enforce findings deny; Audit findings are
    returned for the controller to record (admission only warned the requester), and each matching policy's
    result (pass / warn / fail, the TrainJobPolicy status counts). Unreadable policies are ignored (the webhook
    warns about those; the controller's policy status says so). Pure and deterministic.
    """
    policies, _ = parse_all(snapshot.policies)
    matched = matching_policies(policies, obj, namespace, snapshot.namespace_labels, runtime)
    found = findings(obj, runtime, matched, queues=queues_of(snapshot), namespace=namespace)
    audit = tuple(dict.fromkeys(AuditFinding(f.violation.policy.name, str(f.violation.error))
                                for f in found if not f.enforced))
    results = _results(matched, found)
    enforced = [f for f in found if f.enforced]
    if not enforced:
        return TrainJobCheck(Verdict.allow(), audit, results)
    ordered = _by_reason(enforced)
    return TrainJobCheck(Verdict.deny(aggregate([f.violation.error for f in ordered]), ordered[0].reason), audit,
                         results)


def enforce_trainjob(obj: dict[str, Any], runtime: dict[str, Any], namespace: str,
                     snapshot: ClusterSnapshot) -> Verdict:
    """``check_trainjob``'s Enforce verdict."""
    return check_trainjob(obj, runtime, namespace, snapshot).verdict


def audit_trainjob(obj: dict[str, Any], runtime: dict[str, Any], namespace: str,
                   snapshot: ClusterSnapshot) -> tuple[AuditFinding, ...]:
    """``check_trainjob``'s Audit findings, in the order the admission warnings list them."""
    return check_trainjob(obj, runtime, namespace, snapshot).audit


# --- runtimes ---------------------------------------------------------------------------------------------------


@checked(TRAINING_RUNTIME_KIND)
def validate_training_runtime(review: AdmissionInput, snapshot: ClusterSnapshot) -> Verdict:
    """TrainingRuntime CREATE and (unlike upstream, which skips updates) UPDATE."""
    if not _admits(review):
        return Verdict.allow()
    return _decide(runtime_rules.runtime_errors(review.obj) + agent_identity.runtime_errors(review.obj), [], UPSTREAM)


@checked(CLUSTER_TRAINING_RUNTIME_KIND)
def validate_cluster_training_runtime(review: AdmissionInput, snapshot: ClusterSnapshot) -> Verdict:
    """ClusterTrainingRuntime CREATE and UPDATE; creating a deprecated runtime warns, as upstream does."""
    if not _admits(review):
        return Verdict.allow()
    warnings: list[str] = []
    if review.operation == "CREATE" and is_deprecated(review.obj):
        name = Meta.of(review.obj).name
        warnings.append(
            f'{CLUSTER_TRAINING_RUNTIME} "{name}" is deprecated and will be removed in a future release of '
            f"Kubeflow Trainer. See runtime deprecation policy: {DEPRECATION_POLICY_URL}"
        )
    return _decide(runtime_rules.runtime_errors(review.obj) + agent_identity.runtime_errors(review.obj), warnings,
                   UPSTREAM)


# --- trainguard.io objects ----------------------------------------------------------------------------------------


@checked(TRAINJOB_POLICY_KIND)
def validate_trainjob_policy(review: AdmissionInput, snapshot: ClusterSnapshot) -> Verdict:
    """TrainJobPolicy: readable, sane topology and limits, no conflict with an overlapping equal-priority policy."""
    if not _admits(review):
        return Verdict.allow()
    runtime_labels = [dict(Meta.of(r).labels)
                      for r in list(snapshot.training_runtimes.values()) + list(snapshot.cluster_training_runtimes.values())]
    errors, warnings = policy_errors(review.obj, snapshot.policies, snapshot.namespace_labels, runtime_labels)
    return _decide(errors, warnings, POLICY_OBJECT)


@checked(DATASET_CACHE_KIND)
def validate_dataset_cache(review: AdmissionInput, snapshot: ClusterSnapshot) -> Verdict:
    """DatasetCache: what the CRD's CEL rules cannot check, and whether the admin allows its source and what it
    asks for its agents (priority class, tolerations, node selector, memory budget)."""
    if not _admits(review):
        return Verdict.allow()
    source_errors, warnings = dataset_cache.source_findings(
        review.obj, review.old_obj, snapshot.dataset_cache_sources)
    agent_errors, agent_warnings = dataset_cache_agents.agent_findings(
        review.obj, review.old_obj, snapshot.dataset_cache_agents)
    return _decide(dataset_cache.dataset_cache_errors(review.obj) + source_errors + agent_errors,
                   warnings + agent_warnings, CACHE_OBJECT)
