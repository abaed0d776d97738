"""Objects for the API integration tests: valid baselines, example runtimes shaped like upstream's, API helpers."""

from __future__ import annotations

import copy
import json
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

TRAINER = ("trainer.kubeflow.org", "v1alpha1")
TRAINGUARD = ("trainguard.io", "v1alpha1")
PLURALS = {
    "TrainJob": (TRAINER, "trainjobs", True), "TrainingRuntime": (TRAINER, "trainingruntimes", True),
    "ClusterTrainingRuntime": (TRAINER, "clustertrainingruntimes", False),
    "TrainJobPolicy": (TRAINGUARD, "trainjobpolicies", False), "DatasetCache": (TRAINGUARD, "datasetcaches", True),
}


class Api:
    """Create/patch/get any of our kinds, returning the API server's answer or its (status, message) error."""

    def __init__(self, api_client: client.ApiClient, namespace: str) -> None:
        self.api = client.CustomObjectsApi(api_client)
        self.namespace = namespace

    def _route(self, kind: str) -> tuple[str, str, str, bool]:
        (group, version), plural, namespaced = PLURALS[kind]
        return group, version, plural, namespaced

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        group, version, plural, namespaced = self._route(obj["kind"])
        if namespaced:
            return self.api.create_namespaced_custom_object(group, version, self.namespace, plural, obj)
        return self.api.create_cluster_custom_object(group, version, plural, obj)

    def get(self, kind: str, name: str) -> dict[str, Any]:
        group, version, plural, namespaced = self._route(kind)
        if namespaced:
            return self.api.get_namespaced_custom_object(group, version, self.namespace, plural, name)
        return self.api.get_cluster_custom_object(group, version, plural, name)

    def replace(self, obj: dict[str, Any]) -> dict[str, Any]:
        group, version, plural, namespaced = self._route(obj["kind"])
        name = obj["metadata"]["name"]
        if namespaced:
            return self.api.replace_namespaced_custom_object(group, version, self.namespace, plural, name, obj)
        return self.api.replace_cluster_custom_object(group, version, plural, name, obj)

    def replace_status(self, obj: dict[str, Any]) -> dict[str, Any]:
        group, version, plural, _ = self._route(obj["kind"])
        return self.api.replace_namespaced_custom_object_status(
            group, version, self.namespace, plural, obj["metadata"]["name"], obj)

    def delete(self, kind: str, name: str) -> None:
        group, version, plural, namespaced = self._route(kind)
        if namespaced:
            self.api.delete_namespaced_custom_object(group, version, self.namespace, plural, name)
        else:
            self.api.delete_cluster_custom_object(group, version, plural, name)


def rejection(call, *args) -> tuple[int, str]:
    """Run an API call that must fail; return (HTTP status, message)."""
    try:
        call(*args)
    except ApiException as err:
        return err.status, json.loads(err.body).get("message", "")
    raise AssertionError("the API server accepted an object that must be rejected")


def is_subset(sent: Any, got: Any) -> bool:
    """Every key/value the client sent is in what the server returned (which adds defaults and metadata)."""
    if isinstance(sent, dict):
        return isinstance(got, dict) and all(k in got and is_subset(v, got[k]) for k, v in sent.items())
    if isinstance(sent, list):
        return isinstance(got, list) and len(sent) == len(got) and all(is_subset(a, b) for a, b in zip(sent, got))
    return sent == got


def with_changes(obj: dict[str, Any], *changes: tuple[str, Any]) -> dict[str, Any]:
    """Deep copy of ``obj`` with dotted paths set (``None`` deletes); list indices are numbers in the path."""
    out = copy.deepcopy(obj)
    for path, value in changes:
        node: Any = out
        parts = path.split(".")
        for part in parts[:-1]:
            key: Any = int(part) if part.isdigit() else part
            if isinstance(node, dict) and key not in node:
                node[key] = {}
            node = node[key]
        last: Any = int(parts[-1]) if parts[-1].isdigit() else parts[-1]
        if value is None:
            del node[last]
        else:
            node[last] = value
    return out


def trainjob(name: str = "job") -> dict[str, Any]:
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": name},
            "spec": {"runtimeRef": {"name": "torch-distributed"},
                     "trainer": {"image": "ghcr.io/acme/train:1.0", "numNodes": 2},
                     "initializer": {"dataset": {"storageUri": "hf://tatsu-lab/alpaca"}},
                     "activeDeadlineSeconds": 3600,
                     "runtimePatches": [{"manager": "acme.io/platform", "trainingRuntimeSpec": {"template": {"spec": {
                         "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {
                             "serviceAccountName": "trainer",
                             "volumes": [{"name": "scratch", "emptyDir": {}}],
                             "nodeSelector": {"pool": "gpu"}}}}}}]}}}}]}}


def runtime(kind: str = "ClusterTrainingRuntime", name: str = "rt", ml_policy: dict | None = None) -> dict[str, Any]:
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": kind, "metadata": {"name": name},
            "spec": {"mlPolicy": ml_policy if ml_policy is not None else {"numNodes": 1, "torch": {}},
                     "template": {"spec": {"replicatedJobs": [{"name": "node", "template": {
                         "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                         "spec": {"template": {"spec": {"containers": [{"name": "node", "image": "x"}]}}}}}]}}}}


def policy(name: str = "pol") -> dict[str, Any]:
    return {"apiVersion": "trainguard.io/v1alpha1", "kind": "TrainJobPolicy", "metadata": {"name": name},
            "spec": {"mode": "Audit", "priority": 10,
                     "scheduling": {"kueue": {"queueName": "team-a"}},
                     "topology": {"levels": [{"nodeLabel": "kubernetes.io/hostname", "gpusPerDomain": 8},
                                             {"nodeLabel": "nvidia.com/gpu.clique", "gpusPerDomain": 72}]},
                     "limits": {"maxNodes": 64}}}


def cache(name: str = "ds") -> dict[str, Any]:
    return {"apiVersion": "trainguard.io/v1alpha1", "kind": "DatasetCache", "metadata": {"name": name},
            "spec": {"source": {"hostPath": {"path": "/data/alpaca"}, "shards": "train-*.arrow"},
                     "memoryBudget": "64Gi"}}


# --- reference section 4 example runtimes ---------------------------------------------------------------
TORCH_DISTRIBUTED = {  # 4.1
    "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
    "metadata": {"name": "torch-distributed", "labels": {"trainer.kubeflow.org/framework": "torch"}},
    "spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "template": {"spec": {"replicatedJobs": [{
        "name": "node",
        "template": {"metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                     "spec": {"template": {"spec": {"containers": [{
                         "name": "node", "image": "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"}]}}}}}]}}},
}

LLM_DDP = {  # 4.1's TrainJob
    "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": "llm-ddp"},
    "spec": {"runtimeRef": {"name": "torch-distributed"},
             "trainer": {"image": "ghcr.io/acme/train:1.0", "command": ["torchrun", "/app/train.py"],
                         "args": ["--epochs=3"], "numNodes": 4, "env": [{"name": "NCCL_DEBUG", "value": "INFO"}],
                         "resourcesPerNode": {"requests": {"cpu": "32", "memory": "256Gi"},
                                              "limits": {"nvidia.com/gpu": 8}}}},
}


def _initializer_job(name: str, step: str, container: dict[str, Any], depends: list | None = None) -> dict:
    job: dict[str, Any] = {"name": name, "template": {
        "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": step}},
        "spec": {"template": {"spec": {"containers": [container], "volumes": [
            {"name": "initializer", "persistentVolumeClaim": {"claimName": "data-pvc"}}]}}}}}
    if depends:
        job["dependsOn"] = depends
    return job


PLAIN_BATCH = {  # 4.3
    "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime", "metadata": {"name": "plain-batch"},
    "spec": {"mlPolicy": {"numNodes": 2}, "podGroupPolicy": {"coscheduling": {"scheduleTimeoutSeconds": 120}},
             "template": {"metadata": {"labels": {"team": "a"}}, "spec": {"replicatedJobs": [
                 _initializer_job("dataset-initializer", "dataset-initializer", {
                     "name": "dataset-initializer", "image": "ghcr.io/kubeflow/trainer/dataset-initializer",
                     "resources": {"requests": {"cpu": "1"}},
                     "volumeMounts": [{"name": "initializer", "mountPath": "/workspace"}]}),
                 _initializer_job("node", "trainer", {
                     "name": "node", "image": "python:3.12", "command": ["python", "/workspace/train.py"],
                     "resources": {"requests": {"cpu": "4", "memory": "8Gi"}},
                     "volumeMounts": [{"name": "initializer", "mountPath": "/workspace"}]},
                     depends=[{"name": "dataset-initializer", "status": "Complete"}]),
             ]}}},
}

TAB_TRAIN = {  # 4.3's TrainJob
    "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": "tab-train"},
    "spec": {"runtimeRef": {"name": "plain-batch", "kind": "TrainingRuntime"},
             "initializer": {"dataset": {"storageUri": "hf://tatsu-lab/alpaca", "secretRef": {"name": "hf-token"},
                                         "env": [{"name": "IGNORE_PATTERNS", "value": "*.md"}]}},
             "trainer": {"numNodes": 3, "env": [{"name": "EPOCHS", "value": "5"}]},
             "runtimePatches": [{"manager": "acme.io/platform", "trainingRuntimeSpec": {"template": {"spec": {
                 "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {
                     "nodeSelector": {"pool": "cpu-large"}}}}}}]}}}}]},
}

DEEPSPEED = {  # MPI runtime shaped like upstream's deepspeed-distributed
    "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
    "metadata": {"name": "deepspeed-distributed", "labels": {"trainer.kubeflow.org/framework": "deepspeed"}},
    "spec": {"mlPolicy": {"numNodes": 1, "mpi": {"numProcPerNode": 1, "mpiImplementation": "OpenMPI",
                                                  "sshAuthMountPath": "/home/mpiuser/.ssh",
                                                  "runLauncherAsNode": True}},
             "template": {"spec": {"network": {"publishNotReadyAddresses": True}, "successPolicy": {
                 "operator": "All", "targetReplicatedJobs": ["launcher"]}, "replicatedJobs": [
                 {"name": "launcher", "template": {
                     "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                     "spec": {"template": {"spec": {"containers": [{
                         "name": "node", "image": "ghcr.io/kubeflow/trainer/deepspeed-runtime",
                         "securityContext": {"runAsUser": 1000}}]}}}}},
                 {"name": "node", "template": {"spec": {"template": {"spec": {"containers": [{
                     "name": "node", "image": "ghcr.io/kubeflow/trainer/deepspeed-runtime",
                     "securityContext": {"runAsUser": 1000},
                     "command": ["/usr/sbin/sshd"], "args": ["-De", "-f", "/home/mpiuser/.sshd_config"],
                     "readinessProbe": {"tcpSocket": {"port": 2222}, "initialDelaySeconds": 5}}]}}}}},
             ]}}},
}
