"""The real Kueue manager (sigs.k8s.io/kueue, pinned in hack/tools/kueue) run out of cluster against the test
apiserver, with its webhooks registered by URL.

* ``build_kueue()``: ``hack/build-tools.sh kueue crds`` -> the cache directory holding ``kueue`` and ``crds/kueue/``.
* ``kueue_webhook_configurations(...)``: Kueue's own ``config/components/webhook/manifests.yaml`` (read from the
  pinned module in the Go module cache), reduced to the webhooks for the kinds the test uses (Kueue's objects,
  TrainJob, JobSet), each pointed at ``https://127.0.0.1:<port><path>`` with the test CA and narrowed to one
  namespace. The names keep Kueue's installed names (``kueue-{mutating,validating}-webhook-configuration``), so the
  apiserver calls Kueue's mutating webhook before trainguard's exactly as in a real cluster (configurations run
  in name order).
* ``KueueProcess``: a Configuration file (internal cert management off, the webhook certificate from a test CA
  for 127.0.0.1, leader election and metrics off, the ``trainer.kubeflow.org/trainjob`` and ``jobset``
  integrations, ``manageJobsWithoutQueueName: false``; ``config_overrides`` replaces top-level fields, e.g. a
  MultiKueue manager's ``multiKueue`` timings), started and waited for (``/readyz``).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import yaml

from trainguard.webhook.admission.certs import new_ca, new_serving_cert

REPO = Path(__file__).resolve().parents[2]
KUEUE_TOOLS = REPO / "hack" / "tools" / "kueue"
KUEUE_GROUPS = {"kueue.x-k8s.io", "trainer.kubeflow.org", "jobset.x-k8s.io"}
MUTATING_NAME = "kueue-mutating-webhook-configuration"
VALIDATING_NAME = "kueue-validating-webhook-configuration"


def build_kueue() -> Path:
    """Build (or reuse) the pinned Kueue manager and the upstream CRDs; returns the cache directory."""
    proc = subprocess.run([str(REPO / "hack" / "build-tools.sh"), "kueue", "crds"], capture_output=True, text=True,
                          timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"hack/build-tools.sh kueue crds failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


def kueue_module_dir() -> Path:
    """Where the Go module cache holds the sigs.k8s.io/kueue version hack/tools/kueue pins (downloaded if needed)."""
    proc = subprocess.run(["go", "mod", "download", "-json", "sigs.k8s.io/kueue"], cwd=KUEUE_TOOLS,
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local"})
    if proc.returncode != 0:
        raise RuntimeError(f"go mod download sigs.k8s.io/kueue failed:\n{proc.stderr[-2000:]}")
    return Path(json.loads(proc.stdout)["Dir"])


def kueue_webhook_configurations(url_base: str, ca_pem: bytes, namespace: str) -> list[dict[str, Any]]:
    import base64

    docs = [d for d in yaml.safe_load_all((kueue_module_dir() / "config/components/webhook/manifests.yaml").read_text()) if d]
    ca = base64.b64encode(ca_pem).decode()
    out = []
    for doc in docs:
        doc = copy.deepcopy(doc)
        doc["metadata"] = {"name": MUTATING_NAME if doc["kind"] == "MutatingWebhookConfiguration" else VALIDATING_NAME}
        hooks = []
        for hook in doc["webhooks"]:
            if not {g for r in hook["rules"] for g in r["apiGroups"]} <= KUEUE_GROUPS:
                continue
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"{url_base}{path}", "caBundle": ca}
            # Ignored by the apiserver for cluster-scoped kinds (ClusterQueue, ResourceFlavor, Cohort).
            hook["namespaceSelector"] = {"matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "In", "values": [namespace]}]}
            hooks.append(hook)
        doc["webhooks"] = hooks
        out.append(doc)
    return out


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class KueueProcess:
    binary: Path
    kubeconfig: str
    workdir: Path
    webhook_port: int = field(default_factory=_free_port)
    health_port: int = field(default_factory=_free_port)
    ca_pem: bytes = b""
    # Extra --feature-gates (name -> on/off), after the harness's own VisibilityOnDemand=false.
    feature_gates: dict[str, bool] = field(default_factory=dict)
    # Top-level Configuration fields set over the harness's own (e.g. ``multiKueue`` timings, ``integrations``).
    config_overrides: dict[str, Any] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url_base(self) -> str:
        return f"https://127.0.0.1:{self.webhook_port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "kueue.log"

    def write_config(self) -> Path:
        now = datetime.now(timezone.utc)
        ca = new_ca(now=now, lifetime=timedelta(days=1), common_name="kueue-test-ca")
        leaf = new_serving_cert(ca, dns_names=["localhost"], ip_addresses=["127.0.0.1"], now=now, lifetime=timedelta(days=1))
        certs = self.workdir / "certs"
        certs.mkdir(parents=True, exist_ok=True)
        (certs / "tls.crt").write_bytes(leaf.cert_pem)
        (certs / "tls.key").write_bytes(leaf.key_pem)
        self.ca_pem = ca.cert_pem
        config = {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.health_port}"},
            "metrics": {"bindAddress": "0"},
            "webhook": {"host": "127.0.0.1", "port": self.webhook_port, "certDir": str(certs)},
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "manageJobsWithoutQueueName": False,
            "integrations": {"frameworks": ["trainer.kubeflow.org/trainjob", "jobset.x-k8s.io/jobset"]},
            **self.config_overrides,
        }
        path = self.workdir / "kueue-config.yaml"
        path.write_text(yaml.safe_dump(config))
        return path

    def start(self, ready_timeout: float = 90) -> "KueueProcess":
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.write_config()
        args = [str(self.binary), "--config", str(config), "--kubeconfig", self.kubeconfig,
                # The on-demand visibility API server would need an APIService and its own certificates.
                "--feature-gates", ",".join(["VisibilityOnDemand=false"] + [
                    f"{name}={str(on).lower()}" for name, on in self.feature_gates.items()]),
                # Kueue's metrics server reads its certificate from this directory when internal cert management is
                # off (hack/tools/kueue/main.go); metrics are not served (bindAddress 0), the file must still exist.
                "--zap-log-level", "3"]
        env = {**os.environ, "KUEUE_METRICS_CERT_DIR": str(self.workdir / "certs")}
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + ready_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"the Kueue manager exited with {self.proc.returncode}:\n{self.log_tail()}")
            if self.health("/readyz") == 200:
                return self
            time.sleep(0.2)
        self.stop()
        raise AssertionError(f"the Kueue manager was not ready after {ready_timeout}s:\n{self.log_tail()}")

    def health(self, path: str) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}{path}", timeout=2) as resp:
                return resp.status
        except urllib.error.HTTPError as e:
            return e.code
        except OSError:
            return 0

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"
