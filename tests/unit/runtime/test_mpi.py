"""MPI policy: counts, slots, SSH Secret, hostfile, OMPI env, runLauncherAsNode, validation."""

from __future__ import annotations

import base64

import pytest

from trainguard.webhook.field import aggregate
from trainguard.webhook.runtime import BuildError, ExistingObjects, build_objects, effective_job, placeholder_keys, validate_trainjob
from trainguard.webhook.runtime.keys import PLACEHOLDER_PRIVATE_KEY, PLACEHOLDER_PUBLIC_KEY

from .fixtures import MPI_RUNTIME, container, deep, env_map, pod, rjob, trainjob

OWNER = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "pi", "uid": "pi-uid", "controller": True, "blockOwnerDeletion": True}


def objects(tj, rt=MPI_RUNTIME, **kw):
    return build_objects(tj, rt, keys=placeholder_keys(), **kw)


def test_launcher_and_workers():
    js, secret, hostfile = objects(trainjob("pi", "mpi-distributed", trainer={"numNodes": 2}))
    launcher, node = rjob(js, "launcher"), rjob(js, "node")
    assert launcher["template"]["spec"]["parallelism"] == 1 and node["template"]["spec"]["parallelism"] == 2
    ssh_volume = {
        "name": "mpi-ssh-auth",
        "secret": {
            "secretName": "pi-mpi-ssh-auth",
            "defaultMode": 0o400,
            "items": [
                {"key": "ssh-privatekey", "path": "id_rsa", "mode": 0o640},
                {"key": "ssh-publickey", "path": "id_rsa.pub", "mode": 0o644},
                {"key": "ssh-publickey", "path": "authorized_keys", "mode": 0o644},
            ],
        },
    }
    assert pod(node)["volumes"] == [ssh_volume]
    assert pod(launcher)["volumes"] == [
        ssh_volume,
        {"name": "mpi-hostfile", "configMap": {"name": "pi-mpi-hostfile", "items": [{"key": "hostfile", "path": "hostfile", "mode": 0o444}]}},
    ]
    assert container(node)["volumeMounts"] == [{"name": "mpi-ssh-auth", "mountPath": "/home/mpiuser/.ssh"}]
    lc = container(launcher)
    assert lc["volumeMounts"] == [{"name": "mpi-ssh-auth", "mountPath": "/home/mpiuser/.ssh"}, {"name": "mpi-hostfile", "mountPath": "/etc/mpi"}]
    # runtime numProcPerNode 1 and 4 GPUs per worker -> 4 slots
    assert env_map(lc) == {
        "OMPI_MCA_orte_default_hostfile": "/etc/mpi/hostfile",
        "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
        "OMPI_MCA_orte_set_default_slots": "4",
        "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10",
    }
    assert "env" not in container(node)
    assert secret["metadata"] == {"name": "pi-mpi-ssh-auth", "namespace": "ns", "ownerReferences": [OWNER]}
    assert secret["type"] == "kubernetes.io/ssh-auth" and secret["immutable"] is True
    assert base64.b64decode(secret["data"]["ssh-privatekey"]).decode() == PLACEHOLDER_PRIVATE_KEY
    assert base64.b64decode(secret["data"]["ssh-publickey"]).decode() == PLACEHOLDER_PUBLIC_KEY
    assert hostfile["kind"] == "ConfigMap" and hostfile["metadata"]["name"] == "pi-mpi-hostfile"
    assert hostfile["data"] == {"hostfile": "pi-node-0-0.pi slots=4\npi-node-0-1.pi slots=4\n"}


def test_secret_created_only_once():
    kinds = [o["kind"] for o in objects(trainjob("pi", "mpi-distributed"), existing=ExistingObjects(mpi_ssh_secret=True))]
    assert kinds == ["JobSet", "ConfigMap"]


def test_num_proc_per_node_override_sets_slots():
    hostfile = objects(trainjob("pi", "mpi-distributed", trainer={"numNodes": 1, "numProcPerNode": 2}))[2]
    assert hostfile["data"]["hostfile"] == "pi-node-0-0.pi slots=2\n"


def test_run_launcher_as_node():
    rt = deep(MPI_RUNTIME)
    rt["spec"]["mlPolicy"]["mpi"]["runLauncherAsNode"] = True
    tj = trainjob("pi", "mpi-distributed", trainer={"numNodes": 3, "env": [{"name": "X", "value": "1"}]})
    js, _, hostfile = objects(tj, rt)
    assert rjob(js, "node")["template"]["spec"]["parallelism"] == 2
    assert hostfile["data"]["hostfile"] == "pi-launcher-0-0.pi slots=4\npi-node-0-0.pi slots=4\npi-node-0-1.pi slots=4\n"
    # trainer env goes to the launcher's node container and the worker job's node container
    assert env_map(container(rjob(js, "node")))["X"] == "1" and env_map(container(rjob(js, "launcher")))["X"] == "1"
    job = effective_job(tj, rt)
    assert job.num_nodes == 3 and job.trainer_jobs == ("launcher", "node")


def test_subdomain_is_used_for_endpoints():
    rt = deep(MPI_RUNTIME)
    rt["spec"]["template"]["spec"]["network"] = {"subdomain": "mesh"}
    hostfile = objects(trainjob("pi", "mpi-distributed"), rt)[2]
    assert hostfile["data"]["hostfile"] == "pi-node-0-0.mesh slots=4\n"


@pytest.mark.parametrize(
    "launcher_as_node, jobs, num_nodes, message",
    [
        (True, ["launcher"], 2, "spec.trainer.numNodes: Invalid value: 2: must have 1 when MPI trainingRuntime with enabled runLauncherAsNode does not have either launcher and node"),
        (True, ["launcher"], 1, ""),
        (True, ["launcher", "node"], 4, ""),
        (False, ["launcher"], 2, ""),
    ],
    ids=["reject", "accept-one-node", "accept-both-jobs", "accept-no-launcher-as-node"],
)
def test_run_launcher_as_node_validation(launcher_as_node, jobs, num_nodes, message):
    rt = deep(MPI_RUNTIME)
    rt["spec"]["mlPolicy"]["mpi"]["runLauncherAsNode"] = launcher_as_node
    rt["spec"]["template"]["spec"]["replicatedJobs"] = [rj for rj in rt["spec"]["template"]["spec"]["replicatedJobs"] if rj["name"] in jobs]
    errors, _ = validate_trainjob(trainjob("pi", "mpi-distributed", trainer={"numNodes": num_nodes}), None, rt, None)
    assert aggregate(errors) == message


@pytest.mark.parametrize(
    "env, paths",
    [([{"name": "OMPI_MCA_plm_rsh_args", "value": "x"}], ["spec.trainer.env"]), ([{"name": "OMPI_OTHER", "value": "x"}], [])],
    ids=["reject", "accept"],
)
def test_reserved_envs(env, paths):
    errors, _ = validate_trainjob(trainjob("pi", "mpi-distributed", trainer={"env": env}), None, MPI_RUNTIME, None)
    assert [e.path for e in errors] == paths
    if errors:
        assert errors[0].detail == "must not have reserved envs, invalid envs configured: [OMPI_MCA_plm_rsh_args]"


def test_unsupported_implementation_is_a_build_error():
    rt = deep(MPI_RUNTIME)
    rt["spec"]["mlPolicy"]["mpi"]["mpiImplementation"] = "Intel"
    with pytest.raises(BuildError, match="Intel"):
        effective_job(trainjob("pi", "mpi-distributed"), rt)
