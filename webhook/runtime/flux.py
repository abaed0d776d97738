"""Flux ML policy (upstream's ``plugins/flux``): run the trainer inside a Flux instance spanning the node pods.

An init container copies a Flux install (the "flux view" image) into a shared emptyDir; the ``node`` container
is rewritten to ``/bin/bash /etc/flux-config/entrypoint.sh "<command and the TrainJob's args>"`` (the runtime's own
args stay on the container, as upstream leaves them); the lead pod (``<job>-node-0-0``) runs
``flux run -N <nodes> -n <nodes×tasks> [-g <gpus>]``, the others join as brokers. Volumes and mounts are upstream's
(the in-memory ``shared-memory`` emptyDir is mounted read-only on ``/dev/shm``, as upstream mounts it).
Settings ``FLUX_VIEW_IMAGE``, ``FLUX_NETWORK_DEVICE``, ``FLUX_QUEUE_POLICY`` may be overridden by env on the
runtime's node container, then by ``trainer.env``. Objects: ConfigMap ``<job>-flux-entrypoint`` (``init.sh`` and
``entrypoint.sh``: upstream's templates from ``flux_scripts`` filled as upstream fills them) and Secret
``<job>-flux-curve`` (the broker CURVE certificate; random and created once, where upstream derives it from the
TrainJob's UID, see ``keys``). Unlike upstream, a TrainJob without ``spec.trainer.numNodes`` (or without
``spec.trainer``) uses the trainer job's pod count instead of failing. The GPU count for ``-g`` is read from the
merged node container (README: upstream bug #3974).
"""

from __future__ import annotations

from typing import Any, Mapping

from trainguard.webhook.field import FieldError, invalid
from trainguard.webhook.runtime import flux_scripts, plain
from trainguard.webhook.runtime.draft import RUNTIME_NODE_ARGS, Draft, pod_spec, upsert_into_container, upsert_volumes
from trainguard.webhook.runtime.merge import upsert
from trainguard.webhook.runtime.names import NODE
from trainguard.webhook.runtime.objects import b64, owned_object
from trainguard.webhook.runtime.plugin import ML, BuildContext, ValidationContext
from trainguard.webhook.runtime.resources import gpu_count

NAME = "flux"
KIND = ML
NEEDS_NODE_JOB = True

INSTALLER = "flux-installer"
DEFAULT_SETTINGS = {
    "FLUX_VIEW_IMAGE": "ghcr.io/converged-computing/flux-view-ubuntu:tag-jammy",
    "FLUX_NETWORK_DEVICE": "eth0",
    "FLUX_QUEUE_POLICY": "fcfs",
}
INSTALL_VOLUME, INSTALL_PATH = "flux-install", "/mnt/flux"
VIEW_VOLUME, VIEW_PATH = "spack-install", "/opt/software"
CONFIG_PATH = "/etc/flux-config"
CURVE_VOLUME, CURVE_PATH = "flux-curve", "/curve"
MEMORY_VOLUME, MEMORY_PATH = "shared-memory", "/dev/shm"
# Where the installer image keeps its Flux view.
VIEW_ROOT = "/opt/view"


def entrypoint_name(job: str) -> str:
    return f"{job}-flux-entrypoint"


def curve_secret_name(job: str) -> str:
    return f"{job}-flux-curve"


def tasks_per_node(draft: Draft) -> int:
    value = draft.trainer.num_proc_per_node
    if value is None:
        value = draft.ml_policy_source(NAME).get("numProcPerNode", 1)
    return int(value)


def validate(draft: Draft, ctx: ValidationContext) -> list[FieldError]:
    errors: list[FieldError] = []
    tasks = tasks_per_node(draft)
    if tasks < 1:
        errors.append(invalid("spec.trainer.numProcPerNode", tasks, "must be greater than or equal to 1 for Flux TrainJob"))
    if draft.container(draft.job(NODE), INSTALLER, init=True) is not None:
        errors.append(invalid("spec.trainer.initContainers", INSTALLER, "InitContainer 'flux-installer' is reserved"))
    return errors


def settings(draft: Draft) -> dict[str, str]:
    """Upstream's broker settings: defaults, then the runtime node container's literal values, then the TrainJob's
    env, whose entries win even without a literal value (upstream reads ``Value``, empty for ``valueFrom``)."""
    out = dict(DEFAULT_SETTINGS)
    runtime_node = draft.container(draft.trainer_job(), NODE) or {}
    for e in runtime_node.get("env") or []:
        if e.get("name") in out and e.get("value") is not None:
            out[e["name"]] = e["value"]
    for e in draft.trainer.env:
        if e.get("name") in out:
            out[e["name"]] = e.get("value") or ""
    return out


def original_command(draft: Draft, node: Mapping[str, Any]) -> str:
    """What Flux runs, as upstream joins it: the node command (the TrainJob's, else the runtime's) and the
    TrainJob's args; the runtime's own args are not part of it (they stay on the container, see ``enforce``)."""
    args = draft.trainer.args or []
    return " ".join([*(node.get("command") or []), *args]).strip()


def enforce(draft: Draft) -> None:
    plain.enforce(draft)
    rj = draft.job(NODE)
    if rj is None:
        return
    draft.facts["flux_settings"] = settings(draft)
    config_map = entrypoint_name(draft.name)
    node = draft.container(rj, NODE) or {}
    original = original_command(draft, node)
    draft.facts["flux_original_command"] = original
    # Upstream rewrites the TrainJob's command and clears its args, so the JobSet keeps the runtime's args: bash
    # passes them to the entrypoint after the wrapped command (its ``command="$@"``).
    runtime_args = draft.facts.get(RUNTIME_NODE_ARGS, node.get("args"))

    def wrap(c: dict) -> dict:
        out = {k: v for k, v in c.items() if k != "args"}
        out["command"] = ["/bin/bash", f"{CONFIG_PATH}/entrypoint.sh", original]
        if runtime_args is not None:
            out["args"] = runtime_args
        return out

    draft.edit_container(rj, NODE, wrap)
    installer = {
        "name": INSTALLER,
        "image": draft.facts["flux_settings"]["FLUX_VIEW_IMAGE"],
        "command": ["/bin/bash", f"{CONFIG_PATH}/init.sh"],
        "volumeMounts": [
            {"name": INSTALL_VOLUME, "mountPath": INSTALL_PATH},
            {"name": config_map, "mountPath": CONFIG_PATH, "readOnly": True},
        ],
    }
    spec = pod_spec(rj)
    spec["initContainers"] = upsert(spec.get("initContainers"), [installer], "name")
    upsert_volumes(
        rj,
        [
            {"name": VIEW_VOLUME, "emptyDir": {}},
            {"name": INSTALL_VOLUME, "emptyDir": {}},
            {"name": config_map, "configMap": {"name": config_map, "defaultMode": 0o755}},
            {"name": MEMORY_VOLUME, "emptyDir": {"medium": "Memory"}},
            {"name": CURVE_VOLUME, "secret": {"secretName": curve_secret_name(draft.name), "defaultMode": 0o400}},
        ],
    )
    upsert_into_container(
        draft,
        rj,
        NODE,
        mounts=[
            {"name": INSTALL_VOLUME, "mountPath": INSTALL_PATH},
            {"name": VIEW_VOLUME, "mountPath": VIEW_PATH},
            {"name": config_map, "mountPath": CONFIG_PATH, "readOnly": True},
            {"name": CURVE_VOLUME, "mountPath": CURVE_PATH, "readOnly": True},
            {"name": MEMORY_VOLUME, "mountPath": MEMORY_PATH, "readOnly": True},
        ],
    )


def _range(count: int) -> str:
    return "0" if count == 1 else f"0-{count - 1}"


def run_flags(draft: Draft) -> tuple[str, str]:
    """(``flux run`` flags, ``flux R encode`` resource flags) for the node pods."""
    nodes = draft.counts.get(NODE, 1)
    tasks = tasks_per_node(draft)
    gpus = gpu_count(draft.node_resources())  # the node job exists: Flux builds nothing without it
    flags = f"-N {nodes} -n {tasks * nodes}"
    resources = f"--cores={_range(tasks)}"
    if gpus > 0:
        flags += f" -g {gpus}"
        resources += f" --gpu={_range(gpus)}"
    return flags, resources


def broker_config(draft: Draft, hosts: str) -> str:
    s = draft.facts["flux_settings"]
    # Upstream connects through the TrainJob-name subdomain whatever network.subdomain says.
    fqdn = f"{draft.name}.{draft.namespace}.svc.cluster.local"
    return flux_scripts.BROKER_TOML % (
        f"tcp://{s['FLUX_NETWORK_DEVICE']}:%p",
        f"tcp://%h.{fqdn}:%p",
        hosts,
        s["FLUX_QUEUE_POLICY"],
    )


def init_script(draft: Draft) -> str:
    """Runs in the installer: publish the Flux view and the broker config into the shared volume."""
    hosts = f"{draft.name}-{NODE}-0-[{_range(draft.counts.get(NODE, 1))}]"
    # Upstream's "main host" here is ``<job>-0`` (the script only echoes it), unlike the entrypoint's.
    return flux_scripts.INIT_SH % (VIEW_ROOT, f"{draft.name}-0", hosts, broker_config(draft, hosts))


def entrypoint_script(draft: Draft) -> str:
    """Runs in the node container: the lead broker runs the command under Flux, the others serve as brokers."""
    flags, resources = run_flags(draft)
    return flux_scripts.ENTRYPOINT_SH % (resources, f"{draft.name}-{NODE}-0-0", flags)


def build(draft: Draft, ctx: BuildContext) -> list[dict]:
    if draft.job(NODE) is None:
        return []
    trainjob = ctx.trainjob
    configmap = owned_object("v1", "ConfigMap", entrypoint_name(draft.name), trainjob)
    configmap["data"] = {"entrypoint.sh": entrypoint_script(draft), "init.sh": init_script(draft)}
    objects = [configmap]
    if not ctx.existing.flux_curve_secret:
        public, secret = ctx.keys.curve_keypair()
        cert = (
            "#  ZeroMQ CURVE Secret Certificate\n"
            "#  Generated by trainguard\n\n"
            "metadata\n"
            f'    name = "{draft.name}"\n'
            "curve\n"
            f'    public-key = "{public}"\n'
            f'    secret-key = "{secret}"\n'
        )
        curve = owned_object("v1", "Secret", curve_secret_name(draft.name), trainjob)
        curve["data"] = {"curve.cert": b64(cert)}
        objects.append(curve)
    return objects
