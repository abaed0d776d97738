"""Upstream Kubeflow Trainer v2.3.0's own manager, run out of cluster against an apiserver of its own.

The binary comes from ``hack/build-tools.sh trainer-manager`` (pinned by ``hack/tools/trainer/go.mod``, cached in a
directory keyed by that file). Everything else upstream ships (CRDs, webhook registration, runtimes, examples) is read
from the Go module cache at run time, at the version the same go.mod pins; nothing of it is copied into the repo.

The peer's control plane is a second ``hack/cluster.sh`` (own state directory, own etcd and kube-apiserver), with
upstream's trainer CRDs and the same JobSet and scheduler-plugins PodGroup CRDs the session cluster gets. The manager
runs with certificate management and leader election off, serves its webhooks on 127.0.0.1 with a throwaway
certificate written where controller-runtime looks (``$TMPDIR/k8s-webhook-server/serving-certs``), and is
registered by URL with upstream's own paths, rules and configuration names.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import HACK, REPO, Cluster, build_tools, upstream_crds, wait_for_crds
from tests.integration.conftest import free_port, temp_ca

TRAINER_MODULE = "github.com/kubeflow/trainer/v2"
# upstream's configuration names after its kustomize patch (manifests/overlays), the ones its cert rotator injects into
VALIDATING_NAME = "validator.trainer.kubeflow.org"
MUTATING_NAME = "defaulter.trainer.kubeflow.org"


def trainer_module_dir() -> Path:
    """Where the Go module cache holds the Kubeflow Trainer version hack/tools/trainer/go.mod pins."""
    proc = subprocess.run(
        ["go", "mod", "download", "-json", TRAINER_MODULE], cwd=HACK / "tools" / "trainer",
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local"},
    )
    if proc.returncode != 0:
        raise RuntimeError(f"go mod download {TRAINER_MODULE} failed:\n{proc.stderr[-2000:]}")
    return Path(json.loads(proc.stdout)["Dir"])


def build_peer() -> Path:
    """The cached ``trainer-controller-manager`` binary (built when missing)."""
    proc = subprocess.run([str(HACK / "build-tools.sh"), "trainer-manager"], capture_output=True, text=True,
                          timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"hack/build-tools.sh trainer-manager failed:\n{proc.stderr[-4000:]}")
    peer_dir = subprocess.run(["bash", "-c", f"source {HACK}/versions.sh && trainguard_peer_dir"],
                              capture_output=True, text=True, check=True).stdout.strip()
    binary = Path(peer_dir) / "trainer-controller-manager"
    if not binary.is_file():
        raise RuntimeError(f"build-tools reported success but {binary} is missing")
    return binary


def manager_config(webhook_port: int, health_port: int) -> dict[str, Any]:
    """upstream's controller_manager_config.yaml as a local run needs it: certificates provided externally, no
    leader election, no metrics listener, everything on loopback."""
    return {
        "apiVersion": "config.trainer.kubeflow.org/v1alpha1",
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}", "readinessEndpointName": "readyz",
                   "livenessEndpointName": "healthz"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"port": webhook_port, "host": "127.0.0.1"},
        "leaderElection": {"leaderElect": False},
        "certManagement": {"enable": False},
        "controller": {"groupKindConcurrency": {"TrainJob.trainer.kubeflow.org": 5,
                                                "TrainingRuntime.trainer.kubeflow.org": 1,
                                                "ClusterTrainingRuntime.trainer.kubeflow.org": 1}},
    }


def url_registrations(module_dir: Path, url_base: str, ca_pem: bytes) -> list[dict[str, Any]]:
    """upstream's manifests/base/webhook/manifests.yaml, each service reference turned into a URL on ``url_base``,
    with the configuration names and the runtime opt-out selector its kustomize overlay adds."""
    import base64

    docs = [d for d in yaml.safe_load_all((module_dir / "manifests/base/webhook/manifests.yaml").read_text()) if d]
    out = []
    for doc in docs:
        doc["metadata"] = {"name": MUTATING_NAME if doc["kind"] == "MutatingWebhookConfiguration" else VALIDATING_NAME}
        for hook in doc["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": url_base + path, "caBundle": base64.b64encode(ca_pem).decode()}
            if hook["name"].endswith("trainingruntime.trainer.kubeflow.org"):
                hook["objectSelector"] = {"matchExpressions": [
                    {"key": "trainer.kubeflow.org/webhook-validation", "operator": "NotIn", "values": ["disabled"]}]}
        out.append(doc)
    return out


@dataclass
class UpstreamPeer:
    """A second control plane running upstream's manager. ``cluster`` is used like the session ``cluster``."""

    workdir: Path
    module_dir: Path
    binary: Path
    cluster: Cluster | None = None
    proc: subprocess.Popen[bytes] | None = None
    health_port: int = 0
    webhook_port: int = 0
    state_dir: Path | None = None
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def log_path(self) -> Path:
        return self.workdir / "trainer-controller-manager.log"

    def start(self) -> "UpstreamPeer":
        t0 = time.monotonic()
        self.state_dir = Path(tempfile.mkdtemp(prefix="trainguard-peer-cluster-"))
        proc = subprocess.run([str(HACK / "cluster.sh"), "up"], capture_output=True, text=True, timeout=3600,
                              env={**os.environ, "TRAINGUARD_CLUSTER_DIR": str(self.state_dir)})
        if proc.returncode != 0:
            raise RuntimeError(f"hack/cluster.sh up (peer) failed:\n{proc.stderr}")
        kubeconfig = proc.stdout.strip().splitlines()[-1]
        self.cluster = Cluster(kubeconfig, Path((self.state_dir / "bin_dir").read_text().strip()))
        crds = sorted((self.module_dir / "manifests/base/crds").glob("trainer.kubeflow.org_*.yaml"))
        crds += upstream_crds(self.cluster.bin_dir, "jobset", "scheduler-plugins")
        args = ["apply", "--server-side", "--force-conflicts"]
        for m in crds:
            args += ["-f", str(m)]
        self.cluster.kubectl(*args, timeout=120)
        wait_for_crds(self.cluster)
        self.timings["control_plane_s"] = time.monotonic() - t0

        t1 = time.monotonic()
        tmp = self.workdir / "tmp"
        ca = temp_ca(tmp / "k8s-webhook-server" / "serving-certs")
        self.webhook_port, self.health_port = free_port(), free_port()
        config = self.workdir / "config.yaml"
        config.write_text(yaml.safe_dump(manager_config(self.webhook_port, self.health_port)))
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [str(self.binary), "--config", str(config), "--zap-log-level", "info"],
            stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir,
            env={**os.environ, "KUBECONFIG": kubeconfig, "TMPDIR": str(tmp)},
        )
        log.close()
        deadline = time.monotonic() + 120
        while self.health("/readyz") != 200:
            if self.proc.poll() is not None:
                raise RuntimeError(f"trainer-controller-manager exited {self.proc.returncode}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"trainer-controller-manager not ready after 120 s:\n{self.log_tail()}")
            time.sleep(0.2)
        registrations = url_registrations(self.module_dir, f"https://127.0.0.1:{self.webhook_port}", ca.cert_pem)
        self.cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(registrations))
        self.timings["manager_ready_s"] = time.monotonic() - t1
        return self

    def health(self, path: str) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}{path}", timeout=2) as resp:
                return resp.status
        except urllib.error.HTTPError as e:
            return e.code
        except OSError:
            return 0

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        if self.state_dir is not None:
            subprocess.run([str(HACK / "cluster.sh"), "down"], capture_output=True, timeout=120,
                           env={**os.environ, "TRAINGUARD_CLUSTER_DIR": str(self.state_dir)})
            shutil.rmtree(self.state_dir, ignore_errors=True)
            self.state_dir = None


__all__ = ["REPO", "UpstreamPeer", "build_peer", "trainer_module_dir", "url_registrations", "manager_config"]
