"""The real node the ``node`` tests run on: ``hack/node.sh up`` once per session, ``hack/node.sh down`` at the end.

``real_node`` (session) checks that the node binaries (``hack/build-tools.sh node``) and the images
(``hack/images.sh build``) are there — ``make test-node`` builds both before pytest, so a missing one is a failure
that says what to run, never a skip — then brings the node up (containerd, kubelet and kube-proxy joined to a
local control plane with kube-controller-manager and kube-scheduler; the images loaded into containerd), which
returns once the Node is Ready and kube-proxy routes the ``kubernetes`` Service. It yields a ``RealNode``:
``kubeconfig``, ``node_name``, ``kubectl(...)``, the image names, the pod CIDR and the node's address. Its teardown
runs ``down``, which puts the host back and fails (an error in the last test's teardown) when anything still differs.

Every test under tests/node/ is marked ``node`` here (``make test`` and ``make test-unit`` deselect it), and
``test_node_lifecycle.py``, which brings a node of its own up and down, runs before any test that uses
``real_node``: kubelet's ports are fixed, so there is one node per machine at a time.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import pytest

REPO = Path(__file__).resolve().parents[2]
HACK = REPO / "hack"
NODE_SH = HACK / "node.sh"

# hack/images.sh's names (its header is the contract) and hack/node.sh's defaults.
IMAGES = {
    "pause": "localhost/trainguard/pause:3.10",
    "base": "localhost/trainguard/base:bookworm",
    "trainguard": "localhost/trainguard/trainguard:dev",
    "trainer": "localhost/trainguard/trainer:dev",
}
NODE_NAME = "trainguard-node"
NODE_ADDRESS = "10.245.0.1"
POD_CIDR = "10.244.0.0/24"
NODE_BINARIES = ("runc", "containerd", "ctr", "containerd-shim-runc-v2", "kubelet", "kube-proxy", "cni/bridge",
                 "cni/host-local", "cni/loopback", "cni/portmap")
UP_TIMEOUT = 420


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).resolve().parent
    for item in items:
        if here in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.node)
    # the lifecycle test's own node must be up and down before the session node comes up
    items.sort(key=lambda item: Path(str(item.fspath)).name != "test_node_lifecycle.py")


def hack(*args: str, timeout: float = 120, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(HACK / args[0]), *args[1:]], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def node_dir() -> Path:
    out = subprocess.run(["bash", "-c", f"source {HACK}/versions.sh && trainguard_node_dir"], capture_output=True,
                         text=True, check=True)
    return Path(out.stdout.strip())


# What hack/node.sh and the tests run on the host (hack/deps.sh node-host installs them; make test-node does first).
HOST_TOOLS = ("iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-save", "ip6tables-restore",
              "nft", "nfacct", "ip", "ss", "mount", "umount")


def require_host_tools() -> None:
    missing = [t for t in HOST_TOOLS if shutil.which(t) is None]
    if missing:
        pytest.fail(f"host tools missing: {', '.join(missing)}; run `hack/deps.sh node-host` (make test-node does "
                    "before any test)")


def require_node_prerequisites(images: tuple[str, ...]) -> None:
    """Fail (never skip) with what to run when the node cannot come up here."""
    if os.geteuid() != 0:
        pytest.fail("the node tests need root (hack/node.sh mounts, creates interfaces and cgroups, writes sysctls)")
    require_host_tools()
    bins = node_dir()
    missing = [b for b in NODE_BINARIES if not (bins / b).is_file()]
    if missing:
        pytest.fail(f"node binaries missing in {bins}: {', '.join(missing)}; run `hack/build-tools.sh node` "
                    "(make test-node does)")
    not_built = [name for name in images if not hack("images.sh", "dir", name).stdout.strip()]
    if not_built:
        pytest.fail(f"images not built: {', '.join(not_built)}; run `hack/images.sh build` (make test-node does)")


@dataclass
class RealNode:
    kubeconfig: Path
    kubectl_bin: Path
    node_name: str = NODE_NAME
    address: str = NODE_ADDRESS
    pod_cidr: str = POD_CIDR
    images: dict[str, str] = field(default_factory=lambda: dict(IMAGES))
    up_seconds: float = 0.0

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """The pinned kubectl against the node's control plane; with ``check`` a failure fails the test."""
        proc = subprocess.run([str(self.kubectl_bin), "--kubeconfig", str(self.kubeconfig), *args], input=input,
                              capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
        return proc


def node_up(log_dir: Path, images: tuple[str, ...] = tuple(IMAGES)) -> RealNode:
    """``hack/node.sh up`` with ``images`` loaded, timed; fails the test with node.sh's own message (it prints the
    logs and puts the host back when it cannot start)."""
    require_node_prerequisites(images)
    t0 = time.monotonic()
    proc = hack("node.sh", "up", timeout=UP_TIMEOUT,
                env={"TRAINGUARD_NODE_KEEP_LOGS": str(log_dir), "TRAINGUARD_NODE_IMAGES": " ".join(images)})
    if proc.returncode:
        pytest.fail(f"hack/node.sh up failed ({proc.returncode}):\n{proc.stderr[-6000:]}")
    kubeconfig = Path(proc.stdout.strip().splitlines()[-1])
    bin_dir = Path((kubeconfig.parent / "bin_dir").read_text().strip())
    return RealNode(kubeconfig=kubeconfig, kubectl_bin=bin_dir / "kubectl", up_seconds=time.monotonic() - t0)


def node_down(log_dir: Path) -> subprocess.CompletedProcess[str]:
    return hack("node.sh", "down", timeout=300, env={"TRAINGUARD_NODE_KEEP_LOGS": str(log_dir)})


@pytest.fixture(scope="session")
def real_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealNode]:
    logs = tmp_path_factory.mktemp("real-node-logs")
    node = node_up(logs)
    try:
        yield node
    finally:
        proc = node_down(logs)
        if proc.returncode:
            pytest.fail(f"hack/node.sh down did not put the host back ({proc.returncode}); the components' logs "
                        f"are in {logs}:\n{proc.stderr[-6000:]}")
