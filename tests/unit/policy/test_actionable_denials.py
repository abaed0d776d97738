"""Denials a data scientist can act on (issue 24, part 5): a finding about a value the user never wrote (it comes
from the runtime) says which runtime it comes from, whose it is, and what the user can change; a finding about the
user's own field names that field and adds nothing."""

from __future__ import annotations

import pytest

from policy_helpers import NOW, policy, rjob, runtime, trainjob
from trainguard.webhook.policy.pipeline import validate_trainjob
from trainguard.webhook.policy.verdict import AdmissionInput, ClusterSnapshot

ADMIN_RUNTIME = 'the value comes from ClusterTrainingRuntime "torch-distributed" (an admin\'s runtime), not from your TrainJob: '


def denial(job: dict, rt: dict, **limits) -> str:
    pol = policy("p", mode="Enforce", selector={"namespaceSelector": {}}, limits=limits)
    if rt["kind"] == "TrainingRuntime":
        snapshot = ClusterSnapshot(training_runtimes={("team-a", rt["metadata"]["name"]): rt}, policies={"p": pol},
                                   namespace_labels={"team-a": {}})
    else:
        snapshot = ClusterSnapshot(cluster_training_runtimes={rt["metadata"]["name"]: rt}, policies={"p": pol},
                                   namespace_labels={"team-a": {}})
    verdict = validate_trainjob(AdmissionInput("CREATE", job, None, NOW, namespace="team-a"), snapshot)
    assert not verdict.allowed
    return verdict.message or ""


def test_a_runtime_image_says_where_it_comes_from_and_that_spec_trainer_image_overrides_it():
    message = denial(trainjob(), runtime(), allowedImagePrefixes=["ghcr.io/acme/"])
    assert ('spec.runtimeRef: Invalid value: "python:3.12": image of container node in replicatedJob node must start '
            'with one of [ghcr.io/acme/] (TrainJobPolicy "p")' + "; " + ADMIN_RUNTIME
            + "set spec.trainer.image to an allowed image") in message, message


def test_an_image_the_trainjob_cannot_change_says_so():
    rt = runtime(rjob("dataset-initializer", ancestor="dataset-initializer", containers=("dataset-initializer",)),
                 rjob("node", ancestor="trainer"))
    job = trainjob(trainer={"image": "ghcr.io/acme/train:1"})
    message = denial(job, rt, allowedImagePrefixes=["ghcr.io/acme/"])
    assert ("image of container dataset-initializer in replicatedJob dataset-initializer must start with one of "
            "[ghcr.io/acme/]") in message, message
    assert ADMIN_RUNTIME + "a TrainJob cannot change that container's image: use another runtime, or ask the " \
                           "runtime's owner to change it" in message, message
    assert message.count("the value comes from") == 1, "the user's own trainer image passes and is not mentioned"


def test_the_runtimes_node_count_says_which_field_to_set():
    rt = runtime(ml_policy={"numNodes": 8, "torch": {}})
    message = denial(trainjob(), rt, maxNodes=4)
    assert ('spec.runtimeRef: Invalid value: "torch-distributed": 8 nodes exceed maxNodes 4 of TrainJobPolicy "p"; '
            + ADMIN_RUNTIME + "set spec.trainer.numNodes to at most 4") in message, message


def test_a_namespace_runtime_is_named_as_such():
    rt = runtime(kind="TrainingRuntime", namespace="team-a", ml_policy={"numNodes": 8, "torch": {}})
    message = denial(trainjob(kind="TrainingRuntime"), rt, maxNodes=4)
    assert ('the value comes from TrainingRuntime "torch-distributed" (a runtime of this namespace), not from your '
            "TrainJob: set spec.trainer.numNodes to at most 4") in message, message


@pytest.mark.parametrize(("job", "limits", "field"), [
    (trainjob(trainer={"numNodes": 8}), {"maxNodes": 4}, "spec.trainer.numNodes: Invalid value: 8"),
    (trainjob(trainer={"image": "docker.io/me/x:1"}), {"allowedImagePrefixes": ["python:"]},
     'spec.trainer.image: Invalid value: "docker.io/me/x:1"'),
], ids=["numNodes", "image"])
def test_the_users_own_field_is_named_without_a_runtime_note(job, limits, field):
    message = denial(job, runtime(), **limits)
    assert field in message and "the value comes from" not in message, message
