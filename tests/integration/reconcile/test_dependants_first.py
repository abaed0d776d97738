"""A Volcano TrainJob on a cluster without Volcano's PodGroup CRD: nothing is created, the failure is reported,
and once the CRD is installed the job proceeds, its PodGroup written before its JobSet.

Before, the controller applied the JobSet first and left it running without its gang PodGroup. Upstream creates
nothing and retries, reporting Warning ``TrainJobResourcesCreationFailed`` ("TrainJob resources reconciliation
failed: no matches for kind ..."). The CRD installed here is a stand-in for Volcano's (same group, version, kind and
plural, schema left open): what is tested is the controller, not Volcano. The session cluster has no Volcano CRD;
the test removes its stand-in at the end.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from reconcile_harness import Api, ControllerProcess, wait_for

ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
VOLCANO = ("scheduling.volcano.sh", "v1beta1")
VOLCANO_CRD = "podgroups.scheduling.volcano.sh"
FAILED = ("TrainJob resources reconciliation failed: "
          'no matches for kind "PodGroup" in version "scheduling.volcano.sh/v1beta1"')

STAND_IN_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": VOLCANO_CRD},
    "spec": {
        "group": "scheduling.volcano.sh",
        "names": {"kind": "PodGroup", "listKind": "PodGroupList", "plural": "podgroups", "singular": "podgroup"},
        "scope": "Namespaced",
        "versions": [{
            "name": "v1beta1", "served": True, "storage": True, "subresources": {"status": {}},
            "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
        }],
    },
}


@pytest.fixture
def no_volcano(cluster) -> Iterator[None]:
    present = cluster.kubectl("get", "crd", VOLCANO_CRD, check=False)
    assert present.returncode != 0, f"{VOLCANO_CRD} is installed in the session cluster: this test needs it absent"
    yield
    cluster.kubectl("delete", "crd", VOLCANO_CRD, "--ignore-not-found", "--wait=false", check=False)


def _runtime() -> dict:
    node = {"name": "node", "image": "python:3.12", "resources": {"requests": {"cpu": "1"}}}
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime", "metadata": {"name": "gang"},
        "spec": {
            "mlPolicy": {"numNodes": 2, "torch": {}},
            "podGroupPolicy": {"volcano": {}},
            "template": {"spec": {"replicatedJobs": [{
                "name": "node",
                "template": {"metadata": {"labels": {ANCESTOR: "trainer"}},
                             "spec": {"template": {"spec": {"containers": [node]}}}},
            }]}},
        },
    }


def _podgroup(api: Api, name: str) -> dict[str, Any] | None:
    try:
        return api.custom.get_namespaced_custom_object(*VOLCANO, api.ns, "podgroups", name)
    except ApiException as err:
        if err.status == 404:
            return None
        raise


def test_volcano_job_without_the_crd_creates_nothing_then_proceeds(cluster, namespace, no_volcano, tmp_path: Path) -> None:
    api = Api(cluster.api_client(), namespace)
    api.create("trainingruntimes", _runtime())
    api.create("trainjobs", {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                             "metadata": {"name": "gang-job"},
                             "spec": {"runtimeRef": {"name": "gang", "kind": "TrainingRuntime"}}})
    controller = ControllerProcess(cluster.kubeconfig, namespace, "a", tmp_path).start()
    try:
        warning = wait_for("the creation failure event", lambda: [
            e for e in api.events("gang-job") if e["reason"] == "TrainJobResourcesCreationFailed"])
        assert warning[0] == {"reason": "TrainJobResourcesCreationFailed", "type": "Warning", "note": FAILED}
        # Retried with backoff, and still no JobSet: nothing runs without its gang.
        retries = controller.metrics().get(
            'trainguard_reconcile_errors_total{kind="TrainJob",reason="ObjectWriteFailed"}', 0)
        wait_for("a retry", lambda: controller.metrics().get(
            'trainguard_reconcile_errors_total{kind="TrainJob",reason="ObjectWriteFailed"}', 0) > retries, timeout=60)
        assert api.jobset("gang-job") is None
        assert not [e for e in api.events("gang-job") if e["reason"] == "Created"]

        cluster.kubectl("apply", "-f", "-", input=json.dumps(STAND_IN_CRD))
        wait_for("the CRD to be served", lambda: cluster.kubectl(
            "get", "podgroups.scheduling.volcano.sh", "-n", namespace, check=False).returncode == 0, timeout=60)

        jobset = wait_for("the JobSet once the CRD is installed", lambda: api.jobset("gang-job"), timeout=120)
        podgroup = _podgroup(api, "gang-job")
        assert podgroup is not None and podgroup["spec"]["minMember"] == 2
        owner = podgroup["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"], owner["controller"]) == ("TrainJob", "gang-job", True)
        # The PodGroup was written first: etcd revisions only grow.
        assert int(podgroup["metadata"]["resourceVersion"]) < int(jobset["metadata"]["resourceVersion"])
        wait_for("the Created event", lambda: [e for e in api.events("gang-job") if e["reason"] == "Created"])
    finally:
        controller.kill()
