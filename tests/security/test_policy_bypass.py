"""Issue 10, items 1, 7 and 8: stepping around an Enforce TrainJobPolicy, performed as a namespace user against the
real apiserver and the real ``trainguard webhook``, with the example ``gpu-teams`` policy
(examples/gpu-topology-policy.yaml). Each attack must now fail, and the legitimate neighbour still work.

1. A ``trainguard.io/webhook: disabled`` label on the TrainJob used to skip every webhook (objectSelector): a job
   the policy denies (100 nodes x 16 GPUs, a foreign image) was created. Only an admin exempts, by labelling the
   Namespace, which the user cannot do.
7. A namespaced TrainingRuntime of the same name as an allowed ClusterTrainingRuntime, with a privileged, hostPID,
   hostPath ``/`` side job of a foreign image, was admitted (``allowedRuntimes`` matched by name; images checked on
   trainer jobs only).
8. Removing ``kueue.x-k8s.io/queue-name`` and then unsuspending escaped Kueue (policy defaults applied on CREATE
   only).
"""

from __future__ import annotations

import copy
import json
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
VALIDATOR = 'admission webhook "validator.trainjob.trainer.kubeflow.org" denied the request'
QUEUE = "kueue.x-k8s.io/queue-name"
PRIORITY = "kueue.x-k8s.io/priority-class"
GOOD_IMAGE = "ghcr.io/acme/train:1.0"
REQUESTS = {"requests": {"cpu": "4", "memory": "16Gi"}, "limits": {"nvidia.com/gpu": 8}}


def example(kind: str) -> dict[str, Any]:
    docs = yaml.safe_load_all((REPO / "examples" / "gpu-topology-policy.yaml").read_text())
    return next(d for d in docs if d and d["kind"] == kind)


def ctr_runtime(name: str) -> dict[str, Any]:
    """The example's torch-distributed ClusterTrainingRuntime, under a per-test name."""
    docs = yaml.safe_load_all((REPO / "examples" / "torch-distributed-gpu.yaml").read_text())
    rt = copy.deepcopy(next(d for d in docs if d["kind"] == "ClusterTrainingRuntime"))
    rt["metadata"]["name"] = name
    return rt


def trainjob(name: str, runtime: str, *, kind: str = "ClusterTrainingRuntime", labels: dict | None = None,
             nodes: int = 2, image: str = GOOD_IMAGE, resources: dict | None = None) -> dict[str, Any]:
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": name, **({"labels": labels} if labels else {})},
            "spec": {"runtimeRef": {"name": runtime, "kind": kind},
                     "trainer": {"image": image, "numNodes": nodes, "resourcesPerNode": resources or REQUESTS}}}


def create(user, obj: dict[str, Any]):
    return user.kubectl("create", "-f", "-", input=json.dumps(obj), check=False)


def get(cluster, namespace: str, name: str) -> dict[str, Any] | None:
    proc = cluster.kubectl("get", "trainjob", name, "-n", namespace, "-o", "json", check=False)
    return json.loads(proc.stdout) if proc.returncode == 0 else None


def wait_until(predicate, what: str, timeout: float = 30) -> None:
    """The webhook reads policies and namespace labels from watch caches: wait until a change has reached it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def gpu_teams(cluster, namespace: str, admission) -> Iterator[dict[str, str]]:
    """The example Enforce policy selecting the test namespace (labelled by the admin), plus an allowed
    ClusterTrainingRuntime; yields the names. Waits until the webhook enforces the policy."""
    runtime = f"torch-{uuid.uuid4().hex[:6]}"
    policy = copy.deepcopy(example("TrainJobPolicy"))
    policy["metadata"]["name"] = f"gpu-teams-{uuid.uuid4().hex[:6]}"
    policy["spec"]["limits"]["allowedRuntimes"] = [runtime]  # a plain name: the ClusterTrainingRuntime only
    cluster.kubectl("label", "namespace", namespace, "trainguard.io/tier=gpu")
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([ctr_runtime(runtime), policy]))
    probe = trainjob("probe", runtime, nodes=100)
    wait_until(lambda: "maxTotalGpus" in cluster.kubectl(
        "create", "--dry-run=server", "-n", namespace, "-f", "-", input=json.dumps(probe), check=False).stderr,
        "the webhook to enforce the policy")
    try:
        yield {"runtime": runtime, "policy": policy["metadata"]["name"]}
    finally:
        cluster.kubectl("delete", "trainjobpolicy", policy["metadata"]["name"], "--ignore-not-found", check=False)
        cluster.kubectl("delete", "clustertrainingruntime", runtime, "--ignore-not-found", check=False)


# --- 1: no user-settable opt-out ---------------------------------------------------------------------------------


def test_opt_out_label_on_the_trainjob_no_longer_skips_the_webhooks(cluster, namespace, namespace_user, gpu_teams):
    attack = trainjob("skip-webhooks", gpu_teams["runtime"], labels={"trainguard.io/webhook": "disabled"},
                      nodes=100, image="docker.io/evil/miner:1",
                      resources={"requests": {"cpu": "4", "memory": "16Gi"}, "limits": {"nvidia.com/gpu": 16}})
    proc = create(namespace_user, attack)
    assert proc.returncode != 0, proc.stdout
    assert VALIDATOR in proc.stderr
    for part in ("spec.trainer.resourcesPerNode: Invalid value: 16: 16 nvidia.com/gpu per node exceed maxGpusPerNode 8",
                 'spec.trainer.image: Invalid value: "docker.io/evil/miner:1"',
                 "more than maxTotalGpus 512"):
        assert part in proc.stderr, proc.stderr
    assert get(cluster, namespace, "skip-webhooks") is None

    # The neighbour: a job within the policy, with the same label, is admitted AND defaulted (Kueue, suspended).
    ok = trainjob("within-policy", gpu_teams["runtime"], labels={"trainguard.io/webhook": "disabled"})
    assert create(namespace_user, ok).returncode == 0
    stored = get(cluster, namespace, "within-policy")
    assert stored["metadata"]["labels"][QUEUE] == "team-gpu" and stored["spec"]["suspend"] is True


def test_only_an_admin_exempts_a_namespace(cluster, namespace, namespace_user, gpu_teams):
    denied = namespace_user.kubectl("label", "namespace", namespace, "trainguard.io/webhook=disabled", check=False)
    assert denied.returncode != 0 and "forbidden" in denied.stderr.lower()

    cluster.kubectl("label", "namespace", namespace, "trainguard.io/webhook=disabled")
    big = trainjob("exempted", gpu_teams["runtime"], nodes=100)
    # The apiserver re-reads namespace labels for every request; the exemption is immediate but allow for caches.
    wait_until(lambda: create(namespace_user, big).returncode == 0, "the admin's exemption to apply")
    assert QUEUE not in (get(cluster, namespace, "exempted")["metadata"].get("labels") or {})


# --- 7: a namespaced runtime cannot shadow an allowed ClusterTrainingRuntime ------------------------------------


def shadow_runtime(name: str) -> dict[str, Any]:
    rt = ctr_runtime(name)
    rt["kind"] = "TrainingRuntime"
    jobs = rt["spec"]["template"]["spec"]["replicatedJobs"]
    jobs[0]["template"]["spec"]["template"]["spec"]["containers"][0]["image"] = GOOD_IMAGE
    jobs.append({"name": "sidecar", "template": {"spec": {"template": {"spec": {
        "hostPID": True,
        "volumes": [{"name": "host", "hostPath": {"path": "/"}}],
        "containers": [{"name": "pwn", "image": "docker.io/evil/root:1", "securityContext": {"privileged": True},
                        "volumeMounts": [{"name": "host", "mountPath": "/host"}]}]}}}}})
    return rt


def test_namespaced_runtime_of_an_allowed_name_cannot_shadow_it(cluster, namespace, namespace_user, gpu_teams):
    runtime = gpu_teams["runtime"]
    assert namespace_user.kubectl("create", "-f", "-", input=json.dumps(shadow_runtime(runtime)), check=False).returncode == 0
    proc = create(namespace_user, trainjob("shadowed", runtime, kind="TrainingRuntime"))
    assert proc.returncode != 0 and VALIDATOR in proc.stderr
    for part in (f'spec.runtimeRef.kind: Invalid value: "TrainingRuntime": TrainingRuntime "{runtime}" is not allowed '
                 f'by TrainJobPolicy "{gpu_teams["policy"]}"; allowed: ClusterTrainingRuntime/{runtime}',
                 'spec.runtimeRef: Invalid value: "docker.io/evil/root:1": image of container pwn in replicatedJob sidecar',
                 "replicatedJobs[sidecar].template.spec.template.spec.hostPID: Forbidden",
                 "replicatedJobs[sidecar].template.spec.template.spec.volumes[host].hostPath: Forbidden",
                 "replicatedJobs[sidecar].template.spec.template.spec.containers[pwn].securityContext.privileged: "
                 "Forbidden"):
        assert part in proc.stderr, proc.stderr
    assert get(cluster, namespace, "shadowed") is None
    # The neighbour: the same job on the allowed ClusterTrainingRuntime.
    assert create(namespace_user, trainjob("on-the-allowed-runtime", runtime)).returncode == 0


# --- 8: Kueue cannot be escaped after admission -------------------------------------------------------------------


def patch(user, name: str, body: dict[str, Any]):
    return user.kubectl("patch", "trainjob", name, "--type", "merge", "-p", json.dumps(body), check=False)


def test_kueue_cannot_be_escaped_after_admission(cluster, namespace, namespace_user, gpu_teams):
    assert create(namespace_user, trainjob("queued", gpu_teams["runtime"])).returncode == 0
    assert get(cluster, namespace, "queued")["metadata"]["labels"][QUEUE] == "team-gpu"

    removed = namespace_user.kubectl("label", "trainjob", "queued", f"{QUEUE}-", check=False)
    assert removed.returncode != 0 and VALIDATOR in removed.stderr
    assert f"metadata.labels[{QUEUE}]: Forbidden: cannot be removed while TrainJobPolicy" in removed.stderr
    changed = namespace_user.kubectl("label", "--overwrite", "trainjob", "queued", f"{QUEUE}=free-for-all", check=False)
    assert changed.returncode != 0 and "cannot be changed to 'free-for-all'" in changed.stderr
    both = patch(namespace_user, "queued", {"metadata": {"labels": {QUEUE: None, PRIORITY: None}}, "spec": {"suspend": False}})
    assert both.returncode != 0 and f"metadata.labels[{QUEUE}]: Forbidden" in both.stderr
    stored = get(cluster, namespace, "queued")
    assert stored["metadata"]["labels"][QUEUE] == "team-gpu" and stored["spec"]["suspend"] is True

    # The neighbours: an unrelated label edit, and Kueue admitting the job (unsuspend with its label kept).
    assert namespace_user.kubectl("label", "trainjob", "queued", "note=ok").returncode == 0
    kueue = cluster.kubectl("patch", "trainjob", "queued", "-n", namespace, "--type", "merge",
                            "-p", json.dumps({"spec": {"suspend": False}}), check=False)
    assert kueue.returncode == 0, kueue.stderr
    assert get(cluster, namespace, "queued")["spec"]["suspend"] is False


def test_a_job_without_the_queue_label_cannot_be_unsuspended(cluster, namespace, namespace_user, gpu_teams):
    # Created while the namespace was exempted (an admin's choice), so it never got the policy's labels.
    cluster.kubectl("label", "namespace", namespace, "trainguard.io/webhook=disabled")
    legacy = trainjob("legacy", gpu_teams["runtime"])
    legacy["spec"]["suspend"] = True
    wait_until(lambda: create(namespace_user, legacy).returncode == 0, "the exemption")
    cluster.kubectl("label", "namespace", namespace, "trainguard.io/webhook-")
    unsuspend = {"spec": {"suspend": False}}
    wait_until(lambda: namespace_user.kubectl("patch", "trainjob", "legacy", "--dry-run=server", "--type", "merge",
                                              "-p", json.dumps(unsuspend), check=False).returncode != 0,
               "the webhook to judge the namespace again")
    proc = patch(namespace_user, "legacy", unsuspend)
    assert proc.returncode != 0 and VALIDATOR in proc.stderr, proc.stderr
    assert f"metadata.labels[{QUEUE}]: Required value" in proc.stderr and "cannot be unsuspended" in proc.stderr
    # The neighbour: adding the label, then unsuspending, is fine.
    assert namespace_user.kubectl("label", "trainjob", "legacy", f"{QUEUE}=team-gpu", f"{PRIORITY}=standard").returncode == 0
    assert patch(namespace_user, "legacy", {"spec": {"suspend": False}}).returncode == 0
