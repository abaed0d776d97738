#!/usr/bin/env python3
"""A/B benchmark of the cache agent's request path: the agent of a baseline git revision vs. this working tree,
side by side in one run (interleaved rounds, same shards, same client).

    .venv/bin/python bench/cache_agent_ab.py --baseline 1e7203f   # writes bench/results/cache_agent_ab.{json,md}

Why: the issue-10 limits (peer credentials at accept, descriptors-in-flight accounting with SIOCOUTQ, idle
bookkeeping) sit on the per-request path; this measures what they cost per request. The baseline's ``controller/``
and ``webhook/`` are extracted with ``git archive`` into a temp dir and run from there; the client is this tree's.
Measured, warm (shards resident), per request: ``ping`` round trip; ``open`` of a 4 MiB shard (request, fd, map,
first byte, unmap); ``open_many`` of 32 shards (one request, 32 fds, map and unmap each). Each round runs every
operation on both agents in alternating order; the figure is the median over rounds of each round's median. On a
loaded machine wall-clock latency is noisy, so the agent process's own CPU time per request (utime + stime from
/proc, summed over all rounds) is reported too: that is what the agent-side checks cost.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from trainguard.cache.client import CacheClient  # noqa: E402

MiB = 1 << 20


def extract(rev: str, into: Path) -> Path:
    archive = subprocess.run(["git", "archive", rev, "controller", "webhook"], cwd=REPO, check=True,
                             capture_output=True).stdout
    into.mkdir(parents=True)
    archive_path = into / "src.tar"
    archive_path.write_bytes(archive)
    with tarfile.open(archive_path) as tar:
        tar.extractall(into, filter="data")
    return into


def start_agent(tree: Path, root: Path, socket_path: Path) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainguard.webhook.cli", "cache-agent", f"--root={root}", f"--socket={socket_path}",
         f"--memory-budget={1 << 30}", "--http-port=-1", "--maintain-interval=3600", "--rescan-interval=3600",
         "--log-level=warning"],
        cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)},
    )
    client = CacheClient(str(socket_path), reconnect_timeout=60)
    deadline = time.monotonic() + 120
    while not client.ping().get("ready"):
        if time.monotonic() > deadline:
            raise RuntimeError("agent did not become ready")
        time.sleep(0.05)
    client.close()
    return proc


TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def measure(client: CacheClient, names: list[str], n: int, pid: int, cpu: dict[str, list[float]]) -> dict[str, float]:
    """Median microseconds per ping, per open, per open_many(32); adds (agent CPU seconds, requests) to ``cpu``."""
    out: dict[str, float] = {}

    def timed(op: str, count: int, once: Any) -> None:
        samples = []
        c0 = cpu_seconds(pid)
        for i in range(count):
            t0 = time.perf_counter()
            once(i)
            samples.append(time.perf_counter() - t0)
        cpu.setdefault(op, [0.0, 0])
        cpu[op][0] += cpu_seconds(pid) - c0
        cpu[op][1] += count
        out[op] = statistics.median(samples) * 1e6

    def open_one(i: int) -> None:
        with client.open(names[i % len(names)]) as shard:
            shard.view[0]

    def open_batch(i: int) -> None:
        for shard in client.open_many(names[:32]):
            shard.view[0]
            shard.close()

    timed("ping", n, lambda i: client.ping())
    timed("open", n, open_one)
    timed("open_many_32", max(1, n // 8), open_batch)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", required=True, help="git revision whose agent is A")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--requests", type=int, default=400, help="requests per operation per round")
    parser.add_argument("--out", default=str(REPO / "bench" / "results"))
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="cache-ab-", dir="/var/tmp"))
    procs: list[subprocess.Popen] = []
    try:
        data = scratch / "data"
        data.mkdir()
        block = os.urandom(4 * MiB)
        names = []
        for i in range(64):
            (data / f"{i:03d}.bin").write_bytes(block)
            names.append(f"{i:03d}.bin")
        baseline = extract(args.baseline, scratch / "baseline")
        sides = {"baseline": baseline, "current": REPO}
        clients = {}
        pids = {}
        for side, tree in sides.items():
            procs.append(start_agent(tree, data, scratch / f"{side}.sock"))
            pids[side] = procs[-1].pid
            clients[side] = CacheClient(str(scratch / f"{side}.sock"))
        for side, client in clients.items():
            measure(client, names, 50, pids[side], {})  # warm-up: index fast path, page cache, interpreter
        rounds: dict[str, list[dict[str, float]]] = {side: [] for side in sides}
        cpu: dict[str, dict[str, list[float]]] = {side: {} for side in sides}
        for r in range(args.rounds):
            order = list(sides) if r % 2 == 0 else list(reversed(list(sides)))
            for side in order:
                rounds[side].append(measure(clients[side], names, args.requests, pids[side], cpu[side]))
        result: dict = {"baseline": args.baseline, "rounds": args.rounds, "requests": args.requests,
                        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                    "load": [round(x, 1) for x in os.getloadavg()]}, "us": {}, "ratio_current_over_baseline": {},
                        "agent_cpu_us_per_request": {}}
        for op in ("ping", "open", "open_many_32"):
            per_side = {side: statistics.median(x[op] for x in rounds[side]) for side in sides}
            result["us"][op] = {side: round(v, 1) for side, v in per_side.items()}
            per_round = [c[op] / b[op] for b, c in zip(rounds["baseline"], rounds["current"])]
            result["ratio_current_over_baseline"][op] = {
                "median": round(statistics.median(per_round), 3), "min": round(min(per_round), 3),
                "max": round(max(per_round), 3)}
            result["agent_cpu_us_per_request"][op] = {
                side: round(cpu[side][op][0] / cpu[side][op][1] * 1e6, 1) for side in sides}
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "cache_agent_ab.json").write_text(json.dumps(result, indent=2) + "\n")
        lines = [f"# cache agent A/B: {args.baseline} (baseline) vs. working tree (current)", "",
                 f"{args.rounds} interleaved rounds x {args.requests} requests; load {result['machine']['load']}", "",
                 "| operation | baseline µs | current µs | current / baseline (median of rounds, min-max) "
                 "| agent CPU µs/request: baseline | current |",
                 "|---|---:|---:|---:|---:|---:|"]
        for op, v in result["us"].items():
            ratio = result["ratio_current_over_baseline"][op]
            agent_cpu = result["agent_cpu_us_per_request"][op]
            lines.append(f"| {op} | {v['baseline']} | {v['current']} | {ratio['median']} ({ratio['min']}-{ratio['max']}) "
                         f"| {agent_cpu['baseline']} | {agent_cpu['current']} |")
        (out / "cache_agent_ab.md").write_text("\n".join(lines) + "\n")
        print("\n".join(lines))
        for client in clients.values():
            client.close()
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(10)
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
