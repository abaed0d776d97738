#!/usr/bin/env python3
"""Benchmark: the webhook of a baseline revision against this tree's, side by side on one apiserver, in one run.

Run from the repository root (a script, not a test)::

    .venv/bin/python bench/webhook_ab.py                      # ~5-8 min on 2 cores; writes bench/results/webhook_ab_<baseline>.{json,md}
    .venv/bin/python bench/webhook_ab.py --baseline b331e99 --rounds 6

One ``hack/cluster.sh`` control plane (etcd + kube-apiserver v1.35.4, temporary state), this tree's CRDs, the
``torch-distributed`` ClusterTrainingRuntime and the ``gpu-teams`` TrainJobPolicy of ``examples/``. Two webhook
processes watch it:

* **old**: the ``webhook`` package of ``--baseline`` (``git archive`` into a temporary directory, run from there
  with ``PYTHONPATH``; before the one installed name its packages were ``webhook``/``controller``), started by its
  own CLI (``webhook.cli:main webhook``);
* **new**: this tree's ``trainguard webhook`` (the installed console script).

Same flags for both (``--cert-dir`` with a throwaway CA, ``--log-level info``). Each is registered (mutating +
validating) for two namespaces: one the policy selects (``trainguard.io/tier=gpu``) and one no policy selects. The
load is the one ``bench/upstream_bench.py`` sends (its ``create_many``: ``examples/``' ``llm-ddp`` with a
runtimePatch, ``dryRun=All`` CREATEs over keep-alive HTTPS), the four configurations rotated within every round.

CPU is read from each webhook process's own counters (``/proc/<pid>/stat`` utime + stime) over each cell. A
process also spends CPU while no review arrives (watches, probes' timers, certificate polling); that **idle rate**
(CPU ms per wall second) is measured on each process alone, before and after the load, and reported with the share
of a cell's CPU it explains: on a loaded machine a cell's wall time grows, and an idle rate times that wall time
lands in "CPU per CREATE" without any review costing more.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import yaml  # noqa: E402

from tests.integration.conftest import TRAINGUARD, WebhookProcess, free_port, temp_ca  # noqa: E402
from trainguard.webhook.admission.registration import Registration, webhook_configurations  # noqa: E402
from upstream_bench import (  # noqa: E402
    Side, cpu_seconds, create_many, example_objects, narrowed, rss_mib, start_cluster, stop_cluster,
)

RESULTS = REPO / "bench" / "results"
DEFAULT_BASELINE = "b331e99"  # the start of the session that renamed the packages (d64fd5b) and added the process shell


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def start(name: str, args_head: list[str], cluster: Any, work: Path, env: dict[str, str] | None, cwd: Path | None,
          extra: list[str]) -> WebhookProcess:
    d = work / name
    d.mkdir(parents=True)
    port, health = free_port(), free_port()
    ca = temp_ca(d / "certs").cert_pem
    args = args_head + ["webhook", "--bind-address", "127.0.0.1", "--port", str(port), "--health-port", str(health),
                        "--kubeconfig", cluster.kubeconfig, "--log-level", "info", "--cert-dir", str(d / "certs"),
                        "--cert-dir-poll", "1", *extra]
    wp = WebhookProcess(port, health, d / "webhook.log", args, ca)
    if env is None:
        return wp.start(90)
    # WebhookProcess.start has no env/cwd: the same loop with them
    wp.proc = subprocess.Popen(args, stdout=open(wp.log_path, "ab"), stderr=subprocess.STDOUT, env=env, cwd=cwd)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if wp.proc.poll() is not None:
            raise RuntimeError(f"{name} exited:\n{wp.log_tail()}")
        if wp.health("/readyz") == 200:
            return wp
        time.sleep(0.2)
    raise RuntimeError(f"{name} not ready:\n{wp.log_tail()}")


def idle_rate(pids: dict[str, int], seconds: float) -> dict[str, float]:
    """CPU ms per wall second of each process while nothing is sent to it."""
    c0, t0 = {k: cpu_seconds(p) for k, p in pids.items()}, time.monotonic()
    time.sleep(seconds)
    wall = time.monotonic() - t0
    return {k: round((cpu_seconds(p) - c0[k]) * 1000 / wall, 2) for k, p in pids.items()}


def calibration_ms(job: dict[str, Any], n: int = 2000) -> float:
    """CPU ms of a fixed pure-Python workload (JSON round trips of the TrainJob) in this process: how fast the
    machine runs Python right now, to compare runs made at different times (the per-CREATE figures scale with it)."""
    text = json.dumps(job)
    t = time.process_time()
    for _ in range(n):
        json.dumps(json.loads(text))
    return round((time.process_time() - t) * 1000, 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", default=DEFAULT_BASELINE)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--cells", default="1:80,16:160", help="concurrency:CREATEs per cell, comma separated")
    parser.add_argument("--idle-s", type=float, default=20.0)
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--profile", metavar="DIR", help="run both webhooks under cProfile (figures not comparable)")
    parser.add_argument("--extra", default="", help="more flags for both webhooks, space separated")
    args = parser.parse_args()
    cells = {int(c): int(n) for c, n in (x.split(":") for x in args.cells.split(","))}
    runtime, policy, job = example_objects()
    work = Path(tempfile.mkdtemp(prefix="trainguard-webhook-ab-"))
    t_start = time.monotonic()
    hooks: dict[str, WebhookProcess] = {}
    state = None
    try:
        old_tree = work / "old-tree"
        old_tree.mkdir()
        tar = subprocess.run(["git", "-C", str(REPO), "archive", args.baseline, "webhook"], check=True,
                             capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(old_tree)], input=tar, check=True)
        rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--", "webhook"],
                                    capture_output=True, text=True).stdout.strip())
        log("starting the control plane")
        cluster, state = start_cluster()
        namespaces = {"old": ("ab-old-policy", "ab-old-plain"), "new": ("ab-new-policy", "ab-new-plain")}
        for pol, plain in namespaces.values():
            cluster.kubectl("create", "namespace", pol)
            cluster.kubectl("create", "namespace", plain)
            cluster.kubectl("label", "namespace", pol, "trainguard.io/tier=gpu")
        cluster.kubectl("create", "namespace", "trainguard-system")
        cluster.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(runtime))
        cluster.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(policy))
        prof = (lambda n: ["-m", "cProfile", "-o", f"{args.profile}/{n}.prof"]) if args.profile else (lambda n: [])
        extra = args.extra.split()
        old_env = {**os.environ, "PYTHONPATH": str(old_tree)}
        # -c: the old CLI without the installed console script (which is this tree's)
        launch_old = "import sys; from webhook.cli import main; sys.exit(main())"
        if args.profile:
            Path(args.profile).mkdir(parents=True, exist_ok=True)
            old_head = [sys.executable, *prof("old"), "-c", launch_old]
            new_head = [sys.executable, *prof("new"), str(TRAINGUARD)]
        else:
            old_head = [sys.executable, "-c", launch_old]
            new_head = [str(TRAINGUARD)]
        hooks["old"] = start("old", old_head, cluster, work, old_env, old_tree, extra)
        hooks["new"] = start("new", new_head, cluster, work, None, None, extra)
        for name, hook in hooks.items():
            reg = Registration(url_base=hook.url_base, ca_bundle=hook.ca_pem, failure_policy="Fail",
                               mutating_name=f"ab-{name}-mutating", validating_name=f"ab-{name}-validating")
            cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(
                narrowed(list(webhook_configurations(reg)), list(namespaces[name]))))
        side = Side("ab", cluster, 0, 0, state)
        pids = {n: h.proc.pid for n, h in hooks.items()}  # type: ignore[union-attr]
        configs = [(f"{n}, {kind}", n, ns) for kind, i in (("policy", 0), ("no policy", 1))
                   for n in ("old", "new") for ns in (namespaces[n][i],)]
        for label, _, ns in configs:  # warm-up, and proof that each webhook is the one answering its namespaces
            lat, errors = asyncio.run(create_many(side, ns, job, 40, 4, True))
            if errors:
                raise RuntimeError(f"{label}: warm-up failed: {errors[0]}")
        calib = [calibration_ms(job)]
        log("idle rate before the load")
        idle_before = idle_rate(pids, args.idle_s)
        out: dict[str, dict[int, dict[str, list[float]]]] = {}
        for r in range(args.rounds):
            for conc, n in cells.items():
                k = r % len(configs)
                for label, name, ns in configs[k:] + configs[:k]:
                    pid, api = pids[name], side.server_pids()["kube-apiserver"]
                    c0, a0, t0 = cpu_seconds(pid), cpu_seconds(api), time.monotonic()
                    lat, errors = asyncio.run(create_many(side, ns, job, n, conc, True))
                    wall, cpu, api_cpu = time.monotonic() - t0, cpu_seconds(pid) - c0, cpu_seconds(api) - a0
                    ok = n - len(errors)
                    if ok < n / 2:
                        raise RuntimeError(f"{label} c={conc}: {len(errors)} of {n} failed: {errors[0]}")
                    cell = out.setdefault(label, {}).setdefault(conc, {"cpu_ms": [], "wall_ms": [], "lat": [], "failed": [],
                                                                          "apiserver_ms": []})
                    cell["cpu_ms"].append(cpu * 1000 / ok)
                    cell["wall_ms"].append(wall * 1000 / ok)
                    cell["apiserver_ms"].append(api_cpu * 1000 / ok)
                    cell["lat"].extend(lat)
                    cell["failed"].append(len(errors))
            calib.append(calibration_ms(job))
            log(f"round {r + 1}/{args.rounds} done (load average {os.getloadavg()[0]:.1f})")
        log("idle rate after the load")
        idle_after = idle_rate(pids, args.idle_s)
        result: dict[str, Any] = {
            "baseline": args.baseline, "new": rev + (" + uncommitted webhook/ changes" if dirty else ""),
            "python": platform.python_version(), "cpus": os.cpu_count(), "rounds": args.rounds, "cells": cells,
            "extra_flags": extra, "profiled": bool(args.profile), "load_avg_end": os.getloadavg(),
            "calibration_cpu_ms": calib, "idle_cpu_ms_per_s": {"before": idle_before, "after": idle_after},
            "rss_mib": {n: round(rss_mib(p), 1) for n, p in pids.items()},
            "duration_s": round(time.monotonic() - t_start, 1), "cells_result": {}}
        for label, by_c in out.items():
            name = label.split(",")[0]
            idle = (idle_before[name] + idle_after[name]) / 2
            result["cells_result"][label] = {str(c): {
                "cpu_ms_per_create": round(statistics.median(v["cpu_ms"]), 3),
                "cpu_ms_rounds": [round(x, 3) for x in v["cpu_ms"]],
                "wall_ms_per_create": round(statistics.median(v["wall_ms"]), 2),
                "apiserver_cpu_ms_per_create": round(statistics.median(v["apiserver_ms"]), 3),
                "idle_share_ms": round(idle * statistics.median(v["wall_ms"]) / 1000, 3),
                "p50_ms": round(sorted(v["lat"])[len(v["lat"]) // 2] * 1000, 2), "failed": sum(v["failed"])}
                for c, v in by_c.items()}
        out_dir = Path(args.out)
        out_dir.mkdir(parents=True, exist_ok=True)
        stem = f"webhook_ab_{args.baseline}"
        (out_dir / f"{stem}.json").write_text(json.dumps(result, indent=1) + "\n")
        md = report(result)
        (out_dir / f"{stem}.md").write_text(md)
        print(md)
        return 0
    finally:
        for h in hooks.values():
            h.stop()
        if state is not None:
            stop_cluster(state)
        shutil.rmtree(work, ignore_errors=True)


def report(r: dict[str, Any]) -> str:
    c = r["cells_result"]
    lines = [f"# Webhook CPU per dry-run CREATE: {r['baseline']} (old) against {r['new']} (new), one run", "",
             f"`.venv/bin/python bench/webhook_ab.py --baseline {r['baseline']} --rounds {r['rounds']}"
             f"{' --extra ' + repr(' '.join(r['extra_flags'])) if r['extra_flags'] else ''}`: {r['duration_s']:.0f} s, "
             f"{r['cpus']} CPUs, load average at the end {r['load_avg_end'][0]:.1f}, Python {r['python']}. One apiserver, "
             "both webhooks watching it, configurations rotated within every round; CPU from each process's own "
             "counters, median of the rounds (min-max).", "",
             "| conc. | configuration | old CPU ms | new CPU ms | new / old (median of per-round ratios) | "
             "wall ms per CREATE old / new | idle share old / new | kube-apiserver CPU ms old / new |",
             "|---:|---|---:|---:|---:|---|---|---|"]
    for kind in ("policy", "no policy"):
        o, n = c[f"old, {kind}"], c[f"new, {kind}"]
        for conc in sorted(o, key=int):
            a, b = o[conc], n[conc]
            ratios = [y / x for x, y in zip(a["cpu_ms_rounds"], b["cpu_ms_rounds"])]
            lines.append(
                f"| {conc} | {kind} | {a['cpu_ms_per_create']:.2f} ({min(a['cpu_ms_rounds']):.2f}-"
                f"{max(a['cpu_ms_rounds']):.2f}) | {b['cpu_ms_per_create']:.2f} ({min(b['cpu_ms_rounds']):.2f}-"
                f"{max(b['cpu_ms_rounds']):.2f}) | {statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) | "
                f"{a['wall_ms_per_create']:.1f} / {b['wall_ms_per_create']:.1f} | {a['idle_share_ms']:.2f} / "
                f"{b['idle_share_ms']:.2f} | {a['apiserver_cpu_ms_per_create']:.2f} / {b['apiserver_cpu_ms_per_create']:.2f} |")
    i = r["idle_cpu_ms_per_s"]
    lines += ["", f"Idle CPU (ms per wall second, nothing sent): old {i['before']['old']} before / {i['after']['old']} "
              f"after the load, new {i['before']['new']} / {i['after']['new']}. \"Idle share\" = that rate x the cell's "
              "wall time per CREATE: the part of \"CPU per CREATE\" no review spent. RSS at the end: old "
              f"{r['rss_mib']['old']:.0f} MiB, new {r['rss_mib']['new']:.0f} MiB.", "",
              "Machine speed during the run (the per-CREATE figures scale with it; compare runs only through these): "
              "kube-apiserver CPU per CREATE (the same pinned Go binary for every revision) in the table, and a fixed "
              "pure-Python workload (2,000 JSON round trips of the TrainJob) in the bench process, ms per round: "
              + ", ".join(f"{x:g}" for x in r.get("calibration_cpu_ms", [])) + "."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
