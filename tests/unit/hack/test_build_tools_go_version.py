"""hack/build-tools.sh refuses a Go older than the `go` directive of the modules it builds (GOTOOLCHAIN=local
would fail later, deep in a build), naming the needed and found versions; a new enough Go gets past the check."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "hack" / "build-tools.sh"


def _needed(globs: list[str]) -> str:
    found = []
    for g in globs:
        for mod in (REPO / "hack" / "tools").glob(g):
            m = re.search(r"^go (\d[\d.]*)\s*$", mod.read_text(), re.M)
            if m:
                found.append(tuple(int(x) for x in m.group(1).split(".")))
    return ".".join(map(str, max(found)))


def _run(tmp_path: Path, version: str, *targets: str) -> subprocess.CompletedProcess[str]:
    # a fake go: prints VERSION for `go version`, fails anything else (so nothing gets built)
    fake = tmp_path / "fakebin"
    fake.mkdir(exist_ok=True)
    (fake / "go").write_text(
        f'#!/bin/sh\n[ "$1" = version ] && {{ echo "go version go{version} linux/amd64"; exit 0; }}\n'
        'echo "fake go: $*" >&2; exit 3\n')
    (fake / "go").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}",
           "TRAINGUARD_BIN_DIR": str(tmp_path / "bin"), "TRAINGUARD_PEER_DIR": str(tmp_path / "peer")}
    return subprocess.run(["bash", str(SCRIPT), *targets], env=env, capture_output=True, text=True, timeout=60)


def test_an_old_go_is_refused_naming_both_versions(tmp_path: Path) -> None:
    need = _needed(["*/go.mod"])
    r = _run(tmp_path, "1.24.3", "etcd")
    assert r.returncode == 1
    assert f"Go {need} or newer is needed" in r.stderr and "found 1.24.3" in r.stderr
    assert "fake go:" not in r.stderr  # refused before any go build
    assert not (tmp_path / "bin" / "etcd").exists()


def test_the_node_target_needs_the_node_modules_go(tmp_path: Path) -> None:
    need = _needed(["*/go.mod", "node/*/go.mod"])
    assert need != _needed(["*/go.mod"])  # the node's modules ask for a newer Go than the rest
    r = _run(tmp_path, _needed(["*/go.mod"]), "node")
    assert r.returncode == 1
    assert f"Go {need} or newer is needed" in r.stderr


def test_a_new_enough_go_passes_the_check(tmp_path: Path) -> None:
    r = _run(tmp_path, _needed(["*/go.mod"]), "etcd")
    assert "or newer is needed" not in r.stderr
    assert "fake go: build" in r.stderr  # it went on to build (with the fake go, which fails)
