"""Audit mode tells admins, not only the person running ``kubectl apply``: the real controller records what an
Audit TrainJobPolicy finds on a TrainJob as one Warning event ``PolicyViolation`` naming the policy and the field
error, a core/v1 Event the ``kubeflow`` SDK lists, once across every later reconcile (TrainJob edits and a policy
edit, each of which re-evaluates the policies of a suspended job). The job itself is built: Audit never blocks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest
from kubernetes import client

from reconcile_harness import Api, ControllerProcess, wait_for

ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
POLICIES = ("trainguard.io", "v1alpha1", "trainjobpolicies")
# The SDK refuses a runtime without its framework label.
RUNTIME = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
    "metadata": {"name": "torch", "labels": {"trainer.kubeflow.org/framework": "torch"}},
    "spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"metadata": {"labels": {ANCESTOR: "trainer"}}, "spec": {"template": {"spec": {
            "containers": [{"name": "node", "image": "pytorch/pytorch:2.13.0"}]}}}}}]}}},
}


@pytest.fixture
def trainer_client(cluster, namespace: str):
    from kubeflow.common.types import KubernetesBackendConfig
    from kubeflow.trainer import TrainerClient
    from kubernetes import config

    configuration = client.Configuration()
    config.load_kube_config(config_file=cluster.kubeconfig, client_configuration=configuration)
    return TrainerClient(KubernetesBackendConfig(namespace=namespace, client_configuration=configuration))


@pytest.fixture
def audit_policy(cluster: Any, namespace: str) -> Iterator[str]:
    """An Audit TrainJobPolicy for this test's namespace only: at most 1 node."""
    name = f"audit-one-node-{namespace[-6:]}"
    custom = client.CustomObjectsApi(cluster.api_client())
    custom.create_cluster_custom_object(*POLICIES, {
        "apiVersion": "trainguard.io/v1alpha1", "kind": "TrainJobPolicy", "metadata": {"name": name},
        "spec": {"mode": "Audit",
                 "selector": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}},
                 "limits": {"maxNodes": 1}}})
    yield name
    custom.delete_cluster_custom_object(*POLICIES, name)


def core_events(api: Api, name: str, reason: str) -> list[Any]:
    """Through core/v1, as ``kubectl get events`` and the SDK's get_job_events() read them."""
    return [e for e in api.core.list_namespaced_event(api.ns).items
            if e.involved_object.name == name and e.reason == reason]


def test_an_audit_finding_is_one_policy_violation_event_across_reconciles(
        cluster, namespace, audit_policy, trainer_client, tmp_path: Path) -> None:
    api = Api(cluster.api_client(), namespace)
    api.create("trainingruntimes", RUNTIME)
    # Suspended: its JobSet does not run, so every reconcile evaluates the policies again.
    api.create("trainjobs", {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": "big"},
        "spec": {"runtimeRef": {"name": "torch", "kind": "TrainingRuntime"}, "suspend": True,
                 "trainer": {"numNodes": 3}},
    })
    controller = ControllerProcess(cluster.kubeconfig, namespace, "audit", tmp_path).start()
    try:
        wait_for("the JobSet (Audit does not block)", lambda: api.jobset("big"))
        (event,) = wait_for("a PolicyViolation event", lambda: core_events(api, "big", "PolicyViolation"))
        assert event.type == "Warning" and event.involved_object.kind == "TrainJob"
        assert event.message == (
            f'TrainJobPolicy "{audit_policy}" in mode Audit would deny this TrainJob (it is allowed): '
            f'spec.trainer.numNodes: Invalid value: 3: 3 nodes exceed maxNodes 1 of TrainJobPolicy "{audit_policy}"')
        # The kubeflow SDK lists it (it keeps only core/v1 events with firstTimestamp).
        assert ("PolicyViolation", event.message) in [(e.reason, e.message) for e in trainer_client.get_job_events("big")]

        # Several more reconciles: three edits of the TrainJob and one of the policy.
        for i in range(3):
            before = controller.reconciles()
            api.patch("trainjobs", "big", {"metadata": {"labels": {"touch": str(i)}}})
            wait_for(f"reconcile after edit {i}", lambda: controller.reconciles() > before)
        before = controller.reconciles()
        client.CustomObjectsApi(cluster.api_client()).patch_cluster_custom_object(
            *POLICIES, audit_policy, {"metadata": {"annotations": {"touched": "yes"}}})
        wait_for("reconcile after the policy edit", lambda: controller.reconciles() > before)
        assert len(core_events(api, "big", "PolicyViolation")) == 1
        assert not core_events(api, "big", "PolicyDenied")
    finally:
        controller.kill()
