"""``trainguard controller`` against the real apiserver with the real JobSet CRD (no JobSet controller).

TrainJobs are created directly (no TrainJob webhook is registered here). JobSet status is written by the tests,
standing in for the JobSet controller.
"""

from __future__ import annotations

import base64
import copy
from pathlib import Path
from typing import Any, Iterator

import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from reconcile_harness import (
    LEASE_DURATION,
    RETRY_PERIOD,
    Api,
    ControllerProcess,
    condition,
    wait_for,
)
from trainguard.webhook.runtime import build_objects, placeholder_keys

ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
STATE = "trainguard.io/state"


@pytest.fixture
def api(cluster, namespace: str) -> Api:
    return Api(cluster.api_client(), namespace)


@pytest.fixture
def controllers(cluster, namespace: str, tmp_path: Path) -> Iterator[list[ControllerProcess]]:
    started: list[ControllerProcess] = []
    yield started
    for proc in started:
        proc.kill()


def start(controllers: list[ControllerProcess], cluster, namespace: str, tmp_path: Path, identity: str = "a",
          **kw: Any) -> ControllerProcess:
    proc = ControllerProcess(cluster.kubeconfig, namespace, identity, tmp_path, **kw)
    controllers.append(proc)
    return proc.start()


# ---- objects ---------------------------------------------------------------------------------------------------
def job(name: str, runtime: str, kind: str = "TrainingRuntime", **spec: Any) -> dict:
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": name},
            "spec": {"runtimeRef": {"name": runtime, "kind": kind}, **spec}}


def runtime(name: str, ml_policy: dict, jobs: list[dict], *, pod_group: dict | None = None,
            labels: dict | None = None) -> dict:
    spec: dict[str, Any] = {"mlPolicy": ml_policy, "template": {"spec": {"replicatedJobs": jobs}}}
    if labels:
        spec["template"]["metadata"] = {"labels": labels}
    if pod_group:
        spec["podGroupPolicy"] = pod_group
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime", "metadata": {"name": name},
            "spec": spec}


def rjob(name: str, step: str | None, container: dict, **extra: Any) -> dict:
    template: dict[str, Any] = {"spec": {"template": {"spec": {"containers": [container], **extra}}}}
    if step:
        template["metadata"] = {"labels": {ANCESTOR: step}}
    return {"name": name, "template": template}


def node(image: str = "python:3.12", **extra: Any) -> dict:
    return {"name": "node", "image": image, **extra}


TORCH = runtime("torch-distributed", {"numNodes": 1, "torch": {}},
                [rjob("node", "trainer", node("pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"))])
MPI = runtime("mpi", {"numNodes": 1, "mpi": {"numProcPerNode": 1, "mpiImplementation": "OpenMPI",
                                             "sshAuthMountPath": "/root/.ssh", "runLauncherAsNode": False}},
              [rjob("launcher", "trainer", node("mpioperator/openmpi:1")), rjob("node", None, node("mpioperator/openmpi:1"))])
JAX = runtime("jax", {"numNodes": 1, "jax": {}}, [rjob("node", "trainer", node("jax:1"))])
XGBOOST = runtime("xgboost", {"numNodes": 1, "xgboost": {}}, [rjob("node", "trainer", node("xgboost:1"))])
FLUX = runtime("flux", {"numNodes": 1, "flux": {"numProcPerNode": 1}}, [rjob("node", "trainer", node("flux:1"))])
PLAIN = runtime(
    "plain-batch", {"numNodes": 2}, [
        rjob("dataset-initializer", "dataset-initializer",
             {"name": "dataset-initializer", "image": "ghcr.io/kubeflow/trainer/dataset-initializer",
              "resources": {"requests": {"cpu": "1"}}, "volumeMounts": [{"name": "initializer", "mountPath": "/workspace"}]},
             volumes=[{"name": "initializer", "persistentVolumeClaim": {"claimName": "data-pvc"}}]),
        {**rjob("node", "trainer", {"name": "node", "image": "python:3.12", "command": ["python", "/workspace/train.py"],
                                    "resources": {"requests": {"cpu": "4", "memory": "8Gi"}},
                                    "volumeMounts": [{"name": "initializer", "mountPath": "/workspace"}]},
                volumes=[{"name": "initializer", "persistentVolumeClaim": {"claimName": "data-pvc"}}]),
         "dependsOn": [{"name": "dataset-initializer", "status": "Complete"}]},
    ], pod_group={"coscheduling": {"scheduleTimeoutSeconds": 120}}, labels={"team": "a"})


def containers(jobset: dict, rjob_name: str, init: bool = False) -> dict[str, dict]:
    rj = next(r for r in jobset["spec"]["replicatedJobs"] if r["name"] == rjob_name)
    pod = rj["template"]["spec"]["template"]["spec"]
    return {c["name"]: c for c in pod.get("initContainers" if init else "containers") or []}


def env(container: dict) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env") or []}


def replicated(jobset: dict, name: str) -> dict:
    return next(r for r in jobset["spec"]["replicatedJobs"] if r["name"] == name)


def assert_subset(expected: Any, actual: Any, path: str = "") -> None:
    """Every field the controller meant to set is there with the same value; the apiserver may add defaults."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict), f"{path}: expected an object, got {actual!r}"
        for key, value in expected.items():
            assert key in actual, f"{path}.{key}: missing"
            assert_subset(value, actual[key], f"{path}.{key}")
    elif isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected), f"{path}: {expected!r} != {actual!r}"
        for i, (e, a) in enumerate(zip(expected, actual)):
            assert_subset(e, a, f"{path}[{i}]")
    else:
        assert expected == actual or str(expected) == str(actual), f"{path}: {expected!r} != {actual!r}"


def expected_jobset(api: Api, name: str, rt: dict) -> dict:
    """The JobSet the shared build makes for the stored TrainJob (the same call ``trainguard render`` makes)."""
    stored = api.trainjob(name)
    stored["status"] = {}
    stored_rt = api.get("trainingruntimes", rt["metadata"]["name"])
    objects = build_objects(stored, stored_rt, keys=placeholder_keys())
    return next(o for o in objects if o["kind"] == "JobSet")


# ---- every ML policy ---------------------------------------------------------------------------------------------
def test_every_ml_policy_builds_the_expected_jobset(cluster, namespace, api, controllers, tmp_path) -> None:
    for rt in (TORCH, MPI, JAX, XGBOOST, FLUX, PLAIN):
        api.create("trainingruntimes", copy.deepcopy(rt))
    api.create("trainjobs", job("llm-ddp", "torch-distributed", trainer={
        "image": "ghcr.io/acme/train:1.0", "command": ["torchrun", "/app/train.py"], "args": ["--epochs=3"],
        "numNodes": 4, "env": [{"name": "NCCL_DEBUG", "value": "INFO"}],
        "resourcesPerNode": {"requests": {"cpu": "32", "memory": "256Gi"}, "limits": {"nvidia.com/gpu": 8}}}))
    api.create("trainjobs", job("mpi-job", "mpi", trainer={"numNodes": 2, "command": ["mpirun", "train"]}))
    api.create("trainjobs", job("jax-job", "jax", trainer={"numNodes": 2}))
    api.create("trainjobs", job("xgb-job", "xgboost", trainer={"numNodes": 3}))
    api.create("trainjobs", job("flux-job", "flux", trainer={"numNodes": 2, "command": ["python", "train.py"]}))
    api.create("trainjobs", job("tab-train", "plain-batch", initializer={"dataset": {
        "storageUri": "hf://tatsu-lab/alpaca", "secretRef": {"name": "hf-token"},
        "env": [{"name": "IGNORE_PATTERNS", "value": "*.md"}]}},
        trainer={"numNodes": 3, "env": [{"name": "EPOCHS", "value": "5"}]},
        runtimePatches=[{"manager": "acme.io/platform", "trainingRuntimeSpec": {"template": {"spec": {
            "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {
                "nodeSelector": {"pool": "cpu-large"}}}}}}]}}}}]))
    start(controllers, cluster, namespace, tmp_path)

    names = {"llm-ddp": TORCH, "mpi-job": MPI, "jax-job": JAX, "xgb-job": XGBOOST, "flux-job": FLUX,
             "tab-train": PLAIN}
    built = {n: wait_for(f"JobSet {n}", lambda n=n: api.jobset(n)) for n in names}
    for name, rt in names.items():
        assert_subset(expected_jobset(api, name, rt), built[name], name)
        owner = built[name]["metadata"]["ownerReferences"]
        assert owner == [{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": name,
                          "uid": api.trainjob(name)["metadata"]["uid"], "controller": True,
                          "blockOwnerDeletion": True}]
        managers = {m["manager"] for m in built[name]["metadata"]["managedFields"]}
        assert managers == {"trainguard"}
        uid = api.trainjob(name)["metadata"]["uid"]
        assert api.configmap(f"runtime-snapshot-{uid}") is not None  # the harness's controller namespace
        assert api.configmap(f"{name}-runtime-snapshot") is None

    # 4.1 PyTorch multi-node GPU, field by field.
    torch = built["llm-ddp"]
    assert torch["spec"]["suspend"] is False
    node_job = replicated(torch, "node")
    assert (node_job["replicas"], node_job["template"]["spec"]["parallelism"],
            node_job["template"]["spec"]["completions"]) == (1, 4, 4)
    c = containers(torch, "node")["node"]
    assert (c["image"], c["command"], c["args"]) == ("ghcr.io/acme/train:1.0", ["torchrun", "/app/train.py"],
                                                    ["--epochs=3"])
    assert c["ports"] == [{"containerPort": 29500, "protocol": "TCP"}] or c["ports"] == [{"containerPort": 29500}]
    assert [e["name"] for e in c["env"]] == ["NCCL_DEBUG", "PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK",
                                            "PET_MASTER_ADDR", "PET_MASTER_PORT"]
    assert env(c)["PET_NNODES"] == "4" and env(c)["PET_NPROC_PER_NODE"] == "auto"
    assert env(c)["PET_MASTER_ADDR"] == "llm-ddp-node-0-0.llm-ddp" and env(c)["PET_MASTER_PORT"] == "29500"
    assert env(c)["PET_NODE_RANK"] == {"fieldRef": {
        "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}} or \
        env(c)["PET_NODE_RANK"]["fieldRef"]["fieldPath"] == \
        "metadata.annotations['batch.kubernetes.io/job-completion-index']"

    # MPI: SSH Secret (ECDSA P-521, immutable, created once), hostfile, OMPI env on the launcher.
    secret = api.secret("mpi-job-mpi-ssh-auth")
    assert secret.type == "kubernetes.io/ssh-auth" and secret.immutable is True
    key = load_pem_private_key(base64.b64decode(secret.data["ssh-privatekey"]), password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name == "secp521r1"
    assert api.configmap("mpi-job-mpi-hostfile") is not None
    launcher = containers(built["mpi-job"], "launcher")["node"]
    assert env(launcher)["OMPI_MCA_orte_default_hostfile"] == "/etc/mpi/hostfile"
    assert replicated(built["mpi-job"], "node")["template"]["spec"]["parallelism"] == 2

    # JAX and XGBoost framework env.
    jax = env(containers(built["jax-job"], "node")["node"])
    assert jax["JAX_NUM_PROCESSES"] == "2" and jax["JAX_COORDINATOR_ADDRESS"] == "jax-job-node-0-0.jax-job:29500"
    xgb = env(containers(built["xgb-job"], "node")["node"])
    assert xgb["DMLC_NUM_WORKER"] == "3" and xgb["DMLC_TRACKER_URI"] == "xgb-job-node-0-0.xgb-job"

    # Flux: wrapped command, installer init container, entrypoint ConfigMap, CURVE Secret.
    flux = containers(built["flux-job"], "node")["node"]
    assert flux["command"][:2] == ["/bin/bash", "/etc/flux-config/entrypoint.sh"]
    assert "flux-installer" in containers(built["flux-job"], "node", init=True)
    assert api.configmap("flux-job-flux-entrypoint") is not None
    assert api.secret("flux-job-flux-curve") is not None

    # 4.3 Plain ML + dataset initializer + coscheduling + runtimePatches.
    plain = built["tab-train"]
    assert plain["metadata"]["labels"]["team"] == "a"
    init = containers(plain, "dataset-initializer")["dataset-initializer"]
    assert env(init) == {"STORAGE_URI": "hf://tatsu-lab/alpaca", "IGNORE_PATTERNS": "*.md"}
    assert init["envFrom"] == [{"secretRef": {"name": "hf-token"}}]
    node_spec = replicated(plain, "node")["template"]["spec"]
    assert node_spec["parallelism"] == 3 and node_spec["template"]["spec"]["nodeSelector"] == {"pool": "cpu-large"}
    assert env(containers(plain, "node")["node"]) == {"EPOCHS": "5"}
    for name in ("dataset-initializer", "node"):
        labels = replicated(plain, name)["template"]["spec"]["template"]["metadata"]["labels"]
        assert labels["scheduling.x-k8s.io/pod-group"] == "tab-train"
    pg = api.get("podgroups", "tab-train", ("scheduling.x-k8s.io", "v1alpha1"))
    assert pg["spec"]["minMember"] == 4 and pg["spec"]["scheduleTimeoutSeconds"] == 120
    assert pg["spec"]["minResources"]["cpu"] == "13" and pg["spec"]["minResources"]["memory"] == "24Gi"

    # Metrics: every reconcile counted, API requests per reconcile observed.
    metrics = controllers[0].metrics()
    assert sum(v for k, v in metrics.items() if k.startswith('trainguard_reconcile_total{kind="TrainJob"')) >= 6
    assert metrics['trainguard_reconcile_api_requests_count{kind="TrainJob"}'] >= 6
    assert metrics["trainguard_leader"] == 1


# ---- status, suspend/resume, deadline, snapshot, #3779 ------------------------------------------------------------
def rjob_status(name: str, **counts: int) -> dict:
    return {"name": name, **{k: counts.get(k, 0) for k in ("ready", "succeeded", "failed", "active", "suspended")}}


def jobset_condition(type_: str, reason: str, message: str) -> dict:
    return {"type": type_, "status": "True", "reason": reason, "message": message,
            "lastTransitionTime": "2026-01-01T00:00:00Z"}


def test_status_propagates_from_the_jobset(cluster, namespace, api, controllers, tmp_path) -> None:
    api.create("trainingruntimes", copy.deepcopy(TORCH))
    api.create("trainjobs", job("st", "torch-distributed", trainer={"numNodes": 2}))
    proc = start(controllers, cluster, namespace, tmp_path)
    wait_for("JobSet", lambda: api.jobset("st"))
    wait_for("state Created", lambda: api.trainjob("st")["metadata"].get("labels", {}).get(STATE) == "Created")

    api.patch_jobset_status("st", {"replicatedJobsStatus": [rjob_status("node", ready=1, active=1)]})
    tj = wait_for("jobsStatus", lambda: (t := api.trainjob("st")).get("status", {}).get("jobsStatus") and t)
    assert tj["status"]["jobsStatus"] == [rjob_status("node", ready=1, active=1)]
    wait_for("state Running", lambda: api.trainjob("st")["metadata"]["labels"].get(STATE) == "Running")
    assert "conditions" not in api.trainjob("st")["status"], "Running is a label, never a condition (SDK)"

    api.patch_jobset_status("st", {
        "conditions": [jobset_condition("Completed", "AllJobsCompleted", "jobset completed successfully")],
        "replicatedJobsStatus": [rjob_status("node", succeeded=1)]})
    tj = wait_for("Complete", lambda: condition(t := api.trainjob("st"), "Complete") and t)
    assert condition(tj, "Complete")["reason"] == "AllJobsCompleted"
    assert condition(tj, "Complete")["message"] == "jobset completed successfully"
    wait_for("state Complete", lambda: api.trainjob("st")["metadata"]["labels"].get(STATE) == "Complete")
    reasons = {e["reason"] for e in wait_for("events", lambda: len(api.events("st")) >= 2 and api.events("st"))}
    assert {"Created", "Completed"} <= reasons
    assert proc.reconciles() >= 3


def test_suspend_resume_reapplies_the_jobset(cluster, namespace, api, controllers, tmp_path) -> None:
    api.create("trainingruntimes", copy.deepcopy(TORCH))
    api.create("trainjobs", job("sr", "torch-distributed", suspend=True, trainer={"numNodes": 2}))
    start(controllers, cluster, namespace, tmp_path)
    js = wait_for("suspended JobSet", lambda: api.jobset("sr"))
    assert js["spec"]["suspend"] is True
    tj = wait_for("Suspended", lambda: condition(t := api.trainjob("sr"), "Suspended") and t)
    assert (condition(tj, "Suspended")["status"], condition(tj, "Suspended")["reason"]) == ("True", "Suspended")

    # A patch made while suspended (Kueue's way) reaches the JobSet.
    api.patch("trainjobs", "sr", {"spec": {"runtimePatches": [{"manager": "kueue.x-k8s.io/manager",
        "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {
            "template": {"spec": {"nodeSelector": {"flavor": "a100"}}}}}}]}}}}]}})
    wait_for("nodeSelector applied while suspended", lambda: replicated(api.jobset("sr"), "node")["template"]["spec"]
             ["template"]["spec"].get("nodeSelector") == {"flavor": "a100"})

    api.patch("trainjobs", "sr", {"spec": {"suspend": False}})
    wait_for("JobSet resumed", lambda: api.jobset("sr")["spec"]["suspend"] is False)
    # Resumed: the Suspended condition goes (upstream keeps False/Resumed; the SDK reads Running only from a job
    # without conditions) and the resume time, from which activeDeadlineSeconds counts, is stored beside them.
    tj = wait_for("Resumed", lambda: (t := api.trainjob("sr")).get("status", {}).get("lastResumeTime") and t)
    assert condition(tj, "Suspended") is None, tj["status"]
    assert replicated(api.jobset("sr"), "node")["template"]["spec"]["template"]["spec"]["nodeSelector"] == {
        "flavor": "a100"}
    reasons = {e["reason"] for e in wait_for("events", lambda: len(api.events("sr")) >= 3 and api.events("sr"))}
    assert {"Created", "Suspended", "Resumed"} <= reasons


def test_active_deadline_fails_the_job_and_deletes_its_jobset(cluster, namespace, api, controllers, tmp_path) -> None:
    api.create("trainingruntimes", copy.deepcopy(TORCH))
    api.create("trainjobs", job("dl", "torch-distributed", activeDeadlineSeconds=2, trainer={"numNodes": 1}))
    start(controllers, cluster, namespace, tmp_path)
    tj = wait_for("DeadlineExceeded", lambda: condition(t := api.trainjob("dl"), "Failed") and t)
    assert (condition(tj, "Failed")["reason"], condition(tj, "Failed")["message"]) == (
        "DeadlineExceeded", "TrainJob exceeded its active deadline")
    wait_for("JobSet deleted", lambda: api.jobset("dl") is None)


def test_runtime_edits_after_start_do_not_change_the_job(cluster, namespace, api, controllers, tmp_path) -> None:
    api.create("trainingruntimes", copy.deepcopy(TORCH))
    api.create("trainjobs", job("snap", "torch-distributed", suspend=True, trainer={"numNodes": 1}))
    proc = start(controllers, cluster, namespace, tmp_path)
    wait_for("JobSet", lambda: api.jobset("snap"))
    image = containers(api.jobset("snap"), "node")["node"]["image"]
    api.patch("trainingruntimes", "torch-distributed", {"spec": {"template": {"spec": {"replicatedJobs": [
        rjob("node", "trainer", node("edited/image:2"))]}}}})
    # Suspended jobs are re-applied on every reconcile; make one happen after the edit, then resume.
    before = proc.reconciles()
    api.patch("trainjobs", "snap", {"metadata": {"annotations": {"touch": "1"}}})
    wait_for("a reconcile after the edit", lambda: proc.reconciles() > before)
    api.patch("trainjobs", "snap", {"spec": {"suspend": False}})
    wait_for("resumed", lambda: api.jobset("snap")["spec"]["suspend"] is False)
    assert containers(api.jobset("snap"), "node")["node"]["image"] == image


def test_failed_job_whose_jobset_was_deleted_is_not_recreated(cluster, namespace, api, controllers, tmp_path) -> None:
    api.create("trainingruntimes", copy.deepcopy(TORCH))
    api.create("trainjobs", job("f", "torch-distributed", trainer={"numNodes": 1}))
    proc = start(controllers, cluster, namespace, tmp_path)
    wait_for("JobSet", lambda: api.jobset("f"))
    api.patch_jobset_status("f", {"conditions": [jobset_condition(
        "Failed", "ReachedMaxRestarts", "jobset failed due to reaching max number of restarts")]})
    wait_for("Failed", lambda: condition(api.trainjob("f"), "Failed"))
    api.delete_jobset("f")  # what the JobSet TTL does
    wait_for("JobSet gone", lambda: api.jobset("f") is None)
    before = proc.reconciles()
    api.patch("trainjobs", "f", {"metadata": {"annotations": {"touch": "1"}}})
    wait_for("a reconcile after the deletion", lambda: proc.reconciles() > before)
    assert api.jobset("f") is None
    assert condition(api.trainjob("f"), "Failed")["reason"] == "ReachedMaxRestarts"


# ---- crash, restart, HA -------------------------------------------------------------------------------------------
def test_killed_mid_burst_then_restarted_every_trainjob_has_exactly_one_jobset(
        cluster, namespace, api, controllers, tmp_path) -> None:
    api.create("trainingruntimes", copy.deepcopy(TORCH))
    names = [f"burst-{i:02d}" for i in range(30)]
    for name in names:
        api.create("trainjobs", job(name, "torch-distributed", trainer={"numNodes": 1}))
    first = start(controllers, cluster, namespace, tmp_path, identity="first", workers=1)
    wait_for("some JobSets", lambda: len(api.jobsets()) >= 3, interval=0.05)
    first.kill()
    second = start(controllers, cluster, namespace, tmp_path, identity="second")
    wait_for("all JobSets", lambda: len(api.jobsets()) == len(names), timeout=180)
    jobsets = api.jobsets()
    assert sorted(j["metadata"]["name"] for j in jobsets) == names
    for js in jobsets:
        (owner,) = js["metadata"]["ownerReferences"]
        assert owner["uid"] == api.trainjob(js["metadata"]["name"])["metadata"]["uid"]
    assert second.ready()


def test_two_replicas_one_leader_and_failover(cluster, namespace, api, controllers, tmp_path) -> None:
    api.create("trainingruntimes", copy.deepcopy(TORCH))
    a = start(controllers, cluster, namespace, tmp_path, identity="replica-a")
    b = start(controllers, cluster, namespace, tmp_path, identity="replica-b")
    holder = wait_for("a leader", lambda: api.lease().spec.holder_identity)
    leader, standby = (a, b) if holder == "replica-a" else (b, a)
    wait_for("leader metric", lambda: leader.metrics()["trainguard_leader"] == 1)
    assert standby.metrics()["trainguard_leader"] == 0
    api.create("trainjobs", job("before", "torch-distributed", trainer={"numNodes": 1}))
    wait_for("JobSet from the first leader", lambda: api.jobset("before"))
    assert standby.reconciles() == 0, "a standby must not reconcile"

    last_renewal = api.lease().spec.renew_time
    leader.kill()
    lease = wait_for("failover", lambda: (l := api.lease()).spec.holder_identity == standby.identity and l, timeout=60)
    # Judged on the Lease's own timestamps: the standby took over within the lease duration of the last renewal
    # it could have seen (plus its polling period, with jitter).
    gap = (lease.spec.acquire_time - last_renewal).total_seconds()
    assert gap <= LEASE_DURATION + 2 * 1.2 * RETRY_PERIOD + 1.0, gap
    assert lease.spec.lease_transitions >= 1
    api.create("trainjobs", job("after", "torch-distributed", trainer={"numNodes": 1}))
    wait_for("JobSet from the new leader", lambda: api.jobset("after"))

    # Graceful shutdown releases the Lease.
    assert standby.terminate() == 0
    assert not api.lease().spec.holder_identity


# ---- DatasetCache ------------------------------------------------------------------------------------------------
def test_dataset_cache_gets_its_agents_and_status(cluster, namespace, api, controllers, tmp_path) -> None:
    from kubernetes import client

    api.create("datasetcaches", {
        "apiVersion": "trainguard.io/v1alpha1", "kind": "DatasetCache", "metadata": {"name": "imagenet"},
        "spec": {"source": {"hostPath": {"path": "/mnt/datasets/imagenet"}, "shards": "train-*.tar"},
                 "memoryBudget": "8Gi"}}, ("trainguard.io", "v1alpha1"))
    # The admin allows hostPath sources below /mnt/datasets (none are allowed by default).
    start(controllers, cluster, namespace, tmp_path, extra=["--dataset-cache-allowed-host-path=/mnt/datasets"])
    apps = client.AppsV1Api(api.core.api_client)
    ds = wait_for("agent DaemonSet", lambda: apps.read_namespaced_daemon_set("trainguard-cache-imagenet", namespace))
    assert ds.metadata.owner_references[0].kind == "DatasetCache"
    assert api.core.read_namespaced_service_account("trainguard-cache-imagenet", namespace)
    status = wait_for("status written", lambda: api.get("datasetcaches", "imagenet",
                                                        ("trainguard.io", "v1alpha1")).get("status"))
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False"  # no DaemonSet controller here, so no node is scheduled

    # Stand in for the DaemonSet controller: one node desired; the status follows.
    apps.patch_namespaced_daemon_set_status("trainguard-cache-imagenet", namespace, {"status": {
        "desiredNumberScheduled": 1, "currentNumberScheduled": 0, "numberMisscheduled": 0, "numberReady": 0}})
    wait_for("nodesDesired", lambda: api.get("datasetcaches", "imagenet", ("trainguard.io", "v1alpha1"))
             ["status"].get("nodesDesired") == 1)


# ---- render and the controller agree ---------------------------------------------------------------------------
@pytest.mark.parametrize("rt, trainer", [
    (TORCH, {"numNodes": 3, "image": "ghcr.io/acme/train:1.0", "command": ["torchrun", "train.py"],
             "resourcesPerNode": {"limits": {"cpu": "3.7"}}}),
    (MPI, {"numNodes": 2, "command": ["mpirun", "train"]}),
    (PLAIN, {"numNodes": 3, "env": [{"name": "EPOCHS", "value": "5"}]}),
], ids=["torch", "mpi", "plain-coscheduling"])
def test_render_and_controller_produce_identical_jobsets(cluster, namespace, api, controllers, tmp_path, rt,
                                                         trainer) -> None:
    import json
    import subprocess

    import yaml

    from reconcile_harness import TRAINGUARD

    runtime_obj = copy.deepcopy(rt)
    runtime_obj["metadata"]["namespace"] = namespace
    trainjob = job("same", rt["metadata"]["name"], trainer=trainer)
    trainjob["metadata"]["namespace"] = namespace
    (tmp_path / "rt.yaml").write_text(yaml.safe_dump(runtime_obj))
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(trainjob))
    rendered = subprocess.run([TRAINGUARD, "render", "-f", str(tmp_path / "rt.yaml"), "-f", str(tmp_path / "job.yaml"),
                               "--now", "2026-09-01T12:00:00Z"], capture_output=True, text=True, timeout=60)
    assert rendered.returncode == 0, rendered.stderr
    docs = [d for d in yaml.safe_load_all(rendered.stdout) if d]
    admitted = next(d for d in docs if d["kind"] == "TrainJob")
    render_jobset = next(d for d in docs if d["kind"] == "JobSet")

    # The cluster gets exactly the TrainJob admission produced (no webhook is registered here).
    api.create("trainingruntimes", runtime_obj)
    body = {k: v for k, v in admitted.items() if k != "status"}
    body["metadata"] = {k: v for k, v in admitted["metadata"].items() if k in ("name", "labels", "annotations")}
    api.create("trainjobs", body)
    start(controllers, cluster, namespace, tmp_path)
    live = wait_for("JobSet", lambda: api.jobset("same"))

    # Applying render's JobSet under the controller's field manager must change nothing: same fields, same values,
    # nothing the controller set that render lacks (SSA would drop it).
    uid = api.trainjob("same")["metadata"]["uid"]
    for ref in render_jobset["metadata"].get("ownerReferences") or []:
        ref["uid"] = uid
    dry = cluster.kubectl("apply", "--server-side", "--field-manager=trainguard", "--force-conflicts",
                          "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(render_jobset))
    after = json.loads(dry.stdout)
    for part in ("spec",):
        assert after[part] == live[part]
    for key in ("labels", "annotations", "ownerReferences"):
        assert after["metadata"].get(key) == live["metadata"].get(key), key
    assert after["metadata"]["generation"] == live["metadata"]["generation"], "render's JobSet would change it"
