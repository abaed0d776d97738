"""Shared fixtures: a real local Kubernetes control plane, started once per test session.

- ``cluster`` (session): etcd + kube-apiserver from ``hack/cluster.sh``, in a fresh temporary state directory, so
  parallel pytest sessions never share one. Set ``TRAINGUARD_KUBECONFIG`` to run against a cluster you already
  started (``make cluster-up``); the plain ``KUBECONFIG`` is deliberately ignored, so a test run never touches the
  cluster your shell happens to point at. The JobSet and scheduler-plugins PodGroup CRDs (from their Go modules) and
  trainguard's own ``crds/`` are applied once.
- ``namespace`` (function): a fresh namespace per test.

Tests under ``tests/integration/``, ``tests/e2e/``, ``tests/security/`` and ``tests/parity/`` are marked ``cluster``
automatically; unit tests never start the control plane (the fixture is lazy), so ``pytest -m "not cluster"`` runs
without Go or a cluster.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

REPO = Path(__file__).resolve().parent.parent
HACK = REPO / "hack"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        parts = Path(str(item.fspath)).relative_to(REPO).parts
        if len(parts) > 1 and parts[0] == "tests" and parts[1] in ("integration", "e2e", "security", "parity"):
            item.add_marker(pytest.mark.cluster)


@dataclass
class Cluster:
    kubeconfig: str
    bin_dir: Path

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run the pinned kubectl against this cluster. With ``check``, a non-zero exit fails the test with stderr."""
        proc = subprocess.run(
            [str(self.bin_dir / "kubectl"), "--kubeconfig", self.kubeconfig, *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
        return proc

    def api_client(self):  # -> kubernetes.client.ApiClient
        from kubernetes import client, config

        configuration = client.Configuration()
        config.load_kube_config(config_file=self.kubeconfig, client_configuration=configuration)
        return client.ApiClient(configuration)


def build_tools(*targets: str) -> Path:
    """Build (or reuse) the pinned binaries; returns the cache directory."""
    proc = subprocess.run(
        [str(HACK / "build-tools.sh"), *targets], capture_output=True, text=True, timeout=3600
    )
    if proc.returncode != 0:
        raise RuntimeError(f"hack/build-tools.sh {' '.join(targets)} failed:\n{proc.stderr}")
    return Path(proc.stdout.strip().splitlines()[-1])


def upstream_crds(bin_dir: Path, *projects: str) -> list[Path]:
    return sorted(p for project in projects for p in (bin_dir / "crds" / project).glob("*.yaml"))


def wait_for_crds(c: Cluster, timeout: float = 60) -> None:
    """Block until every CRD is Established (``kubectl wait`` errors on a CRD that has no status yet)."""
    deadline = time.monotonic() + timeout
    pending: list[str] = []
    while time.monotonic() < deadline:
        crds = json.loads(c.kubectl("get", "crd", "-o", "json").stdout)["items"]
        pending = [
            crd["metadata"]["name"]
            for crd in crds
            if not any(
                cond["type"] == "Established" and cond["status"] == "True"
                for cond in (crd.get("status") or {}).get("conditions") or []
            )
        ]
        if not pending:
            return
        time.sleep(0.2)
    raise AssertionError(f"CRDs not established after {timeout}s: {pending}")


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    reuse = os.environ.get("TRAINGUARD_KUBECONFIG")
    state_dir = None
    if reuse:
        c = Cluster(reuse, build_tools("control-plane"))
    else:
        state_dir = tempfile.mkdtemp(prefix="trainguard-cluster-")
        env = {**os.environ, "TRAINGUARD_CLUSTER_DIR": state_dir}
        proc = subprocess.run(
            [str(HACK / "cluster.sh"), "up"], capture_output=True, text=True, env=env, timeout=3600
        )
        if proc.returncode != 0:
            shutil.rmtree(state_dir, ignore_errors=True)
            pytest.fail(f"hack/cluster.sh up failed:\n{proc.stderr}", pytrace=False)
        kubeconfig = proc.stdout.strip().splitlines()[-1]
        c = Cluster(kubeconfig, Path((Path(state_dir) / "bin_dir").read_text().strip()))
    try:
        manifests = upstream_crds(c.bin_dir, "jobset", "scheduler-plugins") + sorted((REPO / "crds").glob("*.yaml"))
        args = ["apply", "--server-side", "--force-conflicts"]
        for m in manifests:
            args += ["-f", str(m)]
        c.kubectl(*args, timeout=120)
        wait_for_crds(c)
        # The namespace the chart's SDK discovery objects default to: tests apply or server-dry-run renders of the
        # chart here, and a dry run stores no Namespace for the objects after it (test_sdk_discovery.py installs
        # the chart with helm where it does not exist).
        c.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "Namespace",
                                                        "metadata": {"name": "kubeflow-system"}}))
        yield c
    finally:
        if state_dir:
            subprocess.run(
                [str(HACK / "cluster.sh"), "down"],
                env={**os.environ, "TRAINGUARD_CLUSTER_DIR": state_dir},
                capture_output=True,
                timeout=120,
            )
            shutil.rmtree(state_dir, ignore_errors=True)


@pytest.fixture
def namespace(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    # Namespace names are DNS labels: keep a readable prefix of the test name plus a random suffix.
    stem = "".join(ch if ch.isalnum() else "-" for ch in request.node.name.lower())[:40].strip("-")
    name = f"{stem}-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", name)
    yield name
    # No kube-controller-manager runs, so the namespace stays Terminating; the whole cluster is thrown away.
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)
