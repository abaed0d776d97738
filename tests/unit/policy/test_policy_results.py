"""``check_trainjob``'s per-policy results, the TrainJobPolicy status counts: each policy that selects the job says
pass, warn (Audit findings) or fail (Enforce would deny), from the same evaluation as the verdict and the Audit
findings; a policy that does not select the job says nothing."""

from __future__ import annotations

from policy_helpers import policy, runtime, trainjob
from trainguard.webhook.policy.pipeline import FAIL, PASS, WARN, PolicyResult, check_trainjob
from trainguard.webhook.policy.verdict import ClusterSnapshot

GPU_NS = {"team-a": {"trainguard.io/tier": "gpu"}}
TIER = {"namespaceSelector": {"matchLabels": {"trainguard.io/tier": "gpu"}}}


def snap(*policies) -> ClusterSnapshot:
    return ClusterSnapshot(policies={p["metadata"]["name"]: p for p in policies}, namespace_labels=GPU_NS)


def results(nodes: int, namespace: str, *policies) -> tuple[PolicyResult, ...]:
    return check_trainjob(trainjob(trainer={"numNodes": nodes}), runtime(), namespace, snap(*policies)).results


def test_each_selecting_policy_passes_warns_or_fails_in_application_order():
    audit = policy("audit", mode="Audit", selector=TIER, limits={"maxNodes": 4})
    hard = policy("hard", selector=TIER, limits={"maxNodes": 8}, priority=5)
    loose = policy("loose", selector=TIER, limits={"maxNodes": 100})
    assert results(10, "team-a", audit, hard, loose) == (
        PolicyResult("hard", FAIL), PolicyResult("audit", WARN), PolicyResult("loose", PASS))
    assert results(6, "team-a", audit, hard, loose) == (
        PolicyResult("hard", PASS), PolicyResult("audit", WARN), PolicyResult("loose", PASS))
    assert results(2, "team-a", audit, hard, loose) == (
        PolicyResult("hard", PASS), PolicyResult("audit", PASS), PolicyResult("loose", PASS))


def test_a_policy_that_does_not_select_the_job_has_no_result():
    assert results(10, "elsewhere", policy("audit", mode="Audit", selector=TIER, limits={"maxNodes": 4})) == ()


def test_the_results_agree_with_the_verdict_and_the_audit_findings():
    """One evaluation: a fail exactly when an Enforce policy denies, a warn exactly for a policy with a finding."""
    ps = (policy("audit", mode="Audit", selector=TIER, limits={"maxNodes": 4}),
          policy("hard", selector=TIER, limits={"maxNodes": 8}))
    for nodes in (1, 5, 9):
        check = check_trainjob(trainjob(trainer={"numNodes": nodes}), runtime(), "team-a", snap(*ps))
        by_policy = {r.policy: r.result for r in check.results}
        assert (by_policy["hard"] == FAIL) == (not check.verdict.allowed)
        assert {f.policy for f in check.audit} == {p for p, r in by_policy.items() if r == WARN}


def test_scheduling_findings_count_for_the_policy_that_owns_the_label():
    """A finding other than a limit (a missing Kueue queue label the policy sets) is the setting policy's."""
    queue = policy("queue", mode="Audit", selector=TIER, scheduling={"kueue": {"queueName": "gpu"}})
    assert results(1, "team-a", queue) == (PolicyResult("queue", WARN),)
