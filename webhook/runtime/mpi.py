"""MPI ML policy, OpenMPI only (upstream's ``plugins/mpi``): SSH Secret, hostfile, OMPI_* env, runLauncherAsNode.

Pods of the jobs ``launcher`` and ``node`` share one SSH identity from Secret ``<job>-mpi-ssh-auth``; the
launcher's ``node`` container reads ``/etc/mpi/hostfile`` (ConfigMap ``<job>-mpi-hostfile``) listing every worker
endpoint with its slot count. The Secret is immutable and created once; its key material comes from a
``KeySource`` so the build stays a pure function. Slots: ``trainer.numProcPerNode``, else the runtime's value,
which (when it is 1) becomes the node's GPU count if that is larger, read from the merged node container.
"""

from __future__ import annotations

from typing import Any, Mapping

from trainguard.webhook.field import FieldError, invalid
from trainguard.webhook.runtime.draft import (
    BuildError,
    Draft,
    env,
    is_launcher_as_node,
    resources_targets,
    upsert_into_container,
    upsert_volumes,
)
from trainguard.webhook.runtime.names import LAUNCHER, NODE
from trainguard.webhook.runtime.objects import b64, owned_object
from trainguard.webhook.runtime.plugin import ML, BuildContext, ValidationContext
from trainguard.webhook.runtime.reserved_env import reserved_env_errors
from trainguard.webhook.runtime.resources import gpu_count

NAME = "mpi"
KIND = ML
NEEDS_NODE_JOB = True

RESERVED_ENVS = (
    "OMPI_MCA_orte_default_hostfile",
    "OMPI_MCA_plm_rsh_args",
    "OMPI_MCA_orte_keep_fqdn_hostnames",
    "OMPI_MCA_orte_set_default_slots",
)
SSH_VOLUME = "mpi-ssh-auth"
HOSTFILE_VOLUME = "mpi-hostfile"
HOSTFILE_DIR = "/etc/mpi"
HOSTFILE_KEY = "hostfile"
DEFAULT_SSH_MOUNT_PATH = "/root/.ssh"


def ssh_secret_name(job: str) -> str:
    return f"{job}-mpi-ssh-auth"


def hostfile_name(job: str) -> str:
    return f"{job}-mpi-hostfile"


def policy(draft: Draft) -> Mapping[str, Any]:
    return draft.ml_policy_source(NAME)


def validate(draft: Draft, ctx: ValidationContext) -> list[FieldError]:
    errors: list[FieldError] = []
    nodes = draft.trainer.num_nodes
    if draft.has_trainer and (nodes or 1) >= 2 and is_launcher_as_node(draft):
        if draft.job(LAUNCHER) is None or draft.job(NODE) is None:
            errors.append(
                invalid(
                    "spec.trainer.numNodes",
                    nodes,
                    "must have 1 when MPI trainingRuntime with enabled runLauncherAsNode does not have either launcher and node",
                )
            )
    return errors + reserved_env_errors(draft, RESERVED_ENVS)


def slots(draft: Draft) -> int:
    override = draft.trainer.num_proc_per_node
    if override is not None:
        return int(override)
    # Upstream defaults only an absent value; an explicit 0 (its CRD sets no lower bound) gives 0 slots.
    value = policy(draft).get("numProcPerNode")
    configured = 1 if value is None else int(value)
    if configured == 1:
        gpus = gpu_count(draft.node_resources())
        if gpus > 1:
            return gpus
    return configured


def enforce(draft: Draft) -> None:
    implementation = policy(draft).get("mpiImplementation") or "OpenMPI"
    if implementation != "OpenMPI":
        raise BuildError(f"MPI implementation {implementation} is not supported (only OpenMPI)")
    num_nodes = draft.num_nodes_override
    worker = draft.job(NODE)
    if num_nodes is not None and worker is not None:
        # With runLauncherAsNode the launcher is one of the nodes.
        draft.counts[NODE] = max(int(num_nodes) - 1, 1) if is_launcher_as_node(draft) else max(0, int(num_nodes))
    n_slots = slots(draft)
    draft.facts["mpi_slots"] = n_slots
    mount_path = policy(draft).get("sshAuthMountPath") or DEFAULT_SSH_MOUNT_PATH
    ssh_volume = {
        "name": SSH_VOLUME,
        "secret": {
            "secretName": ssh_secret_name(draft.name),
            "defaultMode": 0o400,
            "items": [
                {"key": "ssh-privatekey", "path": "id_rsa", "mode": 0o640},
                {"key": "ssh-publickey", "path": "id_rsa.pub", "mode": 0o644},
                {"key": "ssh-publickey", "path": "authorized_keys", "mode": 0o644},
            ],
        },
    }
    for name in (NODE, LAUNCHER):
        rj = draft.job(name)
        if rj is None:
            continue
        upsert_volumes(rj, [ssh_volume])
        upsert_into_container(draft, rj, NODE, mounts=[{"name": SSH_VOLUME, "mountPath": mount_path}])
        if name == LAUNCHER:
            upsert_volumes(
                rj,
                [
                    {
                        "name": HOSTFILE_VOLUME,
                        "configMap": {
                            "name": hostfile_name(draft.name),
                            "items": [{"key": HOSTFILE_KEY, "path": HOSTFILE_KEY, "mode": 0o444}],
                        },
                    }
                ],
            )
            upsert_into_container(
                draft,
                rj,
                NODE,
                mounts=[{"name": HOSTFILE_VOLUME, "mountPath": HOSTFILE_DIR}],
                env_vars=[
                    env("OMPI_MCA_orte_default_hostfile", f"{HOSTFILE_DIR}/{HOSTFILE_KEY}"),
                    env("OMPI_MCA_orte_keep_fqdn_hostnames", "true"),
                    env("OMPI_MCA_orte_set_default_slots", n_slots),
                    env("OMPI_MCA_plm_rsh_args", "-o ConnectionAttempts=10"),
                ],
            )


def hostfile(draft: Draft) -> str:
    """One ``<endpoint> slots=<n>`` line per worker pod (the launcher too with runLauncherAsNode), template order."""
    lines = []
    for rj in draft.jobs():
        if rj.get("name") == NODE or (rj.get("name") == LAUNCHER and is_launcher_as_node(draft)):
            lines += [f"{e} slots={draft.facts['mpi_slots']}" for e in draft.endpoints(rj)]
    return "".join(line + "\n" for line in lines)


def trainer_jobs(draft: Draft) -> tuple[str, ...]:
    """The trainer ancestor (the launcher) and the ``node`` workers."""
    names = [rj["name"] for rj in resources_targets(draft)]
    if draft.job(NODE) is not None and NODE not in names:
        names.append(NODE)
    return tuple(names)


def num_nodes(draft: Draft, pods_by_job: Mapping[str, int]) -> int | None:
    """The worker pods, plus the launcher only when it runs as a node; None (the trainer job's pods) without workers."""
    if draft.job(NODE) is None:
        return None
    return pods_by_job[NODE] + (1 if draft.job(LAUNCHER) is not None and is_launcher_as_node(draft) else 0)


def build(draft: Draft, ctx: BuildContext) -> list[dict]:
    trainjob = ctx.trainjob
    objects: list[dict] = []
    if not ctx.existing.mpi_ssh_secret:
        private_pem, authorized_key = ctx.keys.ssh_keypair()
        secret = owned_object("v1", "Secret", ssh_secret_name(draft.name), trainjob)
        secret.update(
            {
                "type": "kubernetes.io/ssh-auth",
                "immutable": True,
                "data": {"ssh-privatekey": b64(private_pem), "ssh-publickey": b64(authorized_key)},
            }
        )
        objects.append(secret)
    configmap = owned_object("v1", "ConfigMap", hostfile_name(draft.name), trainjob)
    configmap["data"] = {HOSTFILE_KEY: hostfile(draft)}
    objects.append(configmap)
    return objects
