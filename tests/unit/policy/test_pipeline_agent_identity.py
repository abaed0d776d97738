"""The pipeline calls ``agent_identity``: a TrainJob (runtimePatch or runtime template) or a runtime whose pods would
run as a dataset cache agent's ServiceAccount is denied naming the field; on UPDATE only what the update brings in."""

from __future__ import annotations

from tests.unit.policy.policy_helpers import NOW, rjob, runtime, trainjob
from trainguard.webhook.policy.pipeline import validate_cluster_training_runtime, validate_training_runtime, validate_trainjob
from trainguard.webhook.policy.verdict import AdmissionInput, ClusterSnapshot

AGENT = "trainguard-cache-imagenet"
NODE_SPEC = "replicatedJobs[node].template.spec.template.spec"
PATCH = [{"manager": "team-a/me", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
    {"name": "node", "template": {"spec": {"template": {"spec": {"serviceAccountName": AGENT}}}}}]}}}}]


def snap(rt) -> ClusterSnapshot:
    return ClusterSnapshot(training_runtimes={("team-a", "torch-distributed"): rt})


def review(op, obj, old=None):
    return AdmissionInput(op, obj, old, NOW)


def test_trainjob_patch_naming_the_agent_is_denied_and_the_neighbour_admitted():
    rt = runtime(rjob("node", ancestor="trainer"), kind="TrainingRuntime", namespace="team-a")
    v = validate_trainjob(review("CREATE", trainjob(kind="TrainingRuntime", patches=PATCH)), snap(rt))
    assert not v.allowed and v.reason == "AgentIdentity"
    assert v.message.startswith(f'{NODE_SPEC}.serviceAccountName: Forbidden: "{AGENT}" is a dataset cache agent')
    assert validate_trainjob(review("CREATE", trainjob(kind="TrainingRuntime")), snap(rt)).allowed


def test_update_adding_the_patch_is_denied_but_an_old_job_keeps_its_updates():
    rt = runtime(rjob("node", ancestor="trainer"), kind="TrainingRuntime", namespace="team-a")
    plain, bad = trainjob(kind="TrainingRuntime", suspend=True), trainjob(kind="TrainingRuntime", patches=PATCH)
    assert not validate_trainjob(review("UPDATE", bad, plain), snap(rt)).allowed
    resumed = trainjob(kind="TrainingRuntime", patches=PATCH, suspend=False)
    assert validate_trainjob(review("UPDATE", resumed, bad), snap(rt)).allowed


def test_runtimes_naming_the_agent_are_denied():
    rt = runtime(rjob("node", ancestor="trainer", serviceAccountName=AGENT))
    for validate, kind in ((validate_cluster_training_runtime, "ClusterTrainingRuntime"),
                           (validate_training_runtime, "TrainingRuntime")):
        rt["kind"] = kind
        v = validate(review("CREATE", rt), ClusterSnapshot())
        assert not v.allowed
        assert v.message.startswith(f"spec.template.spec.{NODE_SPEC}.serviceAccountName: Forbidden"), v.message
