"""The node's binaries and images live in cache directories of their own (hack/versions.sh, hack/images.sh), so
pinning them never moves the key of the binaries `make test` builds, and the image names are the contract
hack/node.sh and tests/node/ use. No root, no build: only the scripts' own answers."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
NAMES = {
    "pause": "localhost/trainguard/pause:3.10",
    "base": "localhost/trainguard/base:bookworm",
    "trainguard": "localhost/trainguard/trainguard:dev",
    "trainer": "localhost/trainguard/trainer:dev",
}


@pytest.fixture
def hack(tmp_path: Path) -> Path:
    """A copy of hack/versions.sh and every go.mod (and kubernetes.sum) it reads."""
    dest = tmp_path / "hack"
    (dest / "tools").mkdir(parents=True)
    shutil.copy2(REPO / "hack/versions.sh", dest / "versions.sh")
    for f in (REPO / "hack/tools").rglob("*"):
        if f.name in ("go.mod", "kubernetes.sum"):
            (dest / f.relative_to(REPO / "hack")).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, dest / f.relative_to(REPO / "hack"))
    return dest


def dirs(hack: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINGUARD_")}
    out = subprocess.run(["bash", "-c", f"source {hack}/versions.sh; trainguard_bin_dir; trainguard_peer_dir; "
                          "trainguard_node_dir"], capture_output=True, text=True, check=True, env=env).stdout
    return dict(zip(("bin", "peer", "node"), out.split()))


def test_node_dir_names_its_versions(hack: Path) -> None:
    node = dirs(hack)["node"]
    assert re.fullmatch(r".*/trainguard/node/k8s-v1\.35\.4_containerd-v2\.4\.2_runc-v1\.5\.3_[0-9a-f]{8}/bin", node), node


@pytest.mark.parametrize("edit,moved", [
    ("tools/node/runc/go.mod", {"node"}),
    ("tools/node/containerd/go.mod", {"node"}),
    ("tools/node/cni/go.mod", {"node"}),
    ("tools/node/buildkit/go.mod", {"node"}),
    ("tools/node/kubernetes.sum", {"node"}),
    # kubelet and kube-proxy come from the kubernetes module: both directories move
    ("tools/kubernetes/go.mod", {"bin", "node"}),
    ("tools/etcd/go.mod", {"bin"}),
    ("tools/trainer/go.mod", {"peer"}),
])
def test_each_cache_dir_moves_with_its_own_pins_only(hack: Path, edit: str, moved: set[str]) -> None:
    before = dirs(hack)
    with open(hack / edit, "a") as f:
        f.write("\n// changed\n")
    after = dirs(hack)
    assert {k for k in before if before[k] != after[k]} == moved


def test_make_test_never_builds_the_node() -> None:
    """`all` (what `make test` builds) lists no node binary; `node` is a target of its own."""
    script = (REPO / "hack/build-tools.sh").read_text()
    all_line = re.search(r"^\s*all\) for x in ([^;]*); do", script, re.M)
    assert all_line, "build-tools.sh has an `all` target"
    assert "node" not in all_line.group(1).split()
    assert re.search(r"^\s*node\) node ;;", script, re.M)


def images_sh(*args: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINGUARD_")}
    env.update(TRAINGUARD_IMAGES_DIR=str(tmp_path / "images"),
               TRAINGUARD_NODE_CONTAINERD_SOCK=str(tmp_path / "no-containerd.sock"))
    return subprocess.run([str(REPO / "hack/images.sh"), *args], capture_output=True, text=True, env=env, timeout=120)


def test_images_status_names_the_contract(tmp_path: Path) -> None:
    proc = images_sh("status", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = {line.split()[0]: line.split()[1] for line in proc.stdout.splitlines()[1:5]}
    assert rows == NAMES
    assert all("(not built)" in line for line in proc.stdout.splitlines()[1:5])
    assert f"containerd: {tmp_path / 'no-containerd.sock'} (not running)" in proc.stdout


def test_images_dir_is_empty_until_built(tmp_path: Path) -> None:
    for image in NAMES:
        proc = images_sh("dir", image, tmp_path=tmp_path)
        assert proc.returncode != 0 and proc.stdout == ""
    layout = tmp_path / "images"
    proc = images_sh("dir", "nonsense", tmp_path=tmp_path)
    assert proc.returncode != 0 and "usage" in proc.stderr
    assert not any(layout.glob("*-*")), "asking builds nothing"


@pytest.mark.parametrize("args,message", [
    ((), "usage"),
    (("push",), "usage"),
    (("load",), "no containerd socket at"),
])
def test_images_refuses_clearly(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    proc = images_sh(*args, tmp_path=tmp_path)
    assert proc.returncode != 0 and message in proc.stderr


def test_node_pins_the_pause_image_images_builds() -> None:
    assert f"sandbox = \"{NAMES['pause']}\"" in (REPO / "hack/node.sh").read_text()
