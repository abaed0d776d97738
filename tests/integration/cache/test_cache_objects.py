"""The cache's built objects against the real apiserver: DaemonSet + RBAC accepted, status accepted by the CRD,
and a JobSet wired with the cache passes the JobSet CRD schema. (No kubelet: only API acceptance is checked.)"""

from __future__ import annotations

import json
from datetime import datetime, timezone

from trainguard.controller.reconcile.cache_daemonset import build_agent_rbac, build_daemonset, compute_status
from trainguard.webhook.policy.dataset_cache import DatasetCacheSources
from trainguard.webhook.policy.dataset_cache_agents import DatasetCacheAgents
from trainguard.webhook.runtime.dataset_cache import DATASET_CACHE_ANNOTATION, wire_dataset_cache


# The admin lets caches tolerate the "dedicated" taint (no toleration key is allowed by default).
AGENTS = DatasetCacheAgents.of(toleration_keys=["dedicated"])


def _create(cluster, obj: dict) -> dict:
    return json.loads(cluster.kubectl("create", "-o", "json", "-f", "-", input=json.dumps(obj)).stdout)


def _dataset_cache(cluster, namespace: str, source: dict) -> dict:
    return _create(cluster, {
        "apiVersion": "trainguard.io/v1alpha1",
        "kind": "DatasetCache",
        "metadata": {"name": "imagenet", "namespace": namespace},
        "spec": {"source": source, "memoryBudget": "2Gi", "nodeSelector": {"nvidia.com/gpu.present": "true"},
                 "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}]},
    })


def test_daemonset_and_rbac_are_accepted(cluster, namespace: str) -> None:
    cache = _dataset_cache(cluster, namespace, {"hostPath": {"path": "/mnt/datasets/imagenet"}, "shards": "*.tar"})
    for obj in build_agent_rbac(cache):
        _create(cluster, obj)
    allowed = DatasetCacheSources.of(["/mnt/datasets"])  # the admin's setting (no hostPath is allowed by default)
    created = _create(cluster, build_daemonset(cache, image="ghcr.io/acme/trainguard:0.1.0", sources=allowed,
                                                   agents=AGENTS))
    pod = created["spec"]["template"]["spec"]
    # The apiserver keeps the data mount recursively read-only (it drops fields it does not know).
    data_mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "data")
    assert (data_mount["readOnly"], data_mount["recursiveReadOnly"]) == (True, "IfPossible")
    assert created["metadata"]["ownerReferences"][0]["uid"] == cache["metadata"]["uid"]
    assert pod["containers"][0]["securityContext"]["runAsUser"] == 65532
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {t["key"] for t in pod["tolerations"]} == {"nvidia.com/gpu", "dedicated"}

    status = compute_status(cache, created, [], now=datetime(2026, 1, 1, tzinfo=timezone.utc))
    cluster.kubectl("patch", "datasetcache", "imagenet", "-n", namespace, "--subresource=status", "--type=merge",
                    "-p", json.dumps({"status": status}))
    stored = json.loads(cluster.kubectl("get", "datasetcache", "imagenet", "-n", namespace, "-o", "json").stdout)
    assert stored["status"]["conditions"][0]["reason"] == "NoNodesSelected"  # no DaemonSet controller runs


def test_pvc_daemonset_is_accepted(cluster, namespace: str) -> None:
    cache = _dataset_cache(
        cluster, namespace, {"persistentVolumeClaim": {"claimName": "datasets", "path": "imagenet"}, "shards": "**/*"}
    )
    created = _create(cluster, build_daemonset(cache, image="img:1", sources=DatasetCacheSources(), agents=AGENTS,
                                               report_to_pod=False))
    volumes = {v["name"]: v for v in created["spec"]["template"]["spec"]["volumes"]}
    assert volumes["data"]["persistentVolumeClaim"] == {"claimName": "datasets", "readOnly": True}


def test_wired_jobset_passes_the_jobset_schema(cluster, namespace: str) -> None:
    cache = {"apiVersion": "trainguard.io/v1alpha1", "kind": "DatasetCache",
             "metadata": {"name": "imagenet", "namespace": namespace}}
    trainjob = {"metadata": {"name": "llm", "namespace": namespace,
                             "annotations": {DATASET_CACHE_ANNOTATION: "imagenet"}}}
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "llm", "namespace": namespace},
        "spec": {
            "suspend": True,
            "replicatedJobs": [{
                "name": "node",
                "replicas": 1,
                "template": {
                    "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                    "spec": {"parallelism": 2, "completions": 2, "template": {"spec": {
                        "restartPolicy": "OnFailure",
                        "containers": [{"name": "node", "image": "pytorch/pytorch:2.13.0"}],
                    }}},
                },
            }],
        },
    }
    wired = wire_dataset_cache(jobset, trainjob, cache)
    created = _create(cluster, wired)
    pod = created["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["volumes"][0]["hostPath"]["path"] == f"/var/run/trainguard/cache/{namespace}/imagenet"
    env = {e["name"]: e["value"] for e in pod["containers"][0]["env"]}
    assert env == {"TRAINGUARD_CACHE_SOCKET": "/var/run/trainguard/cache/agent.sock", "TRAINGUARD_DATASET": "imagenet"}
