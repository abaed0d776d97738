"""Fixtures that run ``trainguard webhook`` for real and register it with the session's apiserver by URL.

Reusable by anyone who needs admission in an integration test (the policy tests included)::

    def test_something(cluster, namespace, admission):        # admission = registered for THIS namespace
        cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml_text)   # goes through trainguard
        # cluster-scoped objects (ClusterTrainingRuntime, TrainJobPolicy) go through the webhook only when they
        # carry the label admission.scope_label: {"trainguard.io/test-scope": namespace}

* ``webhook_server`` (session): one ``trainguard webhook`` process on a free loopback port, certificates from a
  temporary CA (``--cert-dir`` mode, SAN 127.0.0.1), the real policy pipeline, ready (``/readyz``) before use;
  DatasetCache hostPath sources allowed below ``/data``.
  ``.url_base``, ``.ca_pem``, ``.metrics()``, ``.log_tail()``.
* ``admission`` (function): registers the Mutating/ValidatingWebhookConfigurations produced by
  ``trainguard.webhook.admission.registration.webhook_configurations`` (URL + caBundle), narrowed to the test's namespace so
  tests never see each other's webhooks, waits until the apiserver really calls them, deletes them afterwards.
* ``start_webhook(...)`` / ``register(...)``: the building blocks, for tests that need their own process (stopping
  it, Secret-mode rotation, another failurePolicy).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from trainguard.webhook.admission.certs import KeyPair, new_ca, new_serving_cert
from trainguard.webhook.admission.registration import Registration, webhook_configurations

SCOPE_LABEL = "trainguard.io/test-scope"
TRAINGUARD = Path(sys.executable).with_name("trainguard")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def temp_ca(directory: Path) -> KeyPair:
    """A throwaway CA and a serving pair for 127.0.0.1/localhost, written as tls.crt/tls.key in ``directory``."""
    now = datetime.now(timezone.utc)
    ca = new_ca(now=now, lifetime=timedelta(days=1), common_name="trainguard-test-ca")
    leaf = new_serving_cert(ca, dns_names=["localhost"], ip_addresses=["127.0.0.1"], now=now, lifetime=timedelta(days=1))
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tls.crt").write_bytes(leaf.cert_pem)
    (directory / "tls.key").write_bytes(leaf.key_pem)
    return ca


@dataclass
class WebhookProcess:
    port: int
    health_port: int
    log_path: Path
    args: list[str]
    ca_pem: bytes | None = None  # None in Secret mode: the rotator injects the CA itself
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url_base(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start(self, ready_timeout: float = 90) -> "WebhookProcess":
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + ready_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"trainguard webhook exited with {self.proc.returncode}:\n{self.log_tail()}")
            if self.health("/readyz") == 200:
                return self
            time.sleep(0.2)
        self.stop()
        raise AssertionError(f"trainguard webhook not ready after {ready_timeout}s:\n{self.log_tail()}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def health(self, path: str) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}{path}", timeout=2) as resp:
                return resp.status
        except urllib.error.HTTPError as e:
            return e.code
        except OSError:
            return 0

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/metrics", timeout=5) as resp:
            return resp.read().decode()

    def metric(self, name: str, **labels: str) -> float:
        """Sum of the samples of ``name`` whose labels include ``labels``."""
        from prometheus_client.parser import text_string_to_metric_families

        total = 0.0
        for family in text_string_to_metric_families(self.metrics()):
            for s in family.samples:
                if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                    total += s.value
        return total

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def start_webhook(cluster: Any, workdir: Path, *, cert_dir: Path | None = None, extra: list[str] = (), ready_timeout: float = 90) -> WebhookProcess:  # type: ignore[assignment]
    """Start ``trainguard webhook`` on free loopback ports. With no ``cert_dir`` (and no ``--cert-secret`` in
    ``extra``) a temporary CA is made and the process runs in ``--cert-dir`` mode."""
    workdir.mkdir(parents=True, exist_ok=True)
    port, health_port = free_port(), free_port()
    ca_pem = None
    args = [str(TRAINGUARD), "webhook", "--bind-address", "127.0.0.1", "--port", str(port), "--health-port", str(health_port),
            "--kubeconfig", cluster.kubeconfig, "--log-level", "info"]
    if not any(a.startswith("--cert-secret") for a in extra):
        cert_dir = cert_dir or workdir / "certs"
        ca_pem = temp_ca(cert_dir).cert_pem
        args += ["--cert-dir", str(cert_dir), "--cert-dir-poll", "1"]
    wp = WebhookProcess(port, health_port, workdir / "webhook.log", args + list(extra), ca_pem)
    return wp.start(ready_timeout)


def scoped_configurations(reg: Registration, namespace: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The production objects, narrowed to one test: its namespace, or (cluster-scoped kinds) the scope label."""
    configs = webhook_configurations(reg)
    for config in configs:
        for hook in config["webhooks"]:
            if "namespaceSelector" in hook:
                hook["namespaceSelector"]["matchExpressions"].append(
                    {"key": "kubernetes.io/metadata.name", "operator": "In", "values": [namespace]})
            else:  # cluster-scoped kinds carry no objectSelector, or only upstream's runtime opt-out
                hook.setdefault("objectSelector", {}).setdefault("matchExpressions", []).append(
                    {"key": SCOPE_LABEL, "operator": "In", "values": [namespace]})
    return configs


@dataclass
class Registered:
    namespace: str
    server: WebhookProcess
    mutating_name: str
    validating_name: str
    scope_label: dict[str, str] = field(default_factory=dict)


PROBE_RUNTIME = "trainguard-probe-missing-runtime"


def probe_trainjob(namespace: str) -> dict[str, Any]:
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": f"probe-{uuid.uuid4().hex[:8]}", "namespace": namespace},
            "spec": {"runtimeRef": {"name": PROBE_RUNTIME}}}


def register(cluster: Any, server: WebhookProcess, namespace: str, *, failure_policy: str = "Fail", wait: bool = True,
             ca_bundle: bytes | None | bool = True) -> Registered:
    """Apply the configurations by URL (with the process's CA unless ``ca_bundle=False``) and, with ``wait``, block
    until a server-side dry-run TrainJob create in ``namespace`` is answered by this webhook."""
    suffix = namespace[-40:]
    reg = Registration(
        url_base=server.url_base,
        ca_bundle=(server.ca_pem if ca_bundle is True else (ca_bundle or None)),
        failure_policy=failure_policy,  # type: ignore[arg-type]
        mutating_name=f"tg-{suffix}-mutating", validating_name=f"tg-{suffix}-validating",
    )
    mutating, validating = scoped_configurations(reg, namespace)
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([mutating, validating]))
    registered = Registered(namespace, server, reg.mutating_name, reg.validating_name, {SCOPE_LABEL: namespace})
    if wait:
        wait_until_called(cluster, registered)
    return registered


def wait_until_called(cluster: Any, registered: Registered, timeout: float = 60) -> None:
    """The apiserver picks configurations up asynchronously: probe until the webhook has answered a review."""
    before = registered.server.metric("trainguard_admission_requests_total", webhook="validator.trainjob.trainer.kubeflow.org")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        cluster.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(probe_trainjob(registered.namespace)), check=False)
        if registered.server.metric("trainguard_admission_requests_total", webhook="validator.trainjob.trainer.kubeflow.org") > before:
            return
        time.sleep(0.2)
    raise AssertionError(f"the apiserver never called the webhook within {timeout}s:\n{registered.server.log_tail()}")


def unregister(cluster: Any, registered: Registered) -> None:
    cluster.kubectl("delete", "mutatingwebhookconfiguration", registered.mutating_name, "--ignore-not-found", check=False)
    cluster.kubectl("delete", "validatingwebhookconfiguration", registered.validating_name, "--ignore-not-found", check=False)


@pytest.fixture(scope="session")
def webhook_server(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebhookProcess]:
    # As an admin would configure it: DatasetCaches may read below /data (hostPath sources are refused by default).
    server = start_webhook(cluster, tmp_path_factory.mktemp("webhook"), extra=["--dataset-cache-allowed-host-path=/data"])
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def admission(cluster: Any, namespace: str, webhook_server: WebhookProcess) -> Iterator[Registered]:
    registered = register(cluster, webhook_server, namespace)
    try:
        yield registered
    finally:
        unregister(cluster, registered)


# Cluster-scoped objects outlive the per-test namespace. A TrainJobPolicy with an empty selector left behind by one
# test matches every TrainJob of every later test, so a leak is cleaned up AND reported as the leaking test's error.
_CLUSTER_SCOPED = (("trainguard.io", "v1alpha1", "trainjobpolicies"),)


def _cluster_scoped_names(cluster: Any) -> dict[str, set[str]]:
    from kubernetes import client as k8s

    api = k8s.CustomObjectsApi(cluster.api_client())
    return {
        plural: {o["metadata"]["name"] for o in api.list_cluster_custom_object(group, version, plural)["items"]}
        for group, version, plural in _CLUSTER_SCOPED
    }


@pytest.fixture(autouse=True)
def no_leaked_cluster_scoped_objects(request: pytest.FixtureRequest) -> Iterator[None]:
    if "cluster" not in request.fixturenames:
        yield
        return
    cluster = request.getfixturevalue("cluster")
    before = _cluster_scoped_names(cluster)
    yield
    after = _cluster_scoped_names(cluster)
    leaked = {plural: sorted(after[plural] - before[plural]) for plural in after if after[plural] - before[plural]}
    for plural, names in leaked.items():
        for name in names:
            cluster.kubectl("delete", plural, name, "--ignore-not-found", check=False)
    assert not leaked, f"the test left cluster-scoped objects behind (now deleted): {leaked}"
