"""The validating TrainJob review builds the effective job once: the agent-identity check and every matching
policy's limits and topology read the same build (it is the costly part of a review), and the verdicts stay what
they were: a patch naming a cache agent's ServiceAccount and a job over a policy's limit are still denied."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.policy.policy_helpers import NOW, rjob, runtime, trainjob
from trainguard.webhook.policy import framework
from trainguard.webhook.policy.pipeline import validate_trainjob
from trainguard.webhook.policy.verdict import AdmissionInput, ClusterSnapshot

GPU = {"limits": {"nvidia.com/gpu": 8}}
AGENT_PATCH = [{"manager": "team-a/me", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
    {"name": "node", "template": {"spec": {"template": {"spec": {"serviceAccountName": "trainguard-cache-x"}}}}}]}}}}]


def policy(max_nodes: int) -> dict[str, Any]:
    return {"apiVersion": "trainguard.io/v1alpha1", "kind": "TrainJobPolicy",
            "metadata": {"name": "limits", "uid": "u1", "resourceVersion": str(max_nodes)},
            "spec": {"limits": {"maxNodes": max_nodes}}}


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = framework.effective_job_or_none

    def counting(trainjob: Any, rt: Any) -> Any:
        calls.append(1)
        return real(trainjob, rt)

    monkeypatch.setattr(framework, "effective_job_or_none", counting)
    return calls


@pytest.mark.parametrize("max_nodes, patches, allowed, reason", [
    (8, None, True, None),
    (2, None, False, "PolicyLimits"),
    (8, AGENT_PATCH, False, "AgentIdentity"),
])
def test_create_builds_the_job_once(builds: list[int], max_nodes: int, patches: Any, allowed: bool,
                                    reason: str | None) -> None:
    rt = runtime(rjob("node", ancestor="trainer"), kind="TrainingRuntime", namespace="team-a")
    snapshot = ClusterSnapshot(training_runtimes={("team-a", "torch-distributed"): rt},
                               policies={"limits": policy(max_nodes)})
    obj = trainjob(kind="TrainingRuntime", patches=patches, trainer={"numNodes": 4, "resourcesPerNode": GPU})
    verdict = validate_trainjob(AdmissionInput("CREATE", obj, None, NOW), snapshot)
    assert (verdict.allowed, verdict.reason) == (allowed, reason), verdict.message
    assert len(builds) == 1
