"""Runtime and TrainJob builders for the runtime-framework tests (worked runtimes and TrainJobs as dicts)."""

from __future__ import annotations

import copy
from typing import Any

import yaml

ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"

TORCH_RUNTIME = yaml.safe_load(
    """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {name: torch-distributed, labels: {trainer.kubeflow.org/framework: torch}}
spec:
  mlPolicy: {numNodes: 1, torch: {}}
  template:
    spec:
      replicatedJobs:
      - name: node
        template:
          metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}}
          spec: {template: {spec: {containers: [{name: node, image: pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime}]}}}
"""
)

LLM_DDP = yaml.safe_load(
    """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: llm-ddp, namespace: team-a, uid: 7f0c-uid}
spec:
  runtimeRef: {name: torch-distributed}
  trainer:
    image: ghcr.io/acme/train:1.0
    command: [torchrun, /app/train.py]
    args: ["--epochs=3"]
    numNodes: 4
    env: [{name: NCCL_DEBUG, value: INFO}]
    resourcesPerNode: {requests: {cpu: "32", memory: 256Gi}, limits: {nvidia.com/gpu: 8}}
"""
)

PLAIN_BATCH = yaml.safe_load(
    """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainingRuntime
metadata: {name: plain-batch, namespace: team-a}
spec:
  mlPolicy: {numNodes: 2}
  podGroupPolicy: {coscheduling: {scheduleTimeoutSeconds: 120}}
  template:
    metadata: {labels: {team: a}}
    spec:
      replicatedJobs:
      - name: dataset-initializer
        template:
          metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: dataset-initializer}}
          spec: {template: {spec: {
            containers: [{name: dataset-initializer, image: ghcr.io/kubeflow/trainer/dataset-initializer,
                          resources: {requests: {cpu: "1"}}, volumeMounts: [{name: initializer, mountPath: /workspace}]}],
            volumes: [{name: initializer, persistentVolumeClaim: {claimName: data-pvc}}]}}}
      - name: node
        dependsOn: [{name: dataset-initializer, status: Complete}]
        template:
          metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}}
          spec: {template: {spec: {
            containers: [{name: node, image: "python:3.12", command: [python, /workspace/train.py],
                          resources: {requests: {cpu: "4", memory: 8Gi}}, volumeMounts: [{name: initializer, mountPath: /workspace}]}],
            volumes: [{name: initializer, persistentVolumeClaim: {claimName: data-pvc}}]}}}
"""
)

TAB_TRAIN = yaml.safe_load(
    """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: tab-train, namespace: team-a, uid: tab-uid}
spec:
  runtimeRef: {name: plain-batch, kind: TrainingRuntime}
  initializer:
    dataset: {storageUri: "hf://tatsu-lab/alpaca", secretRef: {name: hf-token}, env: [{name: IGNORE_PATTERNS, value: "*.md"}]}
  trainer: {numNodes: 3, env: [{name: EPOCHS, value: "5"}]}
  runtimePatches:
  - manager: acme.io/platform
    time: "2026-08-01T00:00:00Z"
    trainingRuntimeSpec: {template: {spec: {replicatedJobs: [{name: node, template: {spec: {template: {spec: {nodeSelector: {pool: cpu-large}}}}}}]}}}
"""
)

MPI_RUNTIME = yaml.safe_load(
    """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {name: mpi-distributed}
spec:
  mlPolicy: {numNodes: 1, mpi: {numProcPerNode: 1, mpiImplementation: OpenMPI, sshAuthMountPath: /home/mpiuser/.ssh, runLauncherAsNode: false}}
  template:
    spec:
      replicatedJobs:
      - name: launcher
        template:
          metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}}
          spec: {template: {spec: {containers: [{name: node, image: mpioperator/mpi-pi:openmpi, command: [mpirun, /app/pi]}]}}}
      - name: node
        template:
          spec: {template: {spec: {containers: [{name: node, image: mpioperator/mpi-pi:openmpi, command: [/usr/sbin/sshd, -De],
                                                 resources: {limits: {nvidia.com/gpu: 4}}}]}}}
"""
)


def trainjob(name: str = "job", runtime: str = "rt", *, kind: str | None = None, **spec: Any) -> dict:
    ref: dict[str, Any] = {"name": runtime}
    if kind:
        ref["kind"] = kind
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": "ns", "uid": f"{name}-uid"},
        "spec": {"runtimeRef": ref, **spec},
    }


def single_job_runtime(ml_policy: dict | None, *, container: dict | None = None, name: str = "rt", pod_group: dict | None = None) -> dict:
    """A runtime with one trainer job ``node`` (container ``node``)."""
    spec: dict[str, Any] = {
        "template": {
            "spec": {
                "replicatedJobs": [
                    {
                        "name": "node",
                        "template": {
                            "metadata": {"labels": {ANCESTOR: "trainer"}},
                            "spec": {"template": {"spec": {"containers": [container or {"name": "node", "image": "img"}]}}},
                        },
                    }
                ]
            }
        }
    }
    if ml_policy is not None:
        spec["mlPolicy"] = ml_policy
    if pod_group is not None:
        spec["podGroupPolicy"] = pod_group
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime", "metadata": {"name": name}, "spec": spec}


def rjob(jobset: dict, name: str) -> dict:
    return next(rj for rj in jobset["spec"]["replicatedJobs"] if rj["name"] == name)


def pod(rj: dict) -> dict:
    return rj["template"]["spec"]["template"]["spec"]


def container(rj: dict, name: str = "node") -> dict:
    return next(c for c in pod(rj)["containers"] if c["name"] == name)


def env_map(c: dict) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c.get("env") or []}


def deep(obj: dict) -> dict:
    return copy.deepcopy(obj)
