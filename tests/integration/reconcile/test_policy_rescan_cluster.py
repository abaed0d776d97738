"""``trainguard controller --policy-rescan-interval``: the real process, against the real apiserver, checks each
unfinished TrainJob again on every interval with nothing changed in the cluster, and never with the flag at 0."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from reconcile_harness import Api, ControllerProcess, wait_for

ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"


def _runtime() -> dict:
    node = {"name": "node", "image": "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"}
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
        "metadata": {"name": "torch-distributed"},
        "spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "template": {"spec": {"replicatedJobs": [{
            "name": "node", "template": {"metadata": {"labels": {ANCESTOR: "trainer"}},
                                         "spec": {"template": {"spec": {"containers": [node]}}}}}]}}},
    }


def _trainjob_reconciles(controller: ControllerProcess) -> float:
    return sum(v for k, v in controller.metrics().items()
               if k.startswith("trainguard_reconcile_total{") and 'kind="TrainJob"' in k)


def _settled(controller: ControllerProcess) -> float | None:
    """The TrainJob reconcile count once it stops moving (the JobSet's own events cause a few), else None."""
    count = _trainjob_reconciles(controller)
    time.sleep(1.5)
    return count if _trainjob_reconciles(controller) == count else None


@pytest.mark.parametrize("interval", ["1", "0"])
def test_the_controller_rechecks_unfinished_jobs_every_interval(cluster, namespace, tmp_path: Path,
                                                                interval: str) -> None:
    api = Api(cluster.api_client(), namespace)
    api.create("trainingruntimes", _runtime())
    api.create("trainjobs", {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": "rescanned"},
        "spec": {"runtimeRef": {"name": "torch-distributed", "kind": "TrainingRuntime"}, "trainer": {"numNodes": 1}},
    })
    controller = ControllerProcess(cluster.kubeconfig, namespace, f"rescan-{interval}", tmp_path,
                                   extra=["--policy-rescan-interval", interval]).start()
    try:
        wait_for("the JobSet", lambda: api.jobset("rescanned"))
        if interval == "0":
            before = wait_for("a settled controller", lambda: _settled(controller), timeout=30)
            time.sleep(3.5)
            assert _trainjob_reconciles(controller) == before
            assert controller.metrics().get("trainguard_policy_rescans_total", 0.0) == 0
            return
        scans, before = controller.metrics().get("trainguard_policy_rescans_total", 0.0), _trainjob_reconciles(controller)
        time.sleep(4.5)
        new_scans = controller.metrics()["trainguard_policy_rescans_total"] - scans
        assert new_scans >= 3
        assert _trainjob_reconciles(controller) - before >= new_scans  # each scan reconciled the job once more
        assert controller.metrics()["trainguard_policy_rescan_jobs"] == 1
        assert "policy rescan: 1 unfinished TrainJobs queued" in controller.log()
    finally:
        controller.kill()
