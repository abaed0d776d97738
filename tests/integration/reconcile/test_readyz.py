"""Readiness that means something (issue 30): the real controller, started with a ``--snapshot-namespace`` that does
not exist, is not ready and says why and how to fix it; a TrainJob it cannot build gets one Warning event with the
fix, however often its reconcile is retried; once the namespace is created /readyz turns 200 and the job is built.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from reconcile_harness import Api, ControllerProcess, wait_for

ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
RUNTIME = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime", "metadata": {"name": "torch"},
    "spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"metadata": {"labels": {ANCESTOR: "trainer"}}, "spec": {"template": {"spec": {
            "containers": [{"name": "node", "image": "pytorch/pytorch:2.13.0"}]}}}}}]}}},
}
MISCONFIGURED = 'trainguard_reconcile_errors_total{kind="TrainJob",reason="ControllerMisconfigured"}'


def warnings(api: Api, name: str) -> list:
    return [e for e in api.core.list_namespaced_event(api.ns).items
            if e.involved_object.name == name and e.reason == "ControllerMisconfigured"]


def test_a_missing_snapshot_namespace_is_named_by_readyz_and_one_event_until_created(
        cluster, namespace: str, tmp_path: Path) -> None:
    api = Api(cluster.api_client(), namespace)
    missing = f"tg-snapshots-{uuid.uuid4().hex[:6]}"
    api.create("trainingruntimes", RUNTIME)
    api.create("trainjobs", {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                             "metadata": {"name": "job"},
                             "spec": {"runtimeRef": {"name": "torch", "kind": "TrainingRuntime"}}})
    controller = ControllerProcess(cluster.kubeconfig, namespace, "readyz", tmp_path,
                                   snapshot_namespace=missing).start(wait_ready=False)
    try:
        status, body = wait_for("/readyz naming the namespace",
                                lambda: (a := controller.readyz()) and missing in a[1] and a)
        assert status == 503
        assert f'snapshot namespace "{missing}" does not exist' in body
        assert f"kubectl create namespace {missing}" in body and "--snapshot-namespace" in body
        wait_for("several failed reconciles", lambda: controller.metrics().get(MISCONFIGURED, 0) >= 4)
        (event,) = warnings(api, "job")
        assert event.type == "Warning" and event.involved_object.kind == "TrainJob"
        assert f"kubectl create namespace {missing}" in event.message
        assert api.jobset("job") is None
        assert f"kubectl create namespace {missing}" in controller.log(), "the log line names the fix"

        cluster.kubectl("create", "namespace", missing)
        wait_for("/readyz 200", controller.ready)
        wait_for("the JobSet", lambda: api.jobset("job"))
        assert len(warnings(api, "job")) == 1
    finally:
        controller.kill()
        cluster.kubectl("delete", "namespace", missing, "--wait=false", check=False)
