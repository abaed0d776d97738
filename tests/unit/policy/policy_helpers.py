"""Small builders shared by the policy tests (plain dicts, as the apiserver sends them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Mapping

from trainguard.webhook.api.quantity import Quantity, parse_quantity

NOW = datetime(2026, 9, 1, 12, 0, 0, tzinfo=timezone.utc)
ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"


@dataclass(frozen=True)
class FakePodSet:
    """Stands in for ``trainguard.webhook.runtime.effective.PodSet`` in rule tests that only need the numbers."""

    name: str
    count: int
    requests: Mapping[str, Quantity]
    replicas: int = 1
    ancestor: str | None = None

    @property
    def pods(self) -> int:
        return self.count * self.replicas


@dataclass(frozen=True)
class FakeEffective:
    pod_sets: tuple[FakePodSet, ...]
    trainer_jobs: tuple[str, ...]
    spec: Mapping[str, Any] = field(default_factory=dict)
    num_nodes: int = 1


def pod_set(name: str, count: int, **requests: Any) -> FakePodSet:
    return FakePodSet(name, count, {k.replace("__", "/").replace("_", "."): parse_quantity(v) for k, v in requests.items()})


def gpu_job(nodes: int, gpus: int, *, image: str = "ghcr.io/acme/train:1", cpu: Any = None) -> FakeEffective:
    requests: dict[str, Any] = {"nvidia.com/gpu": gpus} if gpus else {}
    if cpu is not None:
        requests["cpu"] = cpu
    ps = FakePodSet("node", nodes, {k: parse_quantity(v) for k, v in requests.items()}, ancestor="trainer")
    spec = {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {
        "containers": [{"name": "node", "image": image}]}}}}}]}
    return FakeEffective((ps,), ("node",), spec, nodes)


def rjob(name: str, *, ancestor: str | None = None, containers=("node",), replicas: int | None = None,
         depends_on=(), **pod: Any) -> dict[str, Any]:
    job: dict[str, Any] = {"name": name, "template": {"spec": {"template": {"spec": {
        "containers": [{"name": c, "image": "python:3.12"} for c in containers], **pod}}}}}
    if ancestor:
        job["template"]["metadata"] = {"labels": {ANCESTOR: ancestor}}
    if replicas is not None:
        job["replicas"] = replicas
    if depends_on:
        job["dependsOn"] = [{"name": d, "status": "Complete"} for d in depends_on]
    return job


def runtime(*jobs: dict[str, Any], kind: str = "ClusterTrainingRuntime", name: str = "torch-distributed",
            namespace: str | None = None, ml_policy: dict | None = None, labels: dict | None = None,
            annotations: dict | None = None, pod_group_policy: dict | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    spec: dict[str, Any] = {"mlPolicy": ml_policy if ml_policy is not None else {"numNodes": 1, "torch": {}},
                            "template": {"spec": {"replicatedJobs": list(jobs) or [rjob("node", ancestor="trainer")]}}}
    if pod_group_policy:
        spec["podGroupPolicy"] = pod_group_policy
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": kind, "metadata": meta, "spec": spec}


def trainjob(name: str = "job", namespace: str = "team-a", *, runtime_name: str = "torch-distributed",
             kind: str | None = None, trainer: dict | None = None, labels: dict | None = None,
             annotations: dict | None = None, patches: list | None = None, **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    ref: dict[str, Any] = {"name": runtime_name}
    if kind:
        ref["kind"] = kind
    body: dict[str, Any] = {"runtimeRef": ref, **spec}
    if trainer is not None:
        body["trainer"] = trainer
    if patches is not None:
        body["runtimePatches"] = patches
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": meta, "spec": body}


def policy(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "trainguard.io/v1alpha1", "kind": "TrainJobPolicy", "metadata": {"name": name},
            "spec": spec}


GPU_LEVELS = [
    {"nodeLabel": "kubernetes.io/hostname", "gpusPerDomain": 8},
    {"nodeLabel": "nvidia.com/gpu.clique", "gpusPerDomain": 72},
    {"nodeLabel": "cloud.google.com/gce-topology-block", "gpusPerDomain": 512},
    {"nodeLabel": "topology.kubernetes.io/zone", "gpusPerDomain": 4096},
]
