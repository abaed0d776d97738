"""Stored TrainJobPolicies are parsed once per (uid, resourceVersion), not on every review (``matching.parse_all``).

Every review reads every policy, so the parse is cached by the identity the apiserver gives each stored version; a
changed policy (new resourceVersion) is parsed again, an object without uid/resourceVersion (``render``'s files) is
never cached, and an unreadable policy keeps being reported, with a fresh exception each time.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from trainguard.webhook.policy import matching


def policy(name: str = "p", *, rv: str | None = "1", uid: str | None = "uid-1", max_nodes: Any = 4) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if rv is not None:
        meta["resourceVersion"] = rv
    if uid is not None:
        meta["uid"] = uid
    return {"apiVersion": "trainguard.io/v1alpha1", "kind": "TrainJobPolicy", "metadata": meta,
            "spec": {"limits": {"maxNodes": max_nodes}}}


@pytest.fixture(autouse=True)
def empty_cache():
    matching._PARSED.clear()
    yield
    matching._PARSED.clear()


def parsed(obj: dict[str, Any]):
    policies, problems = matching.parse_all({obj["metadata"]["name"]: obj})
    assert not problems, problems
    return policies[0]


def test_same_stored_version_is_parsed_once() -> None:
    obj = policy()
    first = parsed(obj)
    assert parsed(copy.deepcopy(obj)) is first  # the informer hands out a new dict per event: keyed by identity
    assert first.spec.limits.max_nodes == 4


@pytest.mark.parametrize("change", [
    {"rv": "2"},              # the policy was edited
    {"uid": "uid-2"},         # deleted and created again under the same name
])
def test_a_new_version_is_parsed_again(change: dict[str, str]) -> None:
    assert parsed(policy()).spec.limits.max_nodes == 4
    fresh = parsed(policy(max_nodes=8, **change))
    assert fresh.spec.limits.max_nodes == 8


@pytest.mark.parametrize("missing", [{"rv": None}, {"uid": None}, {"rv": ""}])
def test_objects_without_a_stored_identity_are_not_cached(missing: dict[str, Any]) -> None:
    assert parsed(policy(**missing)).spec.limits.max_nodes == 4
    assert parsed(policy(max_nodes=8, **missing)).spec.limits.max_nodes == 8
    assert not matching._PARSED


def test_an_unreadable_policy_is_reported_every_time_with_a_fresh_error() -> None:
    bad = policy(max_nodes="many")
    reports = [matching.parse_all({"p": bad})[1] for _ in range(3)]
    assert reports[0] == reports[1] == reports[2] and len(reports[0]) == 1
    assert 'TrainJobPolicy "p": spec.limits.maxNodes' in reports[0][0] and reports[0][0].endswith("(policy ignored)")
    errors = []
    for _ in range(2):
        with pytest.raises(matching.PolicyParseError) as info:
            matching._parse_cached(bad)
        errors.append(info.value)
    assert errors[0] is not errors[1]  # no traceback chain grows on a shared exception object


def test_the_cache_is_bounded() -> None:
    for i in range(matching._PARSED_MAX + 10):
        parsed(policy(rv=str(i)))
    assert len(matching._PARSED) <= matching._PARSED_MAX
