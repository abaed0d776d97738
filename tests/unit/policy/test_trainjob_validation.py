"""The validating pipeline for TrainJobs: upstream's runtime lookup, plugin rules (via trainguard.webhook.runtime),
DatasetCache reference, policy limits and topology fit (Enforce denies, Audit warns).
One rejected and one accepted case per rule."""

from __future__ import annotations

import pytest

from policy_helpers import GPU_LEVELS, NOW, policy, runtime, trainjob
from trainguard.webhook.policy.pipeline import validate_trainjob
from trainguard.webhook.policy.verdict import AdmissionInput, ClusterSnapshot

RT = runtime()
GPU = {"limits": {"nvidia.com/gpu": 8}, "requests": {"cpu": "16"}}


def snap(*policies, caches=(), **kw):
    defaults = dict(cluster_training_runtimes={"torch-distributed": RT},
                    training_runtimes={("team-a", "ns-rt"): runtime(kind="TrainingRuntime", name="ns-rt", namespace="team-a")},
                    policies={p["metadata"]["name"]: p for p in policies},
                    dataset_caches={("team-a", c): {"metadata": {"name": c}} for c in caches})
    defaults.update(kw)
    return ClusterSnapshot(**defaults)


def check(obj, snapshot, operation="CREATE", old=None):
    return validate_trainjob(AdmissionInput(operation, obj, old, NOW), snapshot)


def test_unsupported_runtime_kind():
    v = check(trainjob(kind="Runtime"), snap())
    assert (v.allowed, v.message) == (False, "unsupported runtime: Runtime.trainer.kubeflow.org")


@pytest.mark.parametrize(
    ("case", "obj", "message"),
    [
        ("missing ClusterTrainingRuntime keeps the capitalised path", trainjob(runtime_name="nope"),
         'spec.RuntimeRef: Invalid value: {"name":"nope","apiGroup":"trainer.kubeflow.org","kind":'
         '"ClusterTrainingRuntime"}: ClusterTrainingRuntime.trainer.kubeflow.org "nope" not found: '
         "specified clusterTrainingRuntime must be created before the TrainJob is created"),
        ("missing TrainingRuntime", trainjob(runtime_name="nope", kind="TrainingRuntime"),
         'spec.runtimeRef: Invalid value: {"name":"nope","apiGroup":"trainer.kubeflow.org","kind":"TrainingRuntime"}: '
         'TrainingRuntime.trainer.kubeflow.org "nope" not found: '
         "specified trainingRuntime must be created before the TrainJob is created"),
        ("existing ClusterTrainingRuntime", trainjob(), None),
        ("existing TrainingRuntime in the namespace", trainjob(runtime_name="ns-rt", kind="TrainingRuntime"), None),
    ],
)
def test_runtime_lookup(case, obj, message):
    v = check(obj, snap())
    assert v.message == message, case


def test_deprecated_cluster_runtime_warning():
    rt = runtime(labels={"trainer.kubeflow.org/support": "deprecated"})
    v = check(trainjob(), snap(cluster_training_runtimes={"torch-distributed": rt}))
    assert v.allowed and v.warnings[0].startswith('Referenced ClusterTrainingRuntime "torch-distributed" is deprecated')


def test_plugin_rules_come_from_the_runtime_framework():
    v = check(trainjob(trainer={"env": [{"name": "PET_NNODES", "value": "3"}]}), snap())
    assert not v.allowed and v.reason == "UpstreamValidation"
    assert v.message.startswith("spec.trainer.env: Invalid value:")
    assert "must not have reserved envs" in v.message


@pytest.mark.parametrize(("case", "annotation", "caches", "allowed"), [
    ("cache exists", "imagenet", ("imagenet",), True),
    ("cache missing", "imagenet", ("coco",), False),
    ("no annotation", None, (), True),
])
def test_dataset_cache_reference(case, annotation, caches, allowed):
    ann = {"trainguard.io/dataset-cache": annotation} if annotation else None
    v = check(trainjob(annotations=ann), snap(caches=caches))
    assert v.allowed is allowed, case
    if not allowed:
        assert v.message == ('metadata.annotations[trainguard.io/dataset-cache]: Invalid value: "imagenet": no '
                             'DatasetCache "imagenet" in namespace "team-a"; create it first or name one of: coco')


LIMIT_CASES = [
    # (case, limits, trainer, message fragment or None)
    ("max nodes exceeded", {"maxNodes": 4}, {"numNodes": 8, "resourcesPerNode": GPU},
     'spec.trainer.numNodes: Invalid value: 8: 8 nodes exceed maxNodes 4 of TrainJobPolicy "limits"'),
    ("max nodes respected", {"maxNodes": 8}, {"numNodes": 8, "resourcesPerNode": GPU}, None),
    ("GPUs per node exceeded", {"maxGpusPerNode": 4}, {"numNodes": 1, "resourcesPerNode": GPU},
     'spec.trainer.resourcesPerNode: Invalid value: 8: 8 nvidia.com/gpu per node exceed maxGpusPerNode 4 of '
     'TrainJobPolicy "limits"'),
    ("GPUs per node respected", {"maxGpusPerNode": 8}, {"numNodes": 1, "resourcesPerNode": GPU}, None),
    ("total GPUs exceeded", {"maxTotalGpus": 32}, {"numNodes": 8, "resourcesPerNode": GPU},
     'spec.trainer: Invalid value: {"numNodes":8,"gpusPerNode":8}: the job requests 64 nvidia.com/gpu in total '
     '(8 nodes x 8), more than maxTotalGpus 32 of TrainJobPolicy "limits"'),
    ("total GPUs respected", {"maxTotalGpus": 64}, {"numNodes": 8, "resourcesPerNode": GPU}, None),
    ("runtime not allowed", {"allowedRuntimes": ["deepspeed"]}, {},
     'spec.runtimeRef.name: Invalid value: "torch-distributed": ClusterTrainingRuntime "torch-distributed" is not '
     'allowed by TrainJobPolicy "limits"; allowed: ClusterTrainingRuntime/deepspeed'),
    ("runtime allowed", {"allowedRuntimes": ["torch-distributed"]}, {}, None),
    ("image prefix refused", {"allowedImagePrefixes": ["ghcr.io/acme/"]}, {"image": "docker.io/evil:1"},
     'spec.trainer.image: Invalid value: "docker.io/evil:1": image of container node in replicatedJob node must '
     'start with one of [ghcr.io/acme/] (TrainJobPolicy "limits")'),
    ("image prefix allowed", {"allowedImagePrefixes": ["ghcr.io/acme/"]}, {"image": "ghcr.io/acme/train:1"}, None),
    ("runtime image refused", {"allowedImagePrefixes": ["ghcr.io/acme/"]}, {},
     'spec.runtimeRef: Invalid value: "python:3.12": image of container node in replicatedJob node must start with'),
    ("required request missing", {"requiredResourceRequests": ["memory"]}, {"resourcesPerNode": GPU},
     "spec.trainer.resourcesPerNode.requests: Required value: trainer pods of replicatedJob node must request memory"),
    ("required request present", {"requiredResourceRequests": ["cpu"]}, {"resourcesPerNode": GPU}, None),
]


@pytest.mark.parametrize(("case", "limits", "trainer", "message"), LIMIT_CASES, ids=[c[0] for c in LIMIT_CASES])
def test_limits_enforce(case, limits, trainer, message):
    v = check(trainjob(trainer=trainer), snap(policy("limits", limits=limits)))
    assert v.allowed is (message is None), v.message
    if message:
        assert v.message.startswith(message) and v.reason == "PolicyLimits"


@pytest.mark.parametrize(("case", "limits", "trainer", "message"),
                         [c for c in LIMIT_CASES if c[3]], ids=[c[0] for c in LIMIT_CASES if c[3]])
def test_limits_audit_warn(case, limits, trainer, message):
    v = check(trainjob(trainer=trainer), snap(policy("limits", mode="Audit", limits=limits)))
    assert v.allowed
    assert v.warnings[-1].startswith(message)
    assert v.warnings[-1].endswith('(TrainJobPolicy "limits" is in Audit mode: allowed)')


def test_limits_not_checked_on_update():
    obj = trainjob(trainer={"numNodes": 8, "resourcesPerNode": GPU})
    assert check(obj, snap(policy("limits", limits={"maxNodes": 1})), "UPDATE", obj).allowed


TOPO = {"levels": GPU_LEVELS[:3], "placement": "Required"}  # widest level: block of 512 GPUs


def test_job_fitting_no_level_is_denied_with_numbers():
    v = check(trainjob(trainer={"numNodes": 128, "resourcesPerNode": GPU}), snap(policy("topo", topology=TOPO)))
    assert not v.allowed and v.reason == "Topology"
    assert v.message == (
        'spec.trainer: Invalid value: {"numNodes":128}: fits no topology level of TrainJobPolicy "topo": the job '
        "needs 1024 GPUs (128 nodes x 8 GPUs) but the widest topology level cloud.google.com/gce-topology-block "
        "holds 512 GPUs (64 such nodes) per domain")


def test_job_fitting_no_level_is_warned_in_audit_and_fitting_job_passes():
    audit = policy("topo", mode="Audit", topology=TOPO)
    v = check(trainjob(trainer={"numNodes": 128, "resourcesPerNode": GPU}), snap(audit))
    assert v.allowed and "fits no topology level" in v.warnings[-1]
    assert check(trainjob(trainer={"numNodes": 64, "resourcesPerNode": GPU}), snap(policy("topo", topology=TOPO))).allowed


def test_every_matching_policy_limit_applies():
    loose = policy("loose", priority=10, limits={"maxNodes": 100})
    strict = policy("strict", limits={"maxNodes": 2})
    v = check(trainjob(trainer={"numNodes": 4, "resourcesPerNode": GPU}), snap(loose, strict))
    assert not v.allowed and 'maxNodes 2 of TrainJobPolicy "strict"' in v.message


def test_gpus_come_from_the_merged_view_not_the_raw_override():
    # The runtime gives 8 GPUs; the override only adds cpu (merged per resource since 2.3), so 8 GPUs remain.
    rt = runtime({"name": "node", "template": {"metadata": {"labels": {
        "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}}, "spec": {"template": {"spec": {"containers": [
            {"name": "node", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}}}})
    p = policy("limits", limits={"maxGpusPerNode": 4})
    v = check(trainjob(trainer={"resourcesPerNode": {"requests": {"cpu": "4"}}}),
              snap(p, cluster_training_runtimes={"torch-distributed": rt}))
    assert not v.allowed and "8 nvidia.com/gpu per node exceed maxGpusPerNode 4" in v.message
