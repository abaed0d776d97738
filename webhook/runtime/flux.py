"""Flux ML policy (reference §2.5 Flux, §3.6): run the trainer inside a Flux instance spanning the node pods.

An init container copies a Flux install (the "flux view" image) into a shared emptyDir; the ``node`` container
is rewritten to ``/bin/bash /etc/flux-config/entrypoint.sh "<original command and args>"``; the lead pod
(``<job>-node-0-0``) runs ``flux run -N <nodes> -n <nodes×tasks> [-g <gpus>]``, the others join as brokers.
Settings ``FLUX_VIEW_IMAGE``, ``FLUX_NETWORK_DEVICE``, ``FLUX_QUEUE_POLICY`` may be overridden by env on the
runtime's node container, then by ``trainer.env``. Objects: ConfigMap ``<job>-flux-entrypoint`` (two scripts,
written for trainguard) and Secret ``<job>-flux-curve`` (the broker CURVE certificate, created once).
Unlike upstream, a TrainJob without ``spec.trainer.numNodes`` uses the trainer job's pod count instead of failing.
"""

from __future__ import annotations

import shlex
from typing import Any, Mapping

from webhook.field import FieldError, invalid
from webhook.runtime import plain
from webhook.runtime.draft import Draft, pod_spec, upsert_into_container, upsert_volumes
from webhook.runtime.keys import KeySource
from webhook.runtime.merge import upsert
from webhook.runtime.names import NODE
from webhook.runtime.objects import b64, owned_object
from webhook.runtime.resources import gpu_count

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
MEMORY_VOLUME, MEMORY_PATH = "flux-memory", "/dev/shm"


def entrypoint_name(job: str) -> str:
    return f"{job}-flux-entrypoint"


def curve_secret_name(job: str) -> str:
    return f"{job}-flux-curve"


def applies(draft: Draft) -> bool:
    return draft.ml_policy_kind == "flux"


def tasks_per_node(draft: Draft) -> int:
    value = (draft.trainer or {}).get("numProcPerNode")
    if value is None:
        value = (draft.ml_policy.get("flux") or {}).get("numProcPerNode", 1)
    return int(value)


def validate(draft: Draft) -> list[FieldError]:
    errors: list[FieldError] = []
    tasks = tasks_per_node(draft)
    if tasks < 1:
        errors.append(invalid("spec.trainer.numProcPerNode", tasks, "must be greater than or equal to 1 for Flux TrainJob"))
    if draft.container(draft.job(NODE), INSTALLER, init=True) is not None:
        errors.append(invalid("spec.trainer.initContainers", INSTALLER, "InitContainer 'flux-installer' is reserved"))
    return errors


def settings(draft: Draft) -> dict[str, str]:
    out = dict(DEFAULT_SETTINGS)
    runtime_node = draft.container(draft.trainer_job(), NODE) or {}
    for source in (runtime_node.get("env") or [], (draft.trainer or {}).get("env") or []):
        for e in source:
            if e.get("name") in out and e.get("value") is not None:
                out[e["name"]] = e["value"]
    return out


def enforce(draft: Draft) -> None:
    plain.enforce(draft)
    rj = draft.job(NODE)
    if rj is None:
        return
    draft.facts["flux_settings"] = settings(draft)
    config_map = entrypoint_name(draft.name)
    node = draft.container(rj, NODE) or {}
    original = " ".join([*(node.get("command") or []), *(node.get("args") or [])]).strip()
    draft.facts["flux_original_command"] = original

    def wrap(c: dict) -> dict:
        out = {k: v for k, v in c.items() if k != "args"}
        out["command"] = ["/bin/bash", f"{CONFIG_PATH}/entrypoint.sh", original]
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
            {"name": MEMORY_VOLUME, "mountPath": MEMORY_PATH},
        ],
    )


def _range(count: int) -> str:
    return "0" if count == 1 else f"0-{count - 1}"


def run_flags(draft: Draft) -> tuple[str, str]:
    """(``flux run`` flags, ``flux R encode`` resource flags) for the node pods."""
    nodes = draft.counts.get(NODE, 1)
    tasks = tasks_per_node(draft)
    gpus = gpu_count((draft.container(draft.job(NODE), NODE) or {}).get("resources"))
    flags = f"-N {nodes} -n {tasks * nodes}"
    resources = f"--cores={_range(tasks)}"
    if gpus > 0:
        flags += f" -g {gpus}"
        resources += f" --gpu={_range(gpus)}"
    return flags, resources


def broker_config(draft: Draft, hosts: str) -> str:
    s = draft.facts["flux_settings"]
    fqdn = f"{draft.name}.{draft.namespace}.svc.cluster.local"
    return "\n".join(
        [
            "[exec]",
            'imp = ""',
            "[access]",
            "allow-guest-user = true",
            "allow-root-owner = true",
            "[bootstrap]",
            f'curve_cert = "{INSTALL_PATH}/config/etc/curve/curve.cert"',
            "default_port = 8050",
            f'default_bind = "tcp://{s["FLUX_NETWORK_DEVICE"]}:%p"',
            f'default_connect = "tcp://%h.{fqdn}:%p"',
            f'hosts = [{{ host = "{hosts}" }}]',
            "[sched-fluxion-qmanager]",
            f'queue-policy = "{s["FLUX_QUEUE_POLICY"]}"',
        ]
    )


def init_script(draft: Draft) -> str:
    """Runs in the installer: publish the Flux view and the broker config into the shared volume."""
    hosts = f"{draft.name}-{NODE}-0-[{_range(draft.counts.get(NODE, 1))}]"
    root = f"{INSTALL_PATH}/config"
    return f"""#!/bin/bash
# Written by trainguard: prepares Flux for TrainJob {draft.name}.
set -euo pipefail
root={root}
mkdir -p "$root/etc/flux/system/cron.d" "$root/etc/flux/config" "$root/var/lib/flux" "$root/run/flux" "$root/etc/curve"
echo {shlex.quote(hosts)} > "$root/etc/flux/system/hostlist"
cat > "$root/etc/flux/config/broker.toml" <<'TOML'
{broker_config(draft, hosts)}
TOML
view=$(ls -d /opt/views/._view/* | head -n1)
mkdir -p {INSTALL_PATH}/view
cp -R "$view"/* {INSTALL_PATH}/view/
cp -R /opt/software {INSTALL_PATH}/
touch {INSTALL_PATH}/flux-view-ready
"""


def entrypoint_script(draft: Draft) -> str:
    """Runs in the node container: the lead broker runs the command under Flux, the others serve as brokers."""
    flags, resources = run_flags(draft)
    lead = f"{draft.name}-{NODE}-0-0"
    root = f"{INSTALL_PATH}/config"
    return f"""#!/bin/bash
# Written by trainguard: runs the TrainJob command under Flux ({flags}).
view={INSTALL_PATH}/view
export PATH="$PATH:$view/bin"
cp -R {INSTALL_PATH}/software/* {VIEW_PATH}/ 2>/dev/null || true
python_root=$(find "$view/lib" -maxdepth 1 -type d -name 'python3*' | head -n1)
export PYTHONPATH="${{PYTHONPATH:-}}:$python_root/site-packages"
export LD_LIBRARY_PATH="${{LD_LIBRARY_PATH:-}}:$view/lib"
cp {CURVE_PATH}/curve.cert {root}/etc/curve/curve.cert
chmod go-r {root}/etc/curve/curve.cert
hosts=$(cat {root}/etc/flux/system/hostlist)
flux R encode --hosts="$hosts" {resources} > {root}/etc/flux/system/R
options="-Scron.directory={root}/etc/flux/system/cron.d -Srundir={root}/run/flux -Sstatedir={root}/var/lib/flux -Slocal-uri=local://{root}/run/flux/local -Slog-stderr-level=0"
command="$*"
if [ "$(hostname)" = "{lead}" ]; then
  if [ -z "$command" ]; then
    exec flux broker --config-path {root}/etc/flux/config $options
  fi
  exec flux start -o --config {root}/etc/flux/config $options flux run {flags} $command
fi
until flux start -o --config {root}/etc/flux/config $options; do
  echo "Flux follower exited with $?; retrying in 15s"
  sleep 15
done
"""


def build(draft: Draft, trainjob: Mapping[str, Any], *, keys: KeySource, secret_exists: bool) -> list[dict]:
    if draft.job(NODE) is None:
        return []
    configmap = owned_object("v1", "ConfigMap", entrypoint_name(draft.name), trainjob)
    configmap["data"] = {"entrypoint.sh": entrypoint_script(draft), "init.sh": init_script(draft)}
    objects = [configmap]
    if not secret_exists:
        public, secret = keys.curve_keypair()
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
