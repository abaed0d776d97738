"""``spec.limits.podSecurity: Baseline``: refuse at ``kubectl apply`` the pod settings that the Kubernetes Pod Security
Standards' *baseline* level forbids, instead of admitting a TrainJob whose pods the namespace's Pod Security
admission (or nothing at all, where it is not enforced) would later deal with.

Checked on every pod template of the merged job (runtime template + runtimePatches + trainer overrides), since a
namespace user writes both the TrainingRuntime and the runtimePatches (issue 10: a privileged, hostPID, hostPath
``/`` side job was admitted). The subset of baseline checked, each finding naming the field of the merged job:
``privileged``, ``hostNetwork`` / ``hostPID`` / ``hostIPC``, ``hostPath`` volumes, ``hostPort``, capabilities
added beyond baseline's list, ``procMount`` other than Default, Windows ``hostProcess``. Not checked (left to Pod
Security admission): AppArmor, SELinux, seccomp ``Unconfined`` and sysctls.
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping

from trainguard.webhook.api.views import ReplicatedJob
from trainguard.webhook.field import FieldError, forbidden

BASELINE = "Baseline"
# Capabilities the baseline level allows a container to add (Pod Security Standards, "Capabilities").
BASELINE_CAPABILITIES = frozenset({
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE", "SETFCAP",
    "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
})


def _pod_spec(rjob: dict[str, Any]) -> Mapping[str, Any]:
    return ReplicatedJob(rjob).pod_spec


def _containers(pod: Mapping[str, Any]) -> Iterator[tuple[str, int, dict[str, Any]]]:
    for kind in ("initContainers", "containers", "ephemeralContainers"):
        for i, c in enumerate(pod.get(kind) or []):
            if isinstance(c, dict):
                yield kind, i, c


def baseline_errors(jobset_spec: dict[str, Any], detail: str) -> list[FieldError]:
    """Every baseline violation in the JobSet spec; ``detail`` says which policy asked (appended to each)."""
    errors: list[FieldError] = []

    def deny(path: str, what: str) -> None:
        errors.append(forbidden(path, f"{what} is not allowed by the Baseline pod security level ({detail})"))

    for rjob in jobset_spec.get("replicatedJobs") or []:
        if not isinstance(rjob, dict):
            continue
        base = f"replicatedJobs[{rjob.get('name', '')}].template.spec.template.spec"
        pod = _pod_spec(rjob)
        for key in ("hostNetwork", "hostPID", "hostIPC"):
            if pod.get(key) is True:
                deny(f"{base}.{key}", f"{key}: true")
        if ((pod.get("securityContext") or {}).get("windowsOptions") or {}).get("hostProcess") is True:
            deny(f"{base}.securityContext.windowsOptions.hostProcess", "a Windows HostProcess pod")
        for volume in pod.get("volumes") or []:
            if isinstance(volume, dict) and volume.get("hostPath") is not None:
                path = (volume.get("hostPath") or {}).get("path")
                deny(f"{base}.volumes[{volume.get('name', '')}].hostPath", f"a hostPath volume ({path!r})")
        for kind, _, c in _containers(pod):
            where = f"{base}.{kind}[{c.get('name', '')}]"
            sc = c.get("securityContext") or {}
            if sc.get("privileged") is True:
                deny(f"{where}.securityContext.privileged", "a privileged container")
            added = [cap for cap in ((sc.get("capabilities") or {}).get("add") or []) if cap not in BASELINE_CAPABILITIES]
            if added:
                deny(f"{where}.securityContext.capabilities.add", f"adding capabilities {added}")
            if sc.get("procMount") not in (None, "Default"):
                deny(f"{where}.securityContext.procMount", f"procMount {sc.get('procMount')!r}")
            if (sc.get("windowsOptions") or {}).get("hostProcess") is True:
                deny(f"{where}.securityContext.windowsOptions.hostProcess", "a Windows HostProcess container")
            for port in c.get("ports") or []:
                if isinstance(port, dict) and port.get("hostPort"):
                    deny(f"{where}.ports[{port.get('containerPort')}].hostPort", f"hostPort {port.get('hostPort')}")
    return errors
