"""Running ``trainguard controller`` as a real process against the test apiserver, and reading what it did.

Waiting is by polling a condition with a generous upper bound (a bound on failure, not a speed assertion).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable, Sequence, TypeVar

from kubernetes import client
from kubernetes.client.rest import ApiException

REPO = Path(__file__).resolve().parents[3]
TRAINGUARD = str(Path(sys.executable).parent / "trainguard")
T = TypeVar("T")

TRAINER = ("trainer.kubeflow.org", "v1alpha1")
JOBSET = ("jobset.x-k8s.io", "v1alpha2")

# Short election timings so failover tests do not wait 15 s; ordering rules are the same as the defaults.
LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 3.0, 2.0, 0.5


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 90.0, interval: float = 0.2) -> T:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = probe()
        except ApiException as err:
            if err.status != 404:
                raise
            last = None
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ControllerProcess:
    """One ``trainguard controller`` replica confined to a namespace (the Lease lives there too, and the runtime
    snapshots unless ``snapshot_namespace`` names the controller's own namespace apart from the users')."""

    def __init__(self, kubeconfig: str, namespace: str, identity: str, log_dir: Path, *, workers: int = 4,
                 leader_elect: bool = True, snapshot_namespace: str | None = None, extra: Sequence[str] = ()) -> None:
        self.identity = identity
        self.snapshot_namespace = snapshot_namespace or namespace
        self.port = free_port()
        self.log_path = log_dir / f"controller-{identity}.log"
        self.args = [
            TRAINGUARD, "controller", "--kubeconfig", kubeconfig, "--namespace", namespace,
            "--workers", str(workers), "--metrics-bind-address", f"127.0.0.1:{self.port}",
            "--leader-elect-namespace", namespace, "--leader-elect-identity", identity,
            "--leader-elect-lease-duration", str(LEASE_DURATION), "--leader-elect-renew-deadline",
            str(RENEW_DEADLINE), "--leader-elect-retry-period", str(RETRY_PERIOD), "--log-level", "DEBUG",
            "--snapshot-namespace", self.snapshot_namespace,
        ]
        if not leader_elect:
            self.args.append("--no-leader-elect")
        self.args += list(extra)  # e.g. the admin's --dataset-cache-allowed-host-path
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, *, wait_ready: bool = True) -> "ControllerProcess":
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        log.close()
        if wait_ready:
            wait_for(f"controller {self.identity} /readyz", self.ready, timeout=60)
        return self

    def ready(self) -> bool:
        answer = self.readyz()
        return answer is not None and answer[0] == 200

    def readyz(self) -> tuple[int, str] | None:
        """/readyz's status and body; None while nothing listens yet."""
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"controller {self.identity} exited {self.proc.returncode}:\n{self.log()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=2) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()
        except OSError:
            return None

    def metrics(self) -> dict[str, float]:
        """Prometheus samples by their full name with labels, e.g. 'trainguard_leader' or 'x{a="b"}'."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        out: dict[str, float] = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                out[name] = float(value)
        return out

    def reconciles(self) -> float:
        return sum(v for k, v in self.metrics().items() if k.startswith("trainguard_reconcile_total{"))

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: no cleanup, no Lease release - a crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def terminate(self) -> int:
        """SIGTERM: the graceful path (finish in-flight work, release the Lease)."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=60)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:] if self.log_path.exists() else ""


class Api:
    """Typed-enough access to the objects the tests touch (dicts in, dicts out)."""

    def __init__(self, api_client: client.ApiClient, namespace: str) -> None:
        self.custom = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)
        self.coordination = client.CoordinationV1Api(api_client)
        self.ns = namespace

    # TrainJobs and runtimes
    def create(self, plural: str, body: dict, group: tuple[str, str] = TRAINER) -> dict:
        if plural == "clustertrainingruntimes":
            return self.custom.create_cluster_custom_object(*group, plural, body)
        return self.custom.create_namespaced_custom_object(*group, self.ns, plural, body)

    def get(self, plural: str, name: str, group: tuple[str, str] = TRAINER) -> dict:
        if plural == "clustertrainingruntimes":
            return self.custom.get_cluster_custom_object(*group, plural, name)
        return self.custom.get_namespaced_custom_object(*group, self.ns, plural, name)

    def patch(self, plural: str, name: str, body: dict, group: tuple[str, str] = TRAINER) -> dict:
        if plural == "clustertrainingruntimes":
            return self.custom.patch_cluster_custom_object(*group, plural, name, body)
        return self.custom.patch_namespaced_custom_object(*group, self.ns, plural, name, body)

    def trainjob(self, name: str) -> dict:
        return self.get("trainjobs", name)

    def jobset(self, name: str) -> dict | None:
        try:
            return self.get("jobsets", name, JOBSET)
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def jobsets(self) -> list[dict]:
        return self.custom.list_namespaced_custom_object(*JOBSET, self.ns, "jobsets")["items"]

    def patch_jobset_status(self, name: str, status: dict) -> dict:
        return self.custom.patch_namespaced_custom_object_status(*JOBSET, self.ns, "jobsets", name,
                                                                 {"status": status})

    def delete_jobset(self, name: str) -> None:
        self.custom.delete_namespaced_custom_object(*JOBSET, self.ns, "jobsets", name)

    def configmap(self, name: str) -> dict | None:
        try:
            return self.core.read_namespaced_config_map(name, self.ns).to_dict()
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def secret(self, name: str) -> Any:
        return self.core.read_namespaced_secret(name, self.ns)

    def lease(self, name: str = "trainguard-controller") -> Any:
        return self.coordination.read_namespaced_lease(name, self.ns)

    def events(self, name: str) -> list[dict]:
        out = []
        for ev in client.EventsV1Api(self.core.api_client).list_namespaced_event(self.ns).items:
            if ev.regarding and ev.regarding.name == name:
                out.append({"reason": ev.reason, "type": ev.type, "note": ev.note})
        return out


def condition(trainjob: dict, type_: str) -> dict | None:
    for c in (trainjob.get("status") or {}).get("conditions") or []:
        if c["type"] == type_:
            return c
    return None


def strip_server_fields(obj: dict) -> dict:
    """What the controller intended: drop fields the apiserver adds, and defaults JobSet's CRD schema fills."""
    obj = json.loads(json.dumps(obj))
    meta = obj.get("metadata", {})
    for key in ("uid", "resourceVersion", "generation", "creationTimestamp", "managedFields"):
        meta.pop(key, None)
    obj.pop("status", None)
    return obj
