"""trainguard.controller.reconcile.cache_agent_policy without a cluster: the chart template is current, the username pattern matches
every name ``agent_name()`` produces and nothing else, and the policy fails closed. Its enforcement is tested
against the real apiserver in tests/security/test_cache_agent_identity.py and tests/integration/chart/."""

from __future__ import annotations

import re

import pytest

from trainguard.controller.reconcile import cache_agent_policy as agent_policy
from trainguard.controller.reconcile.cache_agent_policy import AGENT_USERNAME_PATTERN, agent_admission_policy
from trainguard.controller.reconcile.cache_daemonset import agent_name


def test_chart_template_is_generated_from_the_function() -> None:
    assert agent_policy.main(["--check"]) == 0, "run: .venv/bin/python -m trainguard.controller.reconcile.cache_agent_policy"


@pytest.mark.parametrize("cache", ["a", "imagenet", "c" * 52, "x" * 63, "web-text.v2"])
def test_every_agent_service_account_matches(cache: str) -> None:
    assert re.fullmatch(AGENT_USERNAME_PATTERN, f"system:serviceaccount:team-a:{agent_name(cache)}")


@pytest.mark.parametrize("username", [
    "system:serviceaccount:team-a:team-member",
    "system:serviceaccount:trainguard-system:trainguard-controller",
    "system:serviceaccount:trainguard-system:tg-trainguard-webhook",
    "system:serviceaccount:team-a:my-trainguard-cache-x",
    "system:serviceaccount:team-a:trainguard-cache",
    "trainguard-cache-x",  # a user, not a ServiceAccount
    "system:serviceaccount:team-a:trainguard-cache-x:extra",
])
def test_other_users_are_not_matched(username: str) -> None:
    assert not re.fullmatch(AGENT_USERNAME_PATTERN, username)


def test_the_policy_fails_closed_and_denies() -> None:
    policy, binding = agent_admission_policy()
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert "matchResources" not in binding["spec"]  # every namespace: caches live in users' namespaces
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rules == [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE", "DELETE"],
                      "resources": ["pods", "pods/*"]}]
