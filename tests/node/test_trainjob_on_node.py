"""A 2-node TrainJob on a real node: the chart's webhook and controller, the JobSet controller, and two trainer pods
of the trainer image (the base image with trainguard installed) run by containerd, reading a DatasetCache.

Both trainer pods land on the one real node (numNodes 2 needs no second machine). Each runs
``tests/node/images/check_shards.py``: it opens every shard through the agent socket the TrainJob's wiring mounted
(the agent, in its own pod, hands the file descriptors over), checks their sha256 against what the test wrote,
shows the pages were resident before it read them (``mincore``) and are shared with the other trainer pod, not
copied (``/proc/self/smaps``: no anonymous page; every resident page mapped by another process too), prints
what it found and exits 0. Then:

- the TrainJob is Complete (its JobSet completed), and ``kubectl logs`` and the Kubeflow SDK's
  ``TrainerClient().get_job_logs()`` return what each trainer printed; both saw the same inode as the file the
  test wrote on the node;
- a trainer that exits 1 makes the TrainJob Failed, with the JobSet's reason and message, and its output readable
  the same two ways.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest
from kubernetes import client, config

from tests.node.node_harness import (  # noqa: F401 - fixtures
    SHARD_ROOT,
    TRAINER_IMAGE,
    NodeCluster,
    dataset_cache,
    jobset,
    node_cluster_,
    ready,
    release,
    trainer_script,
    wait_for,
    write_shards,
)

pytestmark = pytest.mark.node

ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
SIZES = [2 << 20, 1 << 20 | 7, 3 << 20]


def runtime(namespace: str) -> dict[str, Any]:
    """A namespaced runtime of the trainer image; the SDK reads its framework label. A failed trainer is not
    retried (backoffLimit 0, restartPolicy Never), so a failure reaches the TrainJob at once."""
    node = {"name": "node", "image": TRAINER_IMAGE, "imagePullPolicy": "Never"}
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
        "metadata": {"name": "shard-check", "namespace": namespace,
                     "labels": {"trainer.kubeflow.org/framework": "torch"}},
        "spec": {"mlPolicy": {"numNodes": 1}, "template": {"spec": {"replicatedJobs": [{
            "name": "node",
            "template": {"metadata": {"labels": {ANCESTOR: "trainer"}},
                         "spec": {"backoffLimit": 0,
                                  "template": {"spec": {"restartPolicy": "Never", "containers": [node]}}}},
        }]}}},
    }


def shard_trainjob(name: str, namespace: str, nodes: int, env: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": name, "namespace": namespace, "annotations": {"trainguard.io/dataset-cache": "shards"}},
        "spec": {"runtimeRef": {"name": "shard-check", "kind": "TrainingRuntime"},
                 "trainer": {"numNodes": nodes, "command": ["python3", "-c", trainer_script()],
                             "env": [{"name": k, "value": v} for k, v in env.items()]}},
    }


@pytest.fixture
def team(release: NodeCluster) -> Iterator[tuple[NodeCluster, str, Path, dict[str, str]]]:
    """A namespace with the runtime and a warm DatasetCache over shard files written on the node."""
    c = release
    namespace = f"node-train-{uuid.uuid4().hex[:6]}"
    c.kubectl("create", "namespace", namespace)
    directory = SHARD_ROOT / namespace
    expected = write_shards(directory, SIZES)
    try:
        c.kubectl("create", "-f", "-", input=json.dumps(runtime(namespace)))
        c.kubectl("create", "-f", "-", input=json.dumps(dataset_cache("shards", namespace, directory)))
        wait_for("the DatasetCache to be warm on the node",
                 lambda: ((c.get("datasetcache", "shards", "-n", namespace) or {}).get("status") or {})
                 .get("bytesResident") == sum(SIZES), 180, diagnose=lambda: c.describe(namespace))
        yield c, namespace, directory, expected
    finally:
        c.kubectl("delete", "trainjobs,datasetcaches", "--all", "-n", namespace, "--wait=false", check=False)
        for p in directory.glob("*.bin"):
            p.unlink()
        if directory.exists():
            os.rmdir(directory)


def condition(job: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((x for x in (job.get("status") or {}).get("conditions") or [] if x["type"] == kind), None)


def finished(c: NodeCluster, namespace: str, name: str) -> dict[str, Any] | None:
    job = c.get("trainjob", name, "-n", namespace)
    if job and any((condition(job, t) or {}).get("status") == "True" for t in ("Complete", "Failed")):
        return job
    return None


def state(c: NodeCluster, namespace: str, name: str) -> str | None:
    """The ``trainguard.io/state`` label: written by the reconcile after the one that copies the condition."""
    return ((c.get("trainjob", name, "-n", namespace) or {}).get("metadata", {}).get("labels") or {}).get(
        "trainguard.io/state")


def trainer_pods(c: NodeCluster, namespace: str, name: str) -> list[dict[str, Any]]:
    return sorted(c.pods(namespace, f"jobset.sigs.k8s.io/jobset-name={name}"),
                  key=lambda p: int(p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]))


def sdk(c: NodeCluster, namespace: str):  # -> kubeflow.trainer.TrainerClient
    from kubeflow.common.types import KubernetesBackendConfig
    from kubeflow.trainer import TrainerClient

    configuration = client.Configuration()
    config.load_kube_config(config_file=c.kubeconfig, client_configuration=configuration)
    return TrainerClient(KubernetesBackendConfig(namespace=namespace, client_configuration=configuration))


def test_two_trainer_pods_share_the_cached_shards_and_the_trainjob_completes(team) -> None:
    c, namespace, directory, expected = team
    env = {"EXPECTED_SHARDS": json.dumps(expected), "SHARE_WAIT": "90", "SHARE_HOLD": "3"}
    c.kubectl("create", "-f", "-", input=json.dumps(shard_trainjob("share", namespace, 2, env)))
    job = wait_for("the TrainJob to finish", lambda: finished(c, namespace, "share"), 300, every=1,
                   diagnose=lambda: c.describe(namespace))
    pods = trainer_pods(c, namespace, "share")
    logs = {p["metadata"]["name"]: c.kubectl("logs", "-n", namespace, p["metadata"]["name"], "-c", "node",
                                             check=False).stdout for p in pods}
    assert (condition(job, "Complete") or {}).get("status") == "True", (job["status"], logs)
    wait_for("the state label Complete", lambda: state(c, namespace, "share") == "Complete", 30)

    assert len(pods) == 2, [p["metadata"]["name"] for p in pods]
    inodes = {name: (directory / name).stat().st_ino for name in expected}
    for rank, pod in enumerate(pods):
        assert pod["spec"]["nodeName"] == c.node_name
        (status,) = pod["status"]["containerStatuses"]
        assert status["state"]["terminated"]["exitCode"] == 0
        assert status["image"].endswith(TRAINER_IMAGE)
        out = logs[pod["metadata"]["name"]]
        assert f"rank {rank}: TRAINER OK {len(expected)} shards verified" in out, out
        for name, digest in expected.items():
            assert re.search(rf"shard {re.escape(name)} bytes \d+ sha256 {digest} resident-before-read (\d+)/\1 pages",
                             out), (name, out)
            # The very file the test wrote on the node, mapped: every resident page shared, nothing anonymous.
            m = re.search(rf"smaps {re.escape(name)} inode (\d+) Rss (\d+) kB Shared (\d+) kB Private 0 kB "
                          r"Anonymous 0 kB", out)
            assert m, (name, out)
            assert int(m[1]) == inodes[name] and int(m[2]) == int(m[3]) > 0, (name, m[0])
        print(out)

    trainer = sdk(c, namespace)
    assert trainer.get_job("share").status == "Complete"
    for rank, pod in enumerate(pods):
        lines = list(trainer.get_job_logs("share", step=f"node-{rank}"))
        assert f"rank {rank}: TRAINER OK {len(expected)} shards verified" in lines, lines
        assert "\n".join(lines).strip() == logs[pod["metadata"]["name"]].strip()


def test_a_trainer_that_exits_1_fails_the_trainjob_with_the_reason(team) -> None:
    c, namespace, _, expected = team
    env = {"EXPECTED_SHARDS": json.dumps(expected), "FAIL_ON_PURPOSE": "loss is NaN at step 3"}
    c.kubectl("create", "-f", "-", input=json.dumps(shard_trainjob("diverged", namespace, 1, env)))
    job = wait_for("the TrainJob to finish", lambda: finished(c, namespace, "diverged"), 300, every=1,
                   diagnose=lambda: c.describe(namespace))
    failed = condition(job, "Failed")
    assert failed and failed["status"] == "True", job["status"]
    assert condition(job, "Complete") is None or condition(job, "Complete")["status"] != "True"
    assert failed["reason"] == "FailedJobs", failed
    assert "jobset failed" in failed["message"].lower() and "diverged-node-0" in failed["message"], failed
    wait_for("the state label Failed", lambda: state(c, namespace, "diverged") == "Failed", 30)

    (pod,) = trainer_pods(c, namespace, "diverged")
    (status,) = pod["status"]["containerStatuses"]
    assert status["state"]["terminated"]["exitCode"] == 1, status
    out = c.kubectl("logs", "-n", namespace, pod["metadata"]["name"], "-c", "node").stdout
    assert "rank 0: failing on purpose: loss is NaN at step 3" in out, out
    trainer = sdk(c, namespace)
    assert trainer.get_job("diverged").status == "Failed"
    assert "rank 0: failing on purpose: loss is NaN at step 3" in list(trainer.get_job_logs("diverged"))
    print(f"Failed: {failed['reason']}: {failed['message']}")
