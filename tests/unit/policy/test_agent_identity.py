"""trainguard.webhook.policy.agent_identity: a trainer pod naming a dataset cache agent's ServiceAccount is found, wherever
the name comes from (the runtime's template, a TrainJob runtimePatch, the deprecated ``serviceAccount`` alias);
other ServiceAccounts are not. Pure: the merged job is built by the real ``effective_job``."""

from __future__ import annotations

import pytest

from trainguard.controller.reconcile.cache_daemonset import agent_name
from tests.unit.policy.policy_helpers import rjob, runtime, trainjob
from trainguard.webhook.policy.agent_identity import (
    AGENT_SERVICE_ACCOUNT_PREFIX,
    agent_identity_errors,
    runtime_errors,
    trainjob_errors,
)

AGENT = agent_name("imagenet")
NODE_SPEC = "replicatedJobs[node].template.spec.template.spec"


def patch_service_account(key: str, name: str) -> list[dict]:
    return [{"manager": "team-a/me", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"spec": {"template": {"spec": {key: name}}}}}]}}}}]


def test_the_prefix_is_agent_names() -> None:
    for cache in ("a", "imagenet", "c" * 52):
        assert agent_name(cache).startswith(AGENT_SERVICE_ACCOUNT_PREFIX)


@pytest.mark.parametrize("key", ["serviceAccountName", "serviceAccount"])
def test_a_runtime_patch_naming_the_agent_is_found(key: str) -> None:
    rt = runtime(rjob("node", ancestor="trainer"), kind="TrainingRuntime", namespace="team-a")
    errors = trainjob_errors(trainjob(kind="TrainingRuntime", patches=patch_service_account(key, AGENT)), rt)
    assert [e.path for e in errors] == [f"{NODE_SPEC}.{key}"]
    assert str(errors[0]) == (f'{NODE_SPEC}.{key}: Forbidden: "{AGENT}" is a dataset cache agent\'s '
                              "ServiceAccount; trainer pods may not run as it")


def test_a_runtime_naming_the_agent_is_found_in_the_runtime_and_in_every_job_built_from_it() -> None:
    rt = runtime(rjob("init"), rjob("node", ancestor="trainer", serviceAccountName=AGENT), kind="TrainingRuntime",
                 namespace="team-a")
    assert [e.path for e in runtime_errors(rt)] == [f"spec.template.spec.{NODE_SPEC}.serviceAccountName"]
    assert [e.path for e in trainjob_errors(trainjob(kind="TrainingRuntime"), rt)] == [
        f"{NODE_SPEC}.serviceAccountName"]


@pytest.mark.parametrize("name", ["default", "team-member", "trainguard-cache", "my-trainguard-cache-x"])
def test_other_service_accounts_are_fine(name: str) -> None:
    rt = runtime(rjob("node", ancestor="trainer", serviceAccountName=name), kind="TrainingRuntime", namespace="t")
    assert runtime_errors(rt) == []
    assert trainjob_errors(trainjob(kind="TrainingRuntime", patches=patch_service_account("serviceAccountName", name)),
                           rt) == []


def test_malformed_specs_find_nothing() -> None:
    assert agent_identity_errors({"replicatedJobs": [None, {"name": "x"}, {"template": {"spec": []}}]}) == []
    assert runtime_errors({"spec": {"template": {"spec": None}}}) == []
