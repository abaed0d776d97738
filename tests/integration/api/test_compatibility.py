"""Objects from the official SDK and the worked examples are accepted and read back without loss.

"Without loss" twice over: everything the client sent is in what the API server returns (only defaults and
metadata are added), and our models parse that answer and dump it back unchanged.
"""

from __future__ import annotations

import copy
import time

import pytest
import yaml
from kubeflow.trainer.backends.kubernetes.backend import KubernetesBackend
from kubeflow.trainer.constants import constants as sdk_constants
from kubeflow.trainer.types import types as sdk
from kubeflow_trainer_api import models

from api_objects import DEEPSPEED, LLM_DDP, PLAIN_BATCH, TAB_TRAIN, TORCH_DISTRIBUTED, Api, is_subset, with_changes
from trainguard.webhook.api.trainer import ClusterTrainingRuntime, TrainingRuntime, TrainJob

MODEL_BY_KIND = {"TrainJob": TrainJob, "TrainingRuntime": TrainingRuntime,
                 "ClusterTrainingRuntime": ClusterTrainingRuntime}


def round_trip(api: Api, sent: dict) -> dict:
    """Create ``sent``, read it back, and check both kinds of losslessness."""
    api.create(copy.deepcopy(sent))
    got = api.get(sent["kind"], sent["metadata"]["name"])
    assert is_subset(sent, got), f"the API server dropped or changed fields of {sent['kind']}"
    assert MODEL_BY_KIND[got["kind"]].parse(got).dump() == got
    return got


def quantity(text: str) -> models.IoK8sApimachineryPkgApiResourceQuantity:
    return models.IoK8sApimachineryPkgApiResourceQuantity(text)


def sdk_trainjob() -> models.TrainerV1alpha1TrainJob:
    """A TrainJob built only with the kubeflow-trainer-api models, using every v2.3 spec field."""
    env = [models.IoK8sApiCoreV1EnvVar(name="NCCL_DEBUG", value="INFO")]
    pod_patch = models.TrainerV1alpha1PodSpecPatch(
        nodeSelector={"pool": "gpu"},
        tolerations=[models.IoK8sApiCoreV1Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")],
        containers=[models.TrainerV1alpha1ContainerPatch(name="node", env=env)],
        serviceAccountName="trainer",
    )
    return models.TrainerV1alpha1TrainJob(
        apiVersion="trainer.kubeflow.org/v1alpha1", kind="TrainJob",
        metadata=models.IoK8sApimachineryPkgApisMetaV1ObjectMeta(name="sdk-models", labels={"team": "a"}),
        spec=models.TrainerV1alpha1TrainJobSpec(
            runtimeRef=models.TrainerV1alpha1RuntimeRef(name="torch-distributed"),
            initializer=models.TrainerV1alpha1Initializer(
                dataset=models.TrainerV1alpha1DatasetInitializer(storageUri="hf://tatsu-lab/alpaca"),
                model=models.TrainerV1alpha1ModelInitializer(
                    storageUri="hf://meta-llama/Llama-3.2-1B",
                    secretRef=models.IoK8sApiCoreV1LocalObjectReference(name="hf-token"))),
            trainer=models.TrainerV1alpha1Trainer(
                image="ghcr.io/acme/train:1.0", command=["torchrun", "train.py"], args=["--lr=1e-4"], env=env,
                numNodes=4, numProcPerNode=8,
                resourcesPerNode=models.IoK8sApiCoreV1ResourceRequirements(
                    requests={"cpu": quantity("32"), "memory": quantity("256Gi")},
                    limits={"nvidia.com/gpu": quantity("8")})),
            runtimePatches=[models.TrainerV1alpha1RuntimePatch(
                manager="acme.io/platform",
                trainingRuntimeSpec=models.TrainerV1alpha1TrainingRuntimeSpecPatch(
                    template=models.TrainerV1alpha1JobSetTemplatePatch(
                        spec=models.TrainerV1alpha1JobSetSpecPatch(replicatedJobs=[
                            models.TrainerV1alpha1ReplicatedJobPatch(
                                name="node", template=models.TrainerV1alpha1JobTemplatePatch(
                                    spec=models.TrainerV1alpha1JobSpecPatch(
                                        template=models.TrainerV1alpha1PodTemplatePatch(spec=pod_patch))))]))))],
            suspend=True, activeDeadlineSeconds=3600, managedBy="trainer.kubeflow.org/trainjob-controller",
        ),
    )


def test_trainjob_from_sdk_models(cluster, namespace):
    api = Api(cluster.api_client(), namespace)
    got = round_trip(api, sdk_trainjob().to_dict())
    # ...and the SDK's own models can read what our CRD stored.
    back = models.TrainerV1alpha1TrainJob.from_dict(got)
    assert back is not None and back.spec.trainer.num_nodes == 4


def test_runtime_from_sdk_models(cluster, namespace):
    api = Api(cluster.api_client(), namespace)
    rt = models.TrainerV1alpha1TrainingRuntime(
        apiVersion="trainer.kubeflow.org/v1alpha1", kind="TrainingRuntime",
        metadata=models.IoK8sApimachineryPkgApisMetaV1ObjectMeta(name="sdk-runtime"),
        spec=models.TrainerV1alpha1TrainingRuntimeSpec(
            mlPolicy=models.TrainerV1alpha1MLPolicy(numNodes=2, torch=models.TrainerV1alpha1TorchMLPolicySource(
                envInjection=models.TrainerV1alpha1EnvInjection(targets=[
                    models.TrainerV1alpha1EnvInjectionTarget(jobName="node", containerNames=["sidecar"])]))),
            podGroupPolicy=models.TrainerV1alpha1PodGroupPolicy(
                coscheduling=models.TrainerV1alpha1CoschedulingPodGroupPolicySource(scheduleTimeoutSeconds=30)),
            template=models.TrainerV1alpha1JobSetTemplateSpec(spec=models.JobsetV1alpha2JobSetSpec(replicatedJobs=[
                models.JobsetV1alpha2ReplicatedJob(name="node", template=models.IoK8sApiBatchV1JobTemplateSpec(
                    spec=models.IoK8sApiBatchV1JobSpec(template=models.IoK8sApiCoreV1PodTemplateSpec(
                        spec=models.IoK8sApiCoreV1PodSpec(containers=[
                            models.IoK8sApiCoreV1Container(name="node", image="pytorch/pytorch")])))))])),
        ),
    )
    round_trip(api, rt.to_dict())


# --- the kubeflow SDK's TrainerClient request bodies (built exactly as TrainerClient.train builds them) ----
def sdk_train_func():
    """A training function the SDK serialises into the trainer command."""
    import torch  # noqa: F401  (never runs here: the SDK only reads this source)

    print("training")


def sdk_runtime(trainer_type: sdk.TrainerType, framework: str, name: str) -> sdk.Runtime:
    trainer = sdk.RuntimeTrainer(trainer_type=trainer_type, framework=framework, num_nodes=1, device="gpu",
                                 device_count="8", image="ghcr.io/kubeflow/trainer/runtime")
    trainer.set_command(sdk_constants.TORCH_COMMAND)
    return sdk.Runtime(name=name, trainer=trainer, kind=sdk.RuntimeKind.CLUSTER_TRAINING_RUNTIME)


def sdk_request_body(name: str, runtime: sdk.Runtime, trainer, initializer) -> dict:
    """TrainerClient.train's body: ``_get_trainjob_spec`` with a Runtime object makes no API call."""
    backend = object.__new__(KubernetesBackend)  # no kubeconfig is loaded: nothing here talks to a cluster
    spec = KubernetesBackend._get_trainjob_spec(backend, runtime=runtime, trainer=trainer, initializer=initializer)
    job = models.TrainerV1alpha1TrainJob(
        apiVersion=sdk_constants.API_VERSION, kind=sdk_constants.TRAINJOB_KIND,
        metadata=models.IoK8sApimachineryPkgApisMetaV1ObjectMeta(name=name), spec=spec)
    return job.to_dict()


SDK_JOBS = [
    ("custom-trainer", lambda: sdk_request_body(
        "sdk-custom", sdk_runtime(sdk.TrainerType.CUSTOM_TRAINER, "torch", "torch-distributed"),
        sdk.CustomTrainer(func=sdk_train_func, func_args={"lr": 0.001}, num_nodes=3,
                          resources_per_node={"gpu": 2, "cpu": 8, "memory": "32Gi"},
                          packages_to_install=["transformers"], env={"WANDB_MODE": "offline"}),
        sdk.Initializer(dataset=sdk.HuggingFaceDatasetInitializer(storage_uri="hf://tatsu-lab/alpaca")))),
    ("builtin-trainer", lambda: sdk_request_body(
        "sdk-builtin", sdk_runtime(sdk.TrainerType.BUILTIN_TRAINER, "torchtune", "torchtune-llama3.2-1b"),
        sdk.BuiltinTrainer(config=sdk.TorchTuneConfig(epochs=1, batch_size=4, num_nodes=1,
                                                      resources_per_node={"gpu": 1})),
        sdk.Initializer(dataset=sdk.HuggingFaceDatasetInitializer(storage_uri="hf://tatsu-lab/alpaca"),
                        model=sdk.HuggingFaceModelInitializer(storage_uri="hf://meta-llama/Llama-3.2-1B-Instruct")))),
]


@pytest.mark.parametrize("case_id, body", SDK_JOBS, ids=[c[0] for c in SDK_JOBS])
def test_trainer_client_request_bodies(cluster, namespace, case_id, body):
    api = Api(cluster.api_client(), namespace)
    sent = body()
    assert sent["spec"]["trainer"]  # the SDK really produced a trainer override
    got = round_trip(api, sent)
    assert TrainJob.parse(got).spec.runtime_ref.kind == "ClusterTrainingRuntime"  # the CRD's default, stored


# --- worked examples ------------------------------------------------------------------------------------------
EXAMPLES = [("torch-distributed", TORCH_DISTRIBUTED), ("llm-ddp", LLM_DDP),
            ("plain-batch", PLAIN_BATCH), ("tab-train", TAB_TRAIN), ("deepspeed-mpi", DEEPSPEED)]


@pytest.mark.parametrize("case_id, obj", EXAMPLES, ids=[c[0] for c in EXAMPLES])
def test_reference_examples_apply_cleanly(cluster, namespace, case_id, obj):
    """Applied with kubectl --server-side as users do; read back and parsed without loss."""
    sent = obj
    if obj["kind"] == "ClusterTrainingRuntime":
        sent = with_changes(obj, ("metadata.name", f"{obj['metadata']['name']}-{namespace[-6:]}"))
    cluster.kubectl("apply", "--server-side", "-n", namespace, "-f", "-", input=yaml.safe_dump(sent))
    got = Api(cluster.api_client(), namespace).get(sent["kind"], sent["metadata"]["name"])
    assert is_subset(sent, got)
    parsed = MODEL_BY_KIND[got["kind"]].parse(got)
    assert parsed.dump() == got
    if got["kind"] != "TrainJob":
        assert parsed.spec.ml_policy is not None


def test_all_crds_apply_and_kubectl_explain_describes_fields(cluster):
    """`kubectl explain` reads the published OpenAPI; it appears shortly after the CRD is established."""
    deadline = time.monotonic() + 60
    while True:
        proc = cluster.kubectl("explain", "trainjob.spec.trainer", check=False)
        if proc.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert proc.returncode == 0, proc.stderr
    assert "trainer defines the configuration of the trainer." in proc.stdout  # upstream's description
    assert "numNodes" in proc.stdout and "resourcesPerNode" in proc.stdout
    for resource, text in [("trainjob.spec.runtimeRef.kind", "Defaults to ClusterTrainingRuntime."),
                           ("clustertrainingruntime.spec.mlPolicy", "ML-specific parameters for the model training"),
                           ("trainjobpolicy.spec.priority", "higher first, ties by name"),
                           ("datasetcache.spec.memoryBudget", "Most memory the cache may hold per node")]:
        out = cluster.kubectl("explain", resource).stdout
        assert text in " ".join(out.split()), out
    crds = cluster.kubectl("get", "crd", "-o", "name").stdout.split()
    for name in ("trainjobs.trainer.kubeflow.org", "trainingruntimes.trainer.kubeflow.org",
                 "clustertrainingruntimes.trainer.kubeflow.org", "trainjobpolicies.trainguard.io",
                 "datasetcaches.trainguard.io"):
        assert f"customresourcedefinition.apiextensions.k8s.io/{name}" in crds
