"""DatasetCache ``holdTrainersUntilWarm`` end to end: ``trainguard controller`` against the real apiserver.

No kubelet, DaemonSet or Job controller runs here, so the test stands in for them: it writes the agent
DaemonSet's status (one node desired), creates the agent pod and marks it Ready, and creates the trainer pod from
the JobSet's pod template the controller built. The cache's status is then the controller's own (it recomputes it
from the DaemonSet and agent pods on every cache event, so a status written by hand would be overwritten at once).
Pods need the namespace's ``default`` ServiceAccount (no token controller here): the test creates it.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Iterator

import pytest
from kubernetes import client

from trainguard.controller.reconcile.cache_daemonset import agent_name, selector_labels
from trainguard.controller.reconcile.gates import REASON_RELEASED, REASON_WAITING
from reconcile_harness import Api, ControllerProcess, wait_for
from trainguard.webhook.runtime.dataset_cache import DATASET_CACHE_ANNOTATION, WAITS_FOR_LABEL, WARM_GATE

TRAINGUARD = ("trainguard.io", "v1alpha1")
KUEUE_GATE = "kueue.x-k8s.io/topology"


@pytest.fixture
def api(cluster, namespace: str) -> Api:
    return Api(cluster.api_client(), namespace)


@pytest.fixture
def controllers(cluster, namespace: str, tmp_path: Path) -> Iterator[list[ControllerProcess]]:
    started: list[ControllerProcess] = []
    yield started
    for proc in started:
        proc.kill()


def gates(core: client.CoreV1Api, name: str, namespace: str) -> list[str]:
    return [g.name for g in core.read_namespaced_pod(name, namespace).spec.scheduling_gates or []]


def test_trainer_pods_wait_for_a_warm_cache(cluster, namespace, api, controllers, tmp_path) -> None:
    core = api.core
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "default"}})
    api.create("datasetcaches", {
        "apiVersion": "trainguard.io/v1alpha1", "kind": "DatasetCache", "metadata": {"name": "imagenet"},
        "spec": {"source": {"hostPath": {"path": "/mnt/datasets/imagenet"}, "shards": "train-*.tar"},
                 "memoryBudget": "1Gi", "holdTrainersUntilWarm": True}}, TRAINGUARD)
    api.create("trainingruntimes", {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
        "metadata": {"name": "torch-distributed"},
        "spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "template": {"spec": {"replicatedJobs": [{
            "name": "node",
            "template": {"metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                         "spec": {"template": {"spec": {"containers": [{"name": "node", "image": "pytorch:2"}]}}}},
        }]}}}})
    api.create("trainjobs", {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "llm", "annotations": {DATASET_CACHE_ANNOTATION: "imagenet"}},
        "spec": {"runtimeRef": {"name": "torch-distributed", "kind": "TrainingRuntime"}}})
    proc = ControllerProcess(cluster.kubeconfig, namespace, "a", tmp_path,
                             extra=["--dataset-cache-allowed-host-path=/mnt/datasets"])  # the admin allows it
    controllers.append(proc)
    proc.start()

    # The JobSet's trainer pod template carries the gate and the label (and the JobSet CRD schema keeps them).
    jobset = wait_for("JobSet", lambda: api.jobset("llm"))
    template = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    assert template["spec"]["schedulingGates"] == [{"name": WARM_GATE}]
    assert template["metadata"]["labels"][WAITS_FOR_LABEL] == "imagenet"

    # Stand in for the DaemonSet controller (one node selected) and for the agent pod, not ready yet.
    apps = client.AppsV1Api(core.api_client)
    wait_for("agent DaemonSet", lambda: apps.read_namespaced_daemon_set(agent_name("imagenet"), namespace))
    apps.patch_namespaced_daemon_set_status(agent_name("imagenet"), namespace, {"status": {
        "desiredNumberScheduled": 1, "currentNumberScheduled": 1, "numberMisscheduled": 0, "numberReady": 0}})
    core.create_namespaced_pod(namespace, {
        "metadata": {"name": "agent-0", "labels": selector_labels("imagenet")},
        "spec": {"automountServiceAccountToken": False, "containers": [{"name": "agent", "image": "tg:1"}]}})

    # Stand in for the Job controller: the trainer pod from the template, plus a Kueue gate that must survive.
    pod_meta = copy.deepcopy(template["metadata"])
    pod_meta["labels"]["jobset.sigs.k8s.io/jobset-name"] = "llm"
    pod_spec = copy.deepcopy(template["spec"])
    pod_spec["schedulingGates"] = [{"name": KUEUE_GATE}, *pod_spec["schedulingGates"]]
    pod_spec["automountServiceAccountToken"] = False
    core.create_namespaced_pod(namespace, {"metadata": {**pod_meta, "name": "llm-node-0-0"}, "spec": pod_spec})

    def cache_status() -> dict:
        return api.get("datasetcaches", "imagenet", TRAINGUARD).get("status") or {}

    wait_for("cache status 0 of 1", lambda: cache_status().get("nodesDesired") == 1
             and cache_status().get("nodesReady") == 0)
    waiting = wait_for("WaitingForDatasetCache event", lambda: [
        e for e in api.events("llm") if e["reason"] == REASON_WAITING and "0 of 1 nodes warm" in e["note"]])
    assert waiting[0]["type"] == "Normal"
    time.sleep(1.0)  # the controller has seen the pod (it emitted the event); give it time to act wrongly
    assert gates(core, "llm-node-0-0", namespace) == [KUEUE_GATE, WARM_GATE]
    assert api.trainjob("llm")["metadata"]["labels"]["trainguard.io/state"] == "Created"
    assert not (api.trainjob("llm").get("status") or {}).get("conditions")  # no extra condition for the SDK

    # The agent becomes ready (warm set resident): the cache turns Ready and the controller releases the pod.
    core.patch_namespaced_pod_status("agent-0", namespace, {"status": {"conditions": [
        {"type": "Ready", "status": "True"}]}})
    wait_for("cache Ready", lambda: cache_status().get("nodesReady") == 1)
    wait_for("gate removed", lambda: gates(core, "llm-node-0-0", namespace) == [KUEUE_GATE])
    released = wait_for("release event", lambda: [e for e in api.events("llm") if e["reason"] == REASON_RELEASED])
    assert "1 of 1 nodes warm" in released[0]["note"]
