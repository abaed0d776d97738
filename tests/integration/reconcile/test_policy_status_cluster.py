"""A TrainJobPolicy's status, written by the real controller against the real apiserver: Ready, observedGeneration
and the counts of the unfinished TrainJobs it selects (pass / warn / fail), updated when the policy is tightened in
Audit (warn), switched to Enforce (fail) and when a TrainJob is deleted; ``kubectl get tjp`` shows them in the
CRD's printer columns (the apiserver's Table)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from kubernetes import client

from reconcile_harness import Api, ControllerProcess, wait_for

ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
POLICIES = ("trainguard.io", "v1alpha1", "trainjobpolicies")
RUNTIME = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime", "metadata": {"name": "torch"},
    "spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"metadata": {"labels": {ANCESTOR: "trainer"}}, "spec": {"template": {"spec": {
            "containers": [{"name": "node", "image": "pytorch/pytorch:2.13.0"}]}}}}}]}}},
}


def trainjob(name: str, nodes: int) -> dict:
    # Suspended: nothing runs, and every reconcile asks the policies again.
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": name},
            "spec": {"runtimeRef": {"name": "torch", "kind": "TrainingRuntime"}, "suspend": True,
                     "trainer": {"numNodes": nodes}}}


@pytest.fixture
def policy(cluster: Any, namespace: str) -> Iterator[str]:
    """An Audit policy for this test's namespace only, loose at first: at most 4 nodes."""
    name = f"status-{namespace[-6:]}"
    custom = client.CustomObjectsApi(cluster.api_client())
    custom.create_cluster_custom_object(*POLICIES, {
        "apiVersion": "trainguard.io/v1alpha1", "kind": "TrainJobPolicy", "metadata": {"name": name},
        "spec": {"mode": "Audit",
                 "selector": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}},
                 "limits": {"maxNodes": 4}}})
    yield name
    try:
        custom.delete_cluster_custom_object(*POLICIES, name)
    except client.ApiException as err:
        if err.status != 404:  # the test deleted it itself
            raise


def counts_are(custom: client.CustomObjectsApi, name: str, **want: int):
    """The policy when its status says ``want`` for the policy's current generation (None until then)."""
    def probe() -> dict | None:
        obj = custom.get_cluster_custom_object(*POLICIES, name)
        status = obj.get("status") or {}
        ready = [c for c in status.get("conditions") or [] if c["type"] == "Ready"]
        counts = status.get("trainJobs") or {}
        current = status.get("observedGeneration") == obj["metadata"]["generation"]
        ok = current and ready and ready[0]["status"] == "True" and all(counts.get(k) == v for k, v in want.items())
        return obj if ok else None
    return probe


def status_writes(controller: ControllerProcess) -> float:
    """API requests of the policy status reconciles: it reads from its cache, so each one is a status write."""
    return controller.metrics().get('trainguard_reconcile_api_requests_sum{kind="TrainJobPolicy"}', 0.0)


def policy_results(controller: ControllerProcess, name: str) -> dict[str, float]:
    """``trainguard_policy_results{policy=name}`` from a real scrape, result -> value ({} when no series)."""
    prefix = f'trainguard_policy_results{{policy="{name}",result="'
    return {k[len(prefix):-2]: v for k, v in controller.metrics().items() if k.startswith(prefix)}


def table(cluster: Any, name: str) -> dict[str, str]:
    """``kubectl get tjp NAME``: the apiserver's Table from the CRD's printer columns, header -> cell."""
    out = cluster.kubectl("get", "tjp", name).stdout.splitlines()
    header, row = out[0].split(), out[1].split()
    assert len(header) == len(row), out
    return dict(zip(header, row))


def test_policy_status_counts_follow_the_policy_and_the_trainjobs(cluster, namespace, policy, tmp_path: Path) -> None:
    api = Api(cluster.api_client(), namespace)
    custom = api.custom
    api.create("trainingruntimes", RUNTIME)
    api.create("trainjobs", trainjob("small", 1))
    api.create("trainjobs", trainjob("big", 3))
    controller = ControllerProcess(cluster.kubeconfig, namespace, "policy-status", tmp_path,
                                   extra=["--policy-status-interval", "0.5"]).start()
    try:
        obj = wait_for("Ready and 2 passing", counts_are(custom, policy, selected=2, **{"pass": 2}, warn=0, fail=0))
        (ready,) = obj["status"]["conditions"]
        assert ready["reason"] == "InForce" and "mode Audit" in ready["message"]
        row = table(cluster, policy)
        assert list(row) == ["NAME", "MODE", "READY", "SELECTED", "PASS", "WARN", "FAIL", "AGE"]
        assert {k: v for k, v in row.items() if k != "AGE"} == {
            "NAME": policy, "MODE": "Audit", "READY": "True", "SELECTED": "2", "PASS": "2", "WARN": "0", "FAIL": "0"}

        # Tightened in Audit: the big job would be denied; it is warned about, and still allowed.
        custom.patch_cluster_custom_object(*POLICIES, policy, {"spec": {"limits": {"maxNodes": 2}}})
        wait_for("1 pass, 1 warn", counts_are(custom, policy, selected=2, **{"pass": 1}, warn=1, fail=0))
        row = table(cluster, policy)
        assert (row["MODE"], row["SELECTED"], row["PASS"], row["WARN"], row["FAIL"]) == ("Audit", "2", "1", "1", "0")
        assert policy_results(controller, policy) == {"pass": 1, "warn": 1, "fail": 0}

        # Enforce: the warning becomes a failure (and the big job is Blocked).
        custom.patch_cluster_custom_object(*POLICIES, policy, {"spec": {"mode": "Enforce"}})
        obj = wait_for("1 pass, 1 fail", counts_are(custom, policy, selected=2, **{"pass": 1}, warn=0, fail=1))
        assert "mode Enforce" in obj["status"]["conditions"][0]["message"]
        wait_for("the big job Blocked",
                 lambda: api.trainjob("big")["metadata"].get("labels", {}).get("trainguard.io/state") == "Blocked")
        row = table(cluster, policy)
        assert (row["MODE"], row["READY"], row["PASS"], row["WARN"], row["FAIL"]) == ("Enforce", "True", "1", "0", "1")
        assert policy_results(controller, policy) == {"pass": 1, "warn": 0, "fail": 1}

        # The failing job deleted: it leaves the counts.
        custom.delete_namespaced_custom_object("trainer.kubeflow.org", "v1alpha1", namespace, "trainjobs", "big")
        wait_for("1 selected, 1 pass", counts_are(custom, policy, selected=1, **{"pass": 1}, warn=0, fail=0))

        # A burst: 40 more jobs, then a policy change that fails all 41 at once; every reconcile changes the
        # counts, and the writes are coalesced: a few per interval, not one per job.
        for i in range(40):
            api.create("trainjobs", trainjob(f"burst-{i}", 1))
        wait_for("41 passing", counts_are(custom, policy, selected=41, **{"pass": 41}), timeout=120)
        writes, started = status_writes(controller), time.monotonic()
        custom.patch_cluster_custom_object(*POLICIES, policy, {"spec": {"limits": {
            "allowedImagePrefixes": ["registry.example/"]}}})
        wait_for("41 failing", counts_are(custom, policy, selected=41, **{"pass": 0}, fail=41), timeout=120,
                 interval=0.05)
        elapsed = time.monotonic() - started
        burst = status_writes(controller) - writes
        assert 1 <= burst <= elapsed / 0.5 + 2, (burst, elapsed)

        # Quiet: a reconcile that changes no result writes nothing.
        time.sleep(1.0)
        writes, rv = status_writes(controller), custom.get_cluster_custom_object(*POLICIES, policy)["metadata"][
            "resourceVersion"]
        reconciles = controller.reconciles()
        api.patch("trainjobs", "small", {"metadata": {"labels": {"touch": "1"}}})
        wait_for("a reconcile after the edit", lambda: controller.reconciles() > reconciles)
        time.sleep(1.5)  # three intervals
        assert status_writes(controller) == writes
        assert custom.get_cluster_custom_object(*POLICIES, policy)["metadata"]["resourceVersion"] == rv

        # The policy deleted: its series leave the scrape (none stale).
        assert policy_results(controller, policy) == {"pass": 0, "warn": 0, "fail": 41}
        custom.delete_cluster_custom_object(*POLICIES, policy)
        wait_for("no trainguard_policy_results series of the deleted policy",
                 lambda: policy_results(controller, policy) == {})
    finally:
        controller.kill()
