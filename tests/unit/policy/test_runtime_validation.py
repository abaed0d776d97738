"""Upstream's runtime webhooks and trainguard's stricter runtime checks: one rejected and one accepted case per rule."""

from __future__ import annotations

import pytest

from policy_helpers import NOW, rjob, runtime
from trainguard.webhook.policy.pipeline import validate_cluster_training_runtime, validate_training_runtime
from trainguard.webhook.policy.verdict import AdmissionInput, ClusterSnapshot

RJ = "spec.template.spec.replicatedJobs"


def review(obj, operation="CREATE", old=None):
    return AdmissionInput(operation, obj, old, NOW)


CASES = [
    # (rule, runtime, expected message or None when accepted)
    ("trainer replicas must be 1", runtime(rjob("node", ancestor="trainer", replicas=2)),
     f"{RJ}[0].replicas: Invalid value: 2: always must be 1"),
    ("trainer replicas 1", runtime(rjob("node", ancestor="trainer", replicas=1)), None),
    ("initializer replicas must be 1",
     runtime(rjob("dataset-initializer", ancestor="dataset-initializer", containers=("dataset-initializer",),
                  replicas=3), rjob("node", ancestor="trainer")),
     f"{RJ}[0].replicas: Invalid value: 3: always must be 1"),
    ("trainer job needs container node", runtime(rjob("node", ancestor="trainer", containers=("main",))),
     f'{RJ}[0].template.spec.template.spec.containers: Invalid value: [{{"name":"main","image":"python:3.12","resources":{{}}}}]: '
     "must contain the required container for the ancestor: trainer"),
    ("model initializer needs its container",
     runtime(rjob("model-initializer", ancestor="model-initializer", containers=("x",)), rjob("node", ancestor="trainer")),
     f'{RJ}[0].template.spec.template.spec.containers: Invalid value: [{{"name":"x","image":"python:3.12","resources":{{}}}}]: '
     "must contain the required container for the ancestor: model-initializer"),
    ("unknown ancestor values are ignored",
     runtime(rjob("sidecar", ancestor="something-else", containers=("x",), replicas=4), rjob("node", ancestor="trainer")),
     None),
    ("duplicate replicatedJob names", runtime(rjob("node", ancestor="trainer"), rjob("node")),
     f'{RJ}[1].name: Duplicate value: "node"'),
    ("dependsOn a missing job", runtime(rjob("node", ancestor="trainer", depends_on=("dataset-initializer",))),
     f'{RJ}[0].dependsOn[0].name: Invalid value: "dataset-initializer": must name a replicatedJob defined before '
     "node; this one does not exist (replicatedJobs: node)"),
    ("dependsOn a later job", runtime(rjob("node", ancestor="trainer", depends_on=("prep",)), rjob("prep", containers=("p",))),
     f'{RJ}[0].dependsOn[0].name: Invalid value: "prep": must name a replicatedJob defined before node; '
     "this one is defined after this job (replicatedJobs: node, prep)"),
    ("dependsOn an earlier job",
     runtime(rjob("prep", containers=("p",)), rjob("node", ancestor="trainer", depends_on=("prep",))), None),
    ("torch needs a node job", runtime(rjob("trainer", containers=("t",))),
     f'{RJ}: Invalid value: ["trainer"]: mlPolicy.torch needs a replicatedJob named "node" '
     "(its pods are addressed as <trainjob>-node-0-0)"),
    ("plain ML does not need a node job", runtime(rjob("main", containers=("t",)), ml_policy={"numNodes": 2}), None),
    ("only one trainer job",
     runtime(rjob("node", ancestor="trainer"), rjob("launcher", ancestor="trainer", containers=("node",))),
     f'{RJ}[1].template.metadata.labels[trainer.kubeflow.org/trainjob-ancestor-step]: Invalid value: "trainer": '
     "only one replicatedJob may be the trainer; node already is"),
    ("one pod group policy", runtime(pod_group_policy={"coscheduling": {}, "volcano": {}}),
     "spec.podGroupPolicy: Forbidden: only one of coscheduling and volcano may be set"),
]


@pytest.mark.parametrize(("rule", "obj", "message"), CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("validate", [validate_training_runtime, validate_cluster_training_runtime])
def test_runtime_rules(rule, obj, message, validate):
    verdict = validate(review(obj), ClusterSnapshot())
    assert verdict.allowed is (message is None), verdict.message
    assert verdict.message == message


def test_errors_are_aggregated_in_order():
    obj = runtime(rjob("node", ancestor="trainer", replicas=2, containers=("x",)))
    verdict = validate_training_runtime(review(obj), ClusterSnapshot())
    assert verdict.message.startswith(f"[{RJ}[0].replicas: Invalid value: 2: always must be 1, {RJ}[0].template")


def test_training_runtime_updates_are_validated_unlike_upstream():
    # Upstream's TrainingRuntime ValidateUpdate returns nil; trainguard refuses a broken runtime on update too.
    bad = runtime(rjob("node", ancestor="trainer", replicas=2), kind="TrainingRuntime", namespace="team-a")
    good = runtime(kind="TrainingRuntime", namespace="team-a")
    assert not validate_training_runtime(review(bad, "UPDATE", good), ClusterSnapshot()).allowed
    assert validate_training_runtime(review(good, "UPDATE", bad), ClusterSnapshot()).allowed


DEPRECATED = {"trainer.kubeflow.org/support": "deprecated"}


def test_deprecated_cluster_runtime_warns_on_create_only():
    obj = runtime(labels=DEPRECATED, name="old-torch")
    created = validate_cluster_training_runtime(review(obj), ClusterSnapshot())
    assert created.allowed
    assert created.warnings == (
        'ClusterTrainingRuntime "old-torch" is deprecated and will be removed in a future release of Kubeflow '
        "Trainer. See runtime deprecation policy: "
        "https://trainer.kubeflow.org/en/latest/operator-guides/runtime.html#runtime-deprecation-policy",)
    assert validate_cluster_training_runtime(review(obj, "UPDATE", obj), ClusterSnapshot()).warnings == ()
    assert validate_cluster_training_runtime(review(runtime()), ClusterSnapshot()).warnings == ()


def test_delete_is_always_allowed():
    bad = runtime(rjob("node", ancestor="trainer", replicas=2))
    assert validate_training_runtime(review(bad, "DELETE"), ClusterSnapshot()).allowed
