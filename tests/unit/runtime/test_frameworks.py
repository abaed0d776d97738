"""JAX, XGBoost, Flux and Volcano: env, counts, objects, validation."""

from __future__ import annotations

import base64

import pytest

from trainguard.webhook.field import aggregate
from trainguard.webhook.runtime import ExistingObjects, build_objects, effective_job, placeholder_keys, validate_trainjob

from .fixtures import container, env_map, pod, rjob, single_job_runtime, trainjob

RANK = {"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}


def objects(tj, rt, **kw):
    return build_objects(tj, rt, keys=placeholder_keys(), **kw)


# -- JAX ---------------------------------------------------------------------------------------------------


def test_jax_env_and_port():
    js = objects(trainjob(trainer={"numNodes": 2}), single_job_runtime({"jax": {}}))[0]
    c = container(rjob(js, "node"))
    assert env_map(c) == {"JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": RANK, "JAX_COORDINATOR_ADDRESS": "job-node-0-0.job:29500"}
    assert c["ports"] == [{"containerPort": 29500}]
    assert rjob(js, "node")["template"]["spec"]["parallelism"] == 2


def test_jax_without_trainer_injects_nothing():
    c = container(rjob(objects(trainjob(), single_job_runtime({"numNodes": 3, "jax": {}}))[0], "node"))
    assert "env" not in c and "ports" not in c


# -- XGBoost -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "resources, workers",
    [({"limits": {"nvidia.com/gpu": 4}}, "12"), (None, "3")],
    ids=["one-worker-per-gpu", "cpu-one-worker"],
)
def test_xgboost_env(resources, workers):
    trainer = {"numNodes": 3}
    if resources:
        trainer["resourcesPerNode"] = resources
    js = objects(trainjob(trainer=trainer), single_job_runtime({"xgboost": {}}))[0]
    c = container(rjob(js, "node"))
    assert env_map(c) == {
        "DMLC_TRACKER_URI": "job-node-0-0.job",
        "DMLC_TRACKER_PORT": "29500",
        "DMLC_TASK_ID": RANK,
        "DMLC_NUM_WORKER": workers,
    }


@pytest.mark.parametrize(
    "env, message",
    [
        ([{"name": "A", "value": "1"}, {"name": "DMLC_TASK_ID", "value": "1"}], "spec.trainer.env[1]: Forbidden: DMLC_TASK_ID is reserved for the XGBoost runtime"),
        ([{"name": "A", "value": "1"}], ""),
    ],
    ids=["reject", "accept"],
)
def test_xgboost_reserved_envs(env, message):
    errors, _ = validate_trainjob(trainjob(trainer={"env": env}), None, single_job_runtime({"xgboost": {}}), None)
    assert aggregate(errors) == message


# -- Flux --------------------------------------------------------------------------------------------------


def _flux_runtime(**policy):
    return single_job_runtime(
        {"flux": {"numProcPerNode": 1, **policy}},
        container={"name": "node", "image": "lammps", "command": ["lmp"], "args": ["-in", "in.reaxff"], "resources": {"limits": {"nvidia.com/gpu": 2}}},
    )


def test_flux_wraps_command_and_adds_installer():
    js, cm, secret = objects(trainjob("hpc", trainer={"numNodes": 4, "numProcPerNode": 2}), _flux_runtime())
    node = rjob(js, "node")
    c = container(node)
    # The runtime's args stay on the container, as upstream leaves them (tests/unit/runtime/test_flux_upstream.py).
    assert c["command"] == ["/bin/bash", "/etc/flux-config/entrypoint.sh", "lmp"] and c["args"] == ["-in", "in.reaxff"]
    installer = pod(node)["initContainers"][0]
    assert installer["name"] == "flux-installer" and installer["image"] == "ghcr.io/converged-computing/flux-view-ubuntu:tag-jammy"
    assert {v["name"] for v in pod(node)["volumes"]} == {"spack-install", "flux-install", "hpc-flux-entrypoint", "shared-memory", "flux-curve"}
    assert {m["mountPath"] for m in c["volumeMounts"]} == {"/mnt/flux", "/opt/software", "/etc/flux-config", "/curve", "/dev/shm"}
    assert cm["metadata"]["name"] == "hpc-flux-entrypoint" and set(cm["data"]) == {"entrypoint.sh", "init.sh"}
    assert 'flags="-N 4 -n 8 -g 2  "' in cm["data"]["entrypoint.sh"]
    assert "--cores=0-1 --gpu=0-1" in cm["data"]["entrypoint.sh"]
    assert "hpc-node-0-[0-3]" in cm["data"]["init.sh"] and 'queue-policy = "fcfs"' in cm["data"]["init.sh"]
    assert secret["metadata"]["name"] == "hpc-flux-curve"
    cert = base64.b64decode(secret["data"]["curve.cert"]).decode()
    assert 'name = "hpc"' in cert and "public-key" in cert and "secret-key" in cert


def test_flux_settings_from_trainer_env_and_secret_once():
    tj = trainjob("hpc", trainer={"numNodes": 1, "env": [{"name": "FLUX_VIEW_IMAGE", "value": "my/view:1"}]})
    js, cm = objects(tj, _flux_runtime(), existing=ExistingObjects(flux_curve_secret=True))
    assert pod(rjob(js, "node"))["initContainers"][0]["image"] == "my/view:1"
    assert cm["kind"] == "ConfigMap"


@pytest.mark.parametrize(
    "trainer, init_containers, message",
    [
        ({"numProcPerNode": 0}, [], "spec.trainer.numProcPerNode: Invalid value: 0: must be greater than or equal to 1 for Flux TrainJob"),
        ({}, [{"name": "flux-installer", "image": "x"}], 'spec.trainer.initContainers: Invalid value: "flux-installer": InitContainer \'flux-installer\' is reserved'),
        ({"numProcPerNode": 4}, [], ""),
    ],
    ids=["reject-nproc", "reject-installer", "accept"],
)
def test_flux_validation(trainer, init_containers, message):
    rt = _flux_runtime()
    pod(rt["spec"]["template"]["spec"]["replicatedJobs"][0])["initContainers"] = init_containers
    errors, _ = validate_trainjob(trainjob(trainer=trainer), None, rt, None)
    assert aggregate(errors) == message


# -- Volcano -----------------------------------------------------------------------------------------------


def _volcano_runtime(annotations=None, priority=None, topology=None):
    rt = single_job_runtime(
        {"torch": {}},
        container={"name": "node", "image": "i", "resources": {"requests": {"cpu": "2", "nvidia.com/gpu": 1}}},
        pod_group={"volcano": {"networkTopology": topology} if topology is not None else {}},
    )
    if annotations is not None:
        rt["spec"]["template"]["metadata"] = {"annotations": annotations}
    if priority:
        pod(rt["spec"]["template"]["spec"]["replicatedJobs"][0])["priorityClassName"] = priority
    return rt


def test_volcano_podgroup():
    rt = _volcano_runtime({"scheduling.volcano.sh/queue-name": "research"}, "high", {"mode": "soft", "highestTierAllowed": 2})
    js, pg = objects(trainjob("vj", trainer={"numNodes": 3}), rt)
    assert rjob(js, "node")["template"]["spec"]["template"]["metadata"]["annotations"] == {"scheduling.k8s.io/group-name": "vj"}
    assert pg["apiVersion"] == "scheduling.volcano.sh/v1beta1" and pg["metadata"]["name"] == "vj"
    assert pg["spec"] == {
        "minMember": 3,
        "minResources": {"cpu": "6", "nvidia.com/gpu": "3"},
        "queue": "research",
        "priorityClassName": "high",
        "networkTopology": {"mode": "soft", "highestTierAllowed": 2},
    }
    assert js["metadata"]["annotations"] == {"scheduling.volcano.sh/queue-name": "research"}


def test_volcano_network_topology_defaults():
    pg = objects(trainjob(), _volcano_runtime(topology={}))[1]
    assert pg["spec"]["networkTopology"] == {"mode": "hard", "highestTierAllowed": 1}


@pytest.mark.parametrize(
    "annotations, priority, known, message",
    [
        ({"scheduling.volcano.sh/queue-name": ""}, None, set(),
         'spec.annotations[scheduling.volcano.sh/queue-name]: Invalid value: "": Volcano queue name must not be empty'),
        (None, "gold", {"silver"},
         'spec.templateSpec.priorityClassName: Invalid value: "gold": PriorityClass "gold" doesn\'t exist: priorityclasses.scheduling.k8s.io "gold" not found'),
        (None, "gold", {"gold"}, ""),
        (None, "system-node-critical", set(), ""),
        (None, "gold", None, ""),  # PriorityClasses unknown (offline render): not checked
        ({"scheduling.volcano.sh/queue-name": "q"}, None, set(), ""),
    ],
    ids=["reject-empty-queue", "reject-missing-priority", "accept-known", "accept-system", "accept-unknown-set", "accept-queue"],
)
def test_volcano_validation(annotations, priority, known, message):
    errors, _ = validate_trainjob(trainjob(), None, _volcano_runtime(annotations, priority), None, priority_classes=known)
    assert aggregate(errors) == message


def test_volcano_queue_from_runtime_patch_metadata():
    tj = trainjob(runtimePatches=[{"manager": "kueue.x-k8s.io/manager", "trainingRuntimeSpec": {"template": {"metadata": {"annotations": {"scheduling.volcano.sh/queue-name": "patched"}}}}}])
    assert objects(tj, _volcano_runtime({"scheduling.volcano.sh/queue-name": "base"}))[1]["spec"]["queue"] == "patched"
    assert effective_job(tj, _volcano_runtime()).pod_group_policy == "volcano"
