#!/usr/bin/env python3
"""Benchmark: the webhook CPU and memory of the worst-shaped objects a namespace user can send (issue 22 part 5).

Run from the repository root (a script, not a test)::

    .venv/bin/python bench/review_cost_bench.py            # ~3 min on 2 cores; writes bench/results/review_cost_bench.{json,md}
    .venv/bin/python bench/review_cost_bench.py --before 8b8d892 --rounds 3

Each shape is an attack object beside a *control*: the ordinary object padded with one annotation to the attack's
JSON size, so the ratio says what the shape costs beyond its bytes (1x: linear in the size). Both are reviewed in
one worker process, interleaved round by round, the median kept: decode of the AdmissionReview body, then
``mutate_trainjob`` + ``validate_trainjob`` on the mutated object (TrainJobs) or the runtime validator (runtimes),
with the ``examples/`` runtime and ``gpu-teams`` policy. Each shape runs in its own process, so its peak RSS
(``ru_maxrss``: imports, both objects, the reviews) is its own; compare with the chart's webhook memory limit
(``charts/trainguard/values.yaml``: 512 MiB). **before** is the webhook package of ``--before`` (``git archive``
into a temporary directory, imported in place of this tree's); **after** this tree.

Shapes:

* ``missing-targets``: 15 runtimePatches (the policy adds the 16th, the CRD's maxItems) x 100 replicated jobs the
  runtime lacks, ~70 KB;
* ``missing-containers``: 15 runtimePatches on ``node``, each with 64 containers and 64 init containers it lacks;
* ``runtime-depends-on``: a ClusterTrainingRuntime of 6,000 replicatedJobs, each ``dependsOn`` the next (~1 MB);
* ``stored-big-runtime``: an ordinary TrainJob CREATE against a stored runtime of 6,000 jobs (past the door's cap:
  created before it, or while the webhook was down); control: the ordinary runtime padded to the same size;
* ``labels-20k``: a TrainJob with 20,000 labels (the CRD sets no limit; the apiserver checks them after the webhooks);
* ``deep-900``: an unknown field nested 900 levels in a runtimePatch (the apiserver decodes up to 10,000).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import importlib.util
import json
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
NOW = datetime(2026, 9, 1, 12, 0, tzinfo=timezone.utc)
DEFAULT_BEFORE = "8b8d892"  # the last commit before bounded review cost
CHART_LIMIT_MIB = 512
SHAPES = ("missing-targets", "missing-containers", "runtime-depends-on", "stored-big-runtime", "labels-20k", "deep-900")


def use_tree(tree: Path) -> None:
    """Import ``trainguard.webhook`` from ``tree`` instead of this checkout (the editable install's mapping)."""

    class Finder:
        @staticmethod
        def find_spec(name: str, path: Any = None, target: Any = None):
            if name == "trainguard.webhook":
                return importlib.util.spec_from_file_location(
                    name, tree / "webhook" / "__init__.py", submodule_search_locations=[str(tree / "webhook")])
            return None

    sys.meta_path.insert(0, Finder)


# --- shapes ------------------------------------------------------------------------------------------------------


def world() -> tuple[dict[str, Any], Any]:
    import yaml

    from trainguard.webhook.policy.verdict import ClusterSnapshot

    docs = []
    for name in ("torch-distributed-gpu.yaml", "gpu-topology-policy.yaml"):
        docs += [d for d in yaml.safe_load_all((REPO / "examples" / name).read_text()) if d]
    job = next(d for d in docs if d["kind"] == "TrainJob")
    snapshot = ClusterSnapshot(
        cluster_training_runtimes={d["metadata"]["name"]: d for d in docs if d["kind"] == "ClusterTrainingRuntime"},
        policies={d["metadata"]["name"]: d for d in docs if d["kind"] == "TrainJobPolicy"},
        namespace_labels={d["metadata"]["name"]: d["metadata"].get("labels") or {} for d in docs if d["kind"] == "Namespace"},
    )
    return job, snapshot


def padded(obj: dict[str, Any], size: int) -> dict[str, Any]:
    """``obj`` with one annotation making its JSON ``size`` bytes (the control of the same size)."""
    out = copy.deepcopy(obj)
    annotations = out["metadata"].setdefault("annotations", {})
    annotations["bench/pad"] = ""
    annotations["bench/pad"] = "x" * max(0, size - len(json.dumps(out)))
    return out


def patches(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"manager": f"acme.io/team-{p}", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": jobs(p)}}}}
            for p in range(15)]  # the policy's own patch makes 16, the CRD's maxItems


def big_runtime(runtime: dict[str, Any], n: int, *, forward: bool) -> dict[str, Any]:
    out = copy.deepcopy(runtime)
    node = out["spec"]["template"]["spec"]["replicatedJobs"][0]
    out["spec"]["template"]["spec"]["replicatedJobs"] = [node] + [
        {"name": f"job-{i}", "template": {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}},
         "dependsOn": [{"name": f"job-{i + 1}" if forward else ("node" if i == 1 else f"job-{i - 1}"), "status": "Ready"}]}
        for i in range(1, n)]
    return out


def shape(name: str, job: dict[str, Any], snapshot: Any) -> tuple[str, dict, dict, Any, Any]:
    """(kind, attack, control, snapshot for the attack, snapshot for the control)."""
    runtime_name, runtime = next(iter(snapshot.cluster_training_runtimes.items()))
    attack = copy.deepcopy(job)
    if name == "missing-targets":
        attack["spec"]["runtimePatches"] = patches(lambda p: [
            {"name": f"t{p}-j{j}", "template": {"spec": {}}} for j in range(100)])
    elif name == "missing-containers":
        attack["spec"]["runtimePatches"] = patches(lambda p: [{"name": "node", "template": {"spec": {"template": {"spec": {
            "containers": [{"name": f"c{p}-{i}"} for i in range(64)],
            "initContainers": [{"name": f"i{p}-{i}"} for i in range(64)]}}}}}])
    elif name == "runtime-depends-on":
        attack = big_runtime(runtime, 6_000, forward=True)
        return "ClusterTrainingRuntime", attack, padded(runtime, len(json.dumps(attack))), snapshot, snapshot
    elif name == "stored-big-runtime":
        stored = big_runtime(runtime, 6_000, forward=False)
        control = padded(runtime, len(json.dumps(stored)))
        return ("TrainJob", attack, attack,
                dataclasses.replace(snapshot, cluster_training_runtimes={runtime_name: stored}),
                dataclasses.replace(snapshot, cluster_training_runtimes={runtime_name: control}))
    elif name == "labels-20k":
        attack["metadata"].setdefault("labels", {}).update({f"bench.io/label-{i}": f"value-{i}" for i in range(20_000)})
    elif name == "deep-900":
        inner = {}
        attack["spec"]["runtimePatches"] = [{"manager": "acme.io/deep", "futureField": inner}]
        for _ in range(896):
            inner["next"] = inner = {}
    return "TrainJob", attack, padded(job, len(json.dumps(attack))), snapshot, snapshot


# --- one worker: one tree, one shape -----------------------------------------------------------------------------


def review(kind: str, raw: bytes, snapshot: Any) -> tuple[bool, int]:
    from trainguard.webhook.policy import pipeline
    from trainguard.webhook.policy.verdict import AdmissionInput

    obj = json.loads(raw)["request"]["object"]
    if kind != "TrainJob":
        v = pipeline.validate_cluster_training_runtime(AdmissionInput("CREATE", obj, None, NOW), snapshot)
        return v.allowed, len(v.message or "")
    m = pipeline.mutate_trainjob(AdmissionInput("CREATE", obj, None, NOW, namespace="team-a"), snapshot)
    if not m.allowed:
        return False, len(m.message or "")
    v = pipeline.validate_trainjob(AdmissionInput("CREATE", m.obj if m.obj is not None else obj, None, NOW,
                                                  namespace="team-a"), snapshot)
    return v.allowed, len(v.message or "")


def worker(tree: Path, name: str, rounds: int) -> dict[str, Any]:
    use_tree(tree)
    job, snapshot = world()
    idle_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kind, attack, control, snap_attack, snap_control = shape(name, job, snapshot)

    def body(obj: dict) -> bytes:
        return json.dumps({"request": {"object": obj}}).encode()

    bodies = {"attack": (body(attack), snap_attack), "control": (body(control), snap_control)}
    times: dict[str, list[float]] = {"attack": [], "control": []}
    outcome: dict[str, Any] = {}
    for _ in range(rounds):
        for which, (raw, snap) in bodies.items():
            start = time.process_time()
            try:
                outcome[which] = review(kind, raw, snap)
            except RecursionError:
                outcome[which] = ("RecursionError", 0)
            times[which].append(time.process_time() - start)
    attack_ms, control_ms = (statistics.median(times[w]) * 1e3 for w in ("attack", "control"))
    return {"shape": name, "bytes": len(bodies["attack"][0]), "control_bytes": len(bodies["control"][0]),
            "attack_ms": attack_ms, "control_ms": control_ms, "ratio": attack_ms / control_ms,
            "attack_verdict": _verdict(outcome["attack"]), "control_verdict": _verdict(outcome["control"]),
            "message_chars": outcome["attack"][1],
            "idle_rss_mib": idle_kib / 1024, "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def _verdict(outcome: tuple[Any, int]) -> str:
    allowed = outcome[0]
    return allowed if isinstance(allowed, str) else "admitted" if allowed else "denied"


# --- the run -----------------------------------------------------------------------------------------------------


def run_worker(tree: Path, name: str, rounds: int) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, __file__, "--worker", str(tree), name, "--rounds", str(rounds)],
                          capture_output=True, text=True, timeout=1800, cwd=REPO)
    if proc.returncode != 0:
        raise SystemExit(f"worker {tree} {name} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", default=DEFAULT_BEFORE, help="git revision to compare against")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--worker", nargs=2, metavar=("TREE", "SHAPE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(Path(args.worker[0]), args.worker[1], args.rounds)))
        return 0
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO).stdout.strip()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / "before"
        old.mkdir()
        archive = subprocess.run(["git", "archive", args.before, "webhook"], capture_output=True, check=True, cwd=REPO).stdout
        subprocess.run(["tar", "-x", "-C", str(old)], input=archive, check=True)
        for name in SHAPES:  # after and before alternate shape by shape
            for label, tree in (("after", REPO), ("before", old)):
                row = run_worker(tree, name, args.rounds if label == "after" else max(1, args.rounds // 2))
                rows.append({"tree": label, **row})
                print(f"{label:6} {name:20} {row['attack_ms']:9.1f} ms  x{row['ratio']:7.1f}  "
                      f"{row['peak_rss_mib']:6.0f} MiB  {row['attack_verdict']}", file=sys.stderr)
    result = {"python": platform.python_version(), "machine": platform.machine(), "commit": commit,
              "before": args.before, "rounds": args.rounds, "chart_memory_limit_mib": CHART_LIMIT_MIB, "rows": rows}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "review_cost_bench.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [f"# webhook CPU of worst-shaped objects vs an ordinary object of the same size (tree {commit}, "
             f"before = {args.before}; CPU ms per review, median of rounds)", "",
             "| shape | bytes | tree | attack (ms) | control (ms) | ratio | verdict | message chars | peak RSS (MiB) |",
             "|---|---:|---|---:|---:|---:|---|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['shape']} | {r['bytes']:,} | {r['tree']} | {r['attack_ms']:,.1f} | {r['control_ms']:,.1f} | "
                     f"{r['ratio']:,.1f}x | {r['attack_verdict']} | {r['message_chars']:,} | {r['peak_rss_mib']:,.0f} |")
    idle = statistics.median(r["idle_rss_mib"] for r in rows)
    lines += ["", f"Peak RSS is the worker process's (imports, both objects, the reviews; {idle:.0f} MiB after the "
              f"imports alone); the chart's webhook limit is {CHART_LIMIT_MIB} MiB."]
    (RESULTS / "review_cost_bench.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
