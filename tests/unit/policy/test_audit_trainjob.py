"""``audit_trainjob``: what the Audit policies find about a TrainJob as it stands, for the controller's
``PolicyViolation`` events; the same findings the validating webhook warns about at CREATE, from the same code."""

from __future__ import annotations

from policy_helpers import NOW, policy, runtime, trainjob
from trainguard.webhook.policy import AuditFinding, audit_trainjob, check_trainjob, validate_trainjob
from trainguard.webhook.policy.verdict import AdmissionInput, ClusterSnapshot

GPU_NS = {"team-a": {"trainguard.io/tier": "gpu"}}
TIER = {"namespaceSelector": {"matchLabels": {"trainguard.io/tier": "gpu"}}}
TOO_BIG = 'spec.trainer.numNodes: Invalid value: 100: 100 nodes exceed maxNodes 4 of TrainJobPolicy "watch"'


def snap(*policies, **kw) -> ClusterSnapshot:
    return ClusterSnapshot(policies={p["metadata"]["name"]: p for p in policies}, namespace_labels=GPU_NS, **kw)


def test_an_audit_policy_finding_names_the_policy_and_the_field_error():
    s = snap(policy("watch", mode="Audit", selector=TIER, limits={"maxNodes": 4}))
    assert audit_trainjob(trainjob(trainer={"numNodes": 100}), runtime(), "team-a", s) == (
        AuditFinding("watch", TOO_BIG),)


def test_nothing_found_within_limits_or_outside_the_selector():
    s = snap(policy("watch", mode="Audit", selector=TIER, limits={"maxNodes": 4}))
    assert audit_trainjob(trainjob(trainer={"numNodes": 4}), runtime(), "team-a", s) == ()
    assert audit_trainjob(trainjob(trainer={"numNodes": 100}), runtime(), "other", s) == ()


def test_enforce_findings_deny_and_are_not_audit_findings():
    s = snap(policy("watch", mode="Audit", selector=TIER, limits={"maxNodes": 4}),
             policy("hard", selector=TIER, limits={"maxNodes": 50}))
    check = check_trainjob(trainjob(trainer={"numNodes": 100}), runtime(), "team-a", s)
    assert not check.verdict.allowed and 'TrainJobPolicy "hard"' in check.verdict.message
    assert [f.policy for f in check.audit] == ["watch"]


def test_the_findings_are_the_warnings_the_webhook_gave_at_create():
    """One implementation: each Audit warning at CREATE is one finding's error with its policy's Audit note."""
    p = policy("watch", mode="Audit", selector=TIER, limits={"maxNodes": 4, "allowedImagePrefixes": ["ghcr.io/acme/"]})
    rt = runtime()
    job = trainjob(trainer={"numNodes": 100, "image": "docker.io/evil:1"})
    s = snap(p, cluster_training_runtimes={"torch-distributed": rt})
    webhook = validate_trainjob(AdmissionInput("CREATE", job, None, NOW), s)
    found = audit_trainjob(job, rt, "team-a", s)
    assert webhook.allowed and len(found) == 2
    assert [f'{f.message} (TrainJobPolicy "{f.policy}" is in Audit mode: allowed)' for f in found] == \
        [w for w in webhook.warnings if "Audit mode" in w]
