"""Family 4: the official ``kubeflow`` SDK (0.5) as the client: ``TrainerClient`` against the test cluster creates a
TrainJob through the registered webhook; the stored object carries the policy's mutations and ``get_job()`` reads it
back; a policy denial surfaces through the SDK as the apiserver's 403.

The SDK's Kubernetes backend reads the runtime (``trainer.kubeflow.org/framework`` label, a replicatedJob with the
ancestor label and a ``node`` container with an image), so the test creates a ClusterTrainingRuntime shaped like
upstream's ``torch-distributed``. ``verify_backend`` only logs when the ``kubeflow-trainer-public`` ConfigMap is
absent (no Trainer control plane here), and ``get_job`` lists pods (none: no controllers run), so status is
"Created" with no steps.
"""

from __future__ import annotations

import json

import pytest
from kubernetes import client as k8s

from policy_cluster import POLICY_MANAGER, Kube, policy, rjob, runtime, trainjob, unique

QUEUE = "kueue.x-k8s.io/queue-name"
PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
LEVELS = [{"nodeLabel": "kubernetes.io/hostname", "gpusPerDomain": 8},
          {"nodeLabel": "nvidia.com/gpu.clique", "gpusPerDomain": 72}]


def torch_distributed(name: str, namespace: str) -> dict:
    """Upstream's torch-distributed (``mlPolicy: {numNodes: 1, torch: {}}``), under a unique name."""
    return runtime(name, namespace, ml_policy={"numNodes": 1, "torch": {}},
                   jobs=[rjob("node", ancestor="trainer", image="pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime")])


@pytest.fixture
def trainer_client(cluster, namespace: str, admission):
    from kubeflow.common.types import KubernetesBackendConfig
    from kubeflow.trainer import TrainerClient

    configuration = k8s.Configuration()
    from kubernetes import config

    config.load_kube_config(config_file=cluster.kubeconfig, client_configuration=configuration)
    return TrainerClient(KubernetesBackendConfig(namespace=namespace, client_configuration=configuration))


def test_trainer_client_train_through_the_webhook(kube: Kube, namespace: str, trainer_client) -> None:
    from kubeflow.trainer import CustomTrainerContainer

    rt, pol = unique("torch-distributed"), unique("pol")
    kube.create(torch_distributed(rt, namespace))
    kube.create(policy(pol, namespace, {"scheduling": {"kueue": {"queueName": "team-q"}},
                                        "topology": {"levels": LEVELS}, "limits": {"maxNodes": 4}}))
    kube.wait_policy(trainjob(unique("probe"), namespace, rt), pol)

    runtime_obj = trainer_client.get_runtime(rt)  # the SDK's own read of the runtime
    assert runtime_obj.trainer.framework == "torch"
    name = trainer_client.train(runtime=runtime_obj, trainer=CustomTrainerContainer(
        image="ghcr.io/acme/train:1", num_nodes=2, resources_per_node={"gpu": 8}, env={"NCCL_DEBUG": "INFO"}))

    stored = kube.get("trainjob", name)
    assert stored["metadata"]["labels"][QUEUE] == "team-q"
    assert stored["spec"]["suspend"] is True
    [own] = [p for p in stored["spec"]["runtimePatches"] if p["manager"] == POLICY_MANAGER]
    [node] = own["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert node["name"] == "node"
    assert node["template"]["spec"]["template"]["metadata"]["annotations"] == {PREFERRED: "nvidia.com/gpu.clique"}
    assert own["time"].endswith("Z")
    assert stored["spec"]["trainer"]["resourcesPerNode"]["limits"]["nvidia.com/gpu"] in (8, "8")

    job = trainer_client.get_job(name)
    assert job.name == name
    assert job.runtime.name == rt
    assert job.num_nodes == 2
    assert job.status == "Created" and job.steps == []
    assert name in [j.name for j in trainer_client.list_jobs()]


def test_trainer_client_sees_the_policy_denial(kube: Kube, namespace: str, trainer_client) -> None:
    from kubeflow.trainer import CustomTrainerContainer

    rt, pol = unique("torch-distributed"), unique("pol")
    kube.create(torch_distributed(rt, namespace))
    kube.create(policy(pol, namespace, {"limits": {"maxNodes": 4}}))
    kube.wait_policy(trainjob(unique("probe"), namespace, rt), pol)
    runtime_obj = trainer_client.get_runtime(rt)
    with pytest.raises(RuntimeError) as err:
        trainer_client.train(runtime=runtime_obj, trainer=CustomTrainerContainer(image="ghcr.io/acme/train:1", num_nodes=8))
    cause = err.value.__cause__
    assert isinstance(cause, k8s.ApiException) and cause.status == 403, repr(cause)
    message = json.loads(cause.body)["message"]
    assert message.startswith('admission webhook "validator.trainjob.trainer.kubeflow.org" denied the request: ')
    assert f'spec.trainer.numNodes: Invalid value: 8: 8 nodes exceed maxNodes 4 of TrainJobPolicy "{pol}"' in message
    assert trainer_client.list_jobs() == []


def _train_function() -> None:  # the SDK ships this function's source in the trainer's command
    print("training")


def test_a_denial_of_the_runtimes_image_tells_the_sdk_user_what_to_change(
        kube: Kube, namespace: str, trainer_client) -> None:
    """``CustomTrainer(func=...)`` runs on the runtime's image, which the user never chose: the denial the SDK raises
    says it comes from the admin's runtime and that ``spec.trainer.image`` (CustomTrainerContainer's image) can
    replace it (issue 24, part 5)."""
    from kubeflow.trainer import CustomTrainer

    rt, pol = unique("torch-distributed"), unique("pol")
    kube.create(torch_distributed(rt, namespace))
    kube.create(policy(pol, namespace, {"limits": {"allowedImagePrefixes": ["ghcr.io/acme/"]}}))
    kube.wait_policy(trainjob(unique("probe"), namespace, rt), pol)
    with pytest.raises(RuntimeError) as err:
        trainer_client.train(runtime=trainer_client.get_runtime(rt), trainer=CustomTrainer(func=_train_function))
    cause = err.value.__cause__
    assert isinstance(cause, k8s.ApiException) and cause.status == 403, repr(cause)
    message = json.loads(cause.body)["message"]  # what the README tells SDK users to print
    assert ('spec.runtimeRef: Invalid value: "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime": image of container '
            f'node in replicatedJob node must start with one of [ghcr.io/acme/] (TrainJobPolicy "{pol}"); the value '
            f'comes from ClusterTrainingRuntime "{rt}" (an admin\'s runtime), not from your TrainJob: set '
            "spec.trainer.image to an allowed image") in message, message
    assert trainer_client.list_jobs() == []
