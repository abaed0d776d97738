#!/usr/bin/env python3
"""A/B benchmark of the runtime framework: a baseline git revision's ``effective_job`` + ``validate_trainjob`` +
``build_objects`` vs. this working tree's, side by side in one process.

    .venv/bin/python bench/runtime_build_ab.py --baseline 80ef84e   # writes bench/results/runtime_build_ab.{json,md}

Why: every TrainJob admission and every reconcile runs this path, and issue 15 moved its field reads behind the
read-only views (``trainguard.webhook.api.views``) and its plugin calls behind the registry; this measures what
that costs. The baseline's ``webhook/`` is extracted with ``git archive`` into a temp dir and imported under another
top-level name (its ``trainguard.webhook`` imports rewritten), so both implementations run in the same process on
the same inputs (the runtime tests' torch, plain + coscheduling and MPI fixtures). Rounds alternate the two (and
which goes first); each slice runs every case ``--ops`` times; the figure is the ratio of summed process CPU time,
which a shared machine disturbs less than wall time, with the per-slice median ratio beside it.
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "unit" / "runtime"))

import fixtures  # noqa: E402  (the runtime tests' worked examples)

BASE = "tg_baseline"


def extract(rev: str, into: Path) -> None:
    """``webhook/`` of ``rev`` as package ``tg_baseline.webhook`` under ``into``."""
    archive = subprocess.run(["git", "archive", rev, "webhook"], cwd=REPO, check=True, capture_output=True).stdout
    (into / "src.tar").write_bytes(archive)
    root = into / BASE
    root.mkdir()
    (root / "__init__.py").write_text("")
    with tarfile.open(into / "src.tar") as tar:
        tar.extractall(root, filter="data")
    for path in root.rglob("*.py"):
        text = path.read_text()
        path.write_text(re.sub(r"\btrainguard\.webhook\b", f"{BASE}.webhook", text))


def cases() -> list[tuple[str, dict, dict]]:
    return [
        ("torch", fixtures.LLM_DDP, fixtures.TORCH_RUNTIME),
        ("plain+coscheduling", fixtures.TAB_TRAIN, fixtures.PLAIN_BATCH),
        ("mpi", fixtures.trainjob("pi", "mpi-distributed", trainer={"numNodes": 3}), fixtures.MPI_RUNTIME),
    ]


def runner(package: str):
    runtime = importlib.import_module(f"{package}.webhook.runtime")
    keys = runtime.placeholder_keys()

    def run(tj: dict, rt: dict) -> None:
        runtime.effective_job(tj, rt)
        runtime.validate_trainjob(tj, None, rt, None)
        runtime.build_objects(tj, rt, keys=keys)

    return run


def measure(runs: dict[str, Any], rounds: int, ops: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, tj, rt in cases():
        cpu = {k: 0.0 for k in runs}
        ratios = []
        for fn in runs.values():  # warm both
            for _ in range(20):
                fn(tj, rt)
        for i in range(rounds):
            order = list(runs) if i % 2 == 0 else list(reversed(runs))
            slice_cpu = {}
            for key in order:
                fn = runs[key]
                start = time.process_time()
                for _ in range(ops):
                    fn(tj, rt)
                slice_cpu[key] = time.process_time() - start
                cpu[key] += slice_cpu[key]
            ratios.append(slice_cpu["tree"] / slice_cpu["baseline"])
        out[name] = {
            "baseline_us_per_op": round(cpu["baseline"] / (rounds * ops) * 1e6, 1),
            "tree_us_per_op": round(cpu["tree"] / (rounds * ops) * 1e6, 1),
            "ratio_cpu_sum": round(cpu["tree"] / cpu["baseline"], 3),
            "ratio_median_slice": round(statistics.median(ratios), 3),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, help="git revision to compare against")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--ops", type=int, default=10)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = parser.parse_args()
    baseline = subprocess.run(["git", "rev-parse", "--short", args.baseline], cwd=REPO, check=True,
                              capture_output=True, text=True).stdout.strip()
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, check=True, capture_output=True,
                          text=True).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        extract(baseline, Path(tmp))
        sys.path.insert(0, tmp)
        runs = {"baseline": runner(BASE), "tree": runner("trainguard")}
        result = measure(runs, args.rounds, args.ops)
    record = {
        "benchmark": "runtime_build_ab",
        "baseline": baseline,
        "tree": f"{head} + working tree",
        "rounds": args.rounds,
        "ops_per_slice": args.ops,
        "python": platform.python_version(),
        "cases": result,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "runtime_build_ab.json").write_text(json.dumps(record, indent=2) + "\n")
    lines = [
        f"# runtime build A/B: {baseline} (baseline) vs {head} + working tree",
        "",
        f"effective_job + validate_trainjob + build_objects, CPU time per op; {args.rounds} alternating rounds of "
        f"{args.ops} ops per case.",
        "",
        "| case | baseline µs/op | tree µs/op | tree/baseline (CPU sum) | median slice ratio |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, r in result.items():
        lines.append(f"| {name} | {r['baseline_us_per_op']} | {r['tree_us_per_op']} | {r['ratio_cpu_sum']} | "
                     f"{r['ratio_median_slice']} |")
    (args.out / "runtime_build_ab.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
