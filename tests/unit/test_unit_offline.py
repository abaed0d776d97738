"""``make test-unit`` never touches Go or the network: collecting the whole suite under its marker expression runs
no ``go`` command (tests/parity names its cases from the Go module cache only when its tests are selected)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
UNIT_MARKERS = "not cluster and not tools and not node"  # the Makefile's test-unit target


def _collect(tmp_path: Path, markers: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    fake_bin, called = tmp_path / "bin", tmp_path / "go-called"
    fake_bin.mkdir()
    go = fake_bin / "go"
    go.write_text(f"#!/bin/sh\necho \"$@\" >> {called}\nexit 1\n")
    go.chmod(0o755)
    env = {**os.environ, "PATH": f"{fake_bin}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", markers, "tests/parity"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    return proc, called


def test_unit_collection_runs_no_go(tmp_path: Path) -> None:
    proc, called = _collect(tmp_path, UNIT_MARKERS)
    assert proc.returncode in (0, 5), proc.stdout + proc.stderr
    assert not called.exists(), f"collection ran go: {called.read_text()}"


def test_cluster_collection_does_name_the_corpus_through_go(tmp_path: Path) -> None:
    """The check above can fail: selecting the parity tests asks Go for the module (our fake go answers 1)."""
    proc, called = _collect(tmp_path, "cluster")
    assert called.exists() and "mod download" in called.read_text(), proc.stdout + proc.stderr
