#!/usr/bin/env python3
"""Vendor the JobSet Helm chart into charts/trainguard/charts/jobset from the Go module that pins JobSet.

trainguard's chart offers JobSet as an optional dependency (``jobset.install``), as Kubeflow Trainer v2.3's chart
does. Helm needs a dependency's chart under ``charts/`` to render at all, even when its condition is false, and
fetching it from registry.k8s.io at ``helm install`` would make offline rendering (GitOps tools, CI) impossible. So
the chart is checked in, copied from ``sigs.k8s.io/jobset`` at the version ``hack/tools/crds/go.mod`` pins (the one
Kubeflow Trainer v2.3 builds against and the tests install the CRD of), with the files ``helm package`` leaves out
(the chart's .helmignore: its unit tests and README template) left out here too. The released chart differs from
the module's only in its image (registry.k8s.io/jobset/jobset:v<version>, IfNotPresent); the parent chart's values
set those, so the copy stays byte-identical and checkable.

usage: python hack/vendor_jobset_chart.py [--check]   (needs Go: the module is found with `go mod download`)
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TOOLS = REPO / "hack" / "tools" / "crds"
TARGET = REPO / "charts" / "trainguard" / "charts" / "jobset"
MODULE = "sigs.k8s.io/jobset"
# What JobSet's charts/jobset/.helmignore keeps out of a packaged chart.
LEFT_OUT = ("tests", "README.md.gotmpl", ".helmignore")


def pinned_version() -> str:
    for line in (TOOLS / "go.mod").read_text().splitlines():
        parts = line.split()
        if MODULE in parts:
            return parts[parts.index(MODULE) + 1]
    raise SystemExit(f"vendor_jobset_chart: {MODULE} is not pinned in {TOOLS / 'go.mod'}")


def module_chart() -> Path:
    """charts/jobset of the pinned module, downloaded into the Go module cache if missing."""
    out = subprocess.run(["go", "mod", "download", "-json", f"{MODULE}@{pinned_version()}"], cwd=TOOLS,
                         capture_output=True, text=True, check=True)
    return Path(json.loads(out.stdout)["Dir"]) / "charts" / "jobset"


def wanted_files(source: Path) -> dict[Path, bytes]:
    files = {}
    for path in sorted(source.rglob("*")):
        rel = path.relative_to(source)
        if path.is_file() and rel.parts[0] not in LEFT_OUT:
            files[rel] = path.read_bytes()
    return files


def present_files() -> dict[Path, bytes]:
    if not TARGET.exists():
        return {}
    return {p.relative_to(TARGET): p.read_bytes() for p in sorted(TARGET.rglob("*")) if p.is_file()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the vendored chart differs from the module's")
    args = parser.parse_args()
    want = wanted_files(module_chart())
    have = present_files()
    if args.check:
        stale = sorted(str(p) for p in set(want) | set(have) if want.get(p) != have.get(p))
        for p in stale:
            print(f"{TARGET.relative_to(REPO) / p} differs from {MODULE}@{pinned_version()}: run "
                  "`python hack/vendor_jobset_chart.py`", file=sys.stderr)
        return 1 if stale else 0
    shutil.rmtree(TARGET, ignore_errors=True)
    for rel, data in want.items():
        (TARGET / rel).parent.mkdir(parents=True, exist_ok=True)
        (TARGET / rel).write_bytes(data)
        (TARGET / rel).chmod(0o644)
    print(f"{TARGET.relative_to(REPO)}: {len(want)} files from {MODULE}@{pinned_version()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
