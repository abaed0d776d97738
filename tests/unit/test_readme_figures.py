"""Every benchmark figure the README prints is the stored result it cites (``bench/results/*.json``), as rounded.

A figure printed with d decimals must lie within half a unit of its d-th place of the stored value, so a re-run
that stores new results without the README changing (or a README edit without a re-run) fails here, naming the
figure. One-off build and start times of earlier sessions are in ``measurements.json``, each with the commit and the
closing note that report it. Figures of runs that are not stored are not in this table: they are not backed.
"""

from __future__ import annotations

import json
import re
import statistics
from functools import cache
from pathlib import Path
from typing import Any, Callable

import pytest

REPO = Path(__file__).resolve().parents[2]


@cache
def readme() -> str:
    # One line per paragraph: a figure may be wrapped across lines.
    return re.sub(r"\s+", " ", (REPO / "README.md").read_text())


@cache
def stored(name: str) -> Any:
    return json.loads((REPO / "bench" / "results" / f"{name}.json").read_text())


def cache_row(shard: str, key: str) -> Callable[[], float]:
    return lambda: next(r[key] for r in stored("cache_bench")["rows"] if r["shard"] == shard and r["state"] == "warm")


def conn(*path: str) -> Callable[[], float]:
    def get() -> float:
        value: Any = stored("connection_bench")["servers"]
        for key in path:
            value = value[key]
        return value
    return get


def cost(n: int) -> Callable[[str], float]:
    return lambda key: next(r[key] for r in stored("admission_cost_bench")["rows"] if r["n"] == n)


def review_cost(tree: str, shape: str, key: str) -> Callable[[], float]:
    return lambda: next(r[key] for r in stored("review_cost_bench")["rows"] if r["tree"] == tree and r["shape"] == shape)


def server(stat: str, pick: Callable[..., float]) -> Callable[[], float]:
    hist = lambda: stored("admission_bench")["server_histogram"]  # noqa: E731
    return lambda: pick(h[stat] for cell in hist().values() for h in cell.values())


def cell(name: str, stat: str) -> Callable[[], float]:
    return lambda: stored("admission_bench")["cells"][name][stat]


def ratio(conc: str, *path: str) -> Callable[[], float]:
    def get() -> float:
        value: Any = stored("admission_bench")["ratios_b_over_a"][conc]
        for key in path:
            value = value[key]
        return value
    return get


def throughput() -> list[float]:
    return [r["throughput"]["median"] for r in stored("admission_bench")["ratios_b_over_a"].values()]


def cpu_per_create(config: str) -> list[float]:
    # webhook + apiserver + etcd, per admitted CREATE, for each concurrency of one configuration (a: no webhook)
    cells = stored("admission_bench")["cpu_ms_per_create"]
    return [sum(v for k, v in c.items() if k != "bench client") for name, c in cells.items() if name.startswith(config + "/")]


def cold(step: str | None = None, *, command: str | None = None, key: str = "seconds") -> Callable[[], float]:
    """A figure of the stored cold rehearsal (``hack/rehearse.py --cold``: every cache empty at the start):
    ``step`` is an install step as ``tool what`` (``build-tools kube-apiserver``; ``build-tools total`` is the
    n-th ``done in``, first the control plane, then the node), else ``key`` of ``command``'s pytest summary, else of
    the whole run (``wall_seconds``). Only a passing cold run backs a figure."""
    def get() -> float:
        run = stored("ci_rehearsal_cold")
        assert run["source"] == "run" and run["ok"] and run["cold"], (
            f"bench/results/ci_rehearsal_cold.json is not a passing cold rehearsal: {run['problems']}")
        if step is not None:
            name, _, nth = step.partition("#")
            tool, what = name.split(" ", 1)
            found = [b["seconds"] for b in run["build_steps"] if b["tool"] == tool and b["what"] == what]
            return found[int(nth or 0)]
        if command is not None:
            return next(c[key] for c in run["commands"] if c["name"] == command)
        return run[key]
    return get


def rehearsal(command: str | None, key: str) -> Callable[[], float]:
    """A figure of the stored CI rehearsal (hack/rehearse.py: `bash .ci/run` on a clean clone): ``key`` of one
    command's pytest summary (``passed``, ``seconds``, ...), or of the whole run when ``command`` is None
    (``wall_seconds``). Only a passing rehearsal that ran (not one parsed from a log with --log) backs a figure."""
    def get() -> float:
        run = stored("ci_rehearsal")
        assert run["source"] == "run" and run["ok"], (
            f"bench/results/ci_rehearsal.json is not a passing rehearsal: {run['source']}, {run['problems']}")
        if command is None:
            return run[key]
        return next(c[key] for c in run["commands"] if c["name"] == command)
    return get


def clock(seconds: Callable[[], float]) -> list[Callable[[], float]]:
    """A duration as the README prints it, ``M min SS s``: the minutes and seconds of the rounded total, as
    hack/rehearse.py's .md writes them (so 1439.6 s is 24 min 00 s, not 23 min 60 s)."""
    return [lambda: divmod(round(seconds()), 60)[0], lambda: divmod(round(seconds()), 60)[1]]


def measured(name: str, *path: str, per: float = 1) -> Callable[[], float]:
    """A one-off build or start time of an earlier session, as ``bench/results/measurements.json`` records it with the
    commit and closing note that report it; ``per`` scales the stored unit to the README's (60: seconds to minutes)."""
    def get() -> float:
        value: Any = stored("measurements")["measurements"][name]
        for key in path:
            value = value[key]
        return value / per
    get.reported = True  # type: ignore[attr-defined]
    return get


def to_nearest(step: float, value: Callable[[], float]) -> Callable[[], float]:
    """A figure the README prints as "about N", N a multiple of ``step``: the stored value rounded to it."""
    return lambda: round(value() / step) * step


def upstream_cpu(config: str) -> list[float]:
    # the webhook's CPU per admitted CREATE at each concurrency (upstream_bench.json, median of the rounds)
    return [c["cpu_ms_per_create"] for c in stored("upstream_bench")["admission"][config].values()]


def upstream_ratio(config: str, pick: Callable[..., float]) -> Callable[[], float]:
    return lambda: pick(t / u for t, u in zip(upstream_cpu(config), upstream_cpu("upstream"), strict=True))


def upstream_path_cpu(config: str) -> list[float]:
    # webhook + kube-apiserver + etcd + bench client CPU per CREATE at each concurrency: the 2-core bound's sum
    return [c["cpu_ms_per_create"] + c["apiserver_cpu_ms"] + c["etcd_cpu_ms"] + c["client_cpu_ms"]
            for c in stored("upstream_bench")["admission"][config].values()]


def bursts(side: str, key: str) -> list[float]:
    return [b[key] for b in stored("upstream_bench")["bursts"][side]]


def burst_ratios() -> list[float]:
    trainguard, upstream = bursts("trainguard", "cpu_ms_per_trainjob"), bursts("upstream", "cpu_ms_per_trainjob")
    return [t / u for t, u in zip(trainguard, upstream, strict=True)]


def steady_rss(process: str) -> Callable[[], float]:
    return lambda: stored("upstream_bench")["steady_rss_mib"][process]


def ab_ratios(baseline: str) -> list[float]:
    """webhook_ab.py's "new / old" of each cell: the median of the per-round ratios of CPU per CREATE."""
    cells = stored(f"webhook_ab_{baseline}")["cells_result"]
    return [statistics.median(n / o for o, n in zip(cells[f"old, {kind}"][conc]["cpu_ms_rounds"],
                                                     cells[f"new, {kind}"][conc]["cpu_ms_rounds"], strict=True))
            for kind in ("policy", "no policy") for conc in cells[f"old, {kind}"]]


KB, MB = 1000, 1000 * 1000

# (README text with each figure as a group, the stored values in the same order, scaled to the README's unit)
FIGURES: list[tuple[str, list[Callable[[], float]]]] = [
    # Node-local dataset cache: the warm table and the first-byte sentence (cache_bench.json)
    (r"\| 4 MiB \| ([\d.]+)x \| ([\d.]+)x \| ([\d.]+)x \|",
     [cache_row("4MiB", "vs_direct"), cache_row("4MiB", "batched_vs_direct"), cache_row("4MiB", "batched_vs_tcp")]),
    (r"\| 64 MiB \| ([\d.]+)x \| ([\d.]+)x \| ([\d.]+)x \|",
     [cache_row("64MiB", "vs_direct"), cache_row("64MiB", "batched_vs_direct"), cache_row("64MiB", "batched_vs_tcp")]),
    (r"\| 512 MiB \| ([\d.]+)x \| ([\d.]+)x \| ([\d.]+)x \|",
     [cache_row("512MiB", "vs_direct"), cache_row("512MiB", "batched_vs_direct"),
      cache_row("512MiB", "batched_vs_tcp")]),
    (r"Warm first byte \(4 MiB shards\): p50 (\d+) µs with one request per shard, (\d+) µs per shard of a batched "
     r"walk, (\d+) µs reading the file directly",
     [lambda k=k: stored("cache_bench")["first_byte_warm"][k]["p50_us"] for k in ("agent", "agent_open_shards", "direct")]),
    # Security model: the attack figures (connection_bench.json, admission_cost_bench.json)
    (r"\| memory per idle TCP connection \| ([\d.]+) KiB \| ([\d.]+) KiB \|",
     [conn("before", "idle_kib_per_connection"), conn("after", "idle_kib_per_connection")]),
    (r"\| 40 withheld 8 MiB bodies: peak RSS / p99 of good requests \| ([\d.]+) MB / ([\d.]+) ms \| ([\d.]+) MB / "
     r"([\d.]+) ms \|",
     [conn("before", "withheld", "rss_peak_mb"), conn("before", "withheld", "good_p99_ms"),
      conn("after", "withheld", "rss_peak_mb"), conn("after", "withheld", "good_p99_ms")]),
    (r"\| 800-connection slowloris: peak RSS / RSS 20 s later / p99 of good requests \| ([\d.]+) / ([\d.]+) MB / "
     r"([\d.]+) ms \| ([\d.]+) / ([\d.]+) MB / ([\d.]+) ms \|",
     [conn("before", "slowloris", "rss_peak_mb"), conn("before", "slowloris", "rss_20s_after_mb"),
      conn("before", "slowloris", "good_p99_ms"), conn("after", "slowloris", "rss_peak_mb"),
      conn("after", "slowloris", "rss_20s_after_mb"), conn("after", "slowloris", "good_p99_ms")]),
    (r"good requests served / log written \| (\d+) of (\d+) / ([\d.]+) MB \| (\d+) of (\d+) / ([\d.]+) KB \|",
     [conn("before", "nofile_1024", "good_fresh_ok"),
      lambda: conn("before", "nofile_1024", "good_fresh_ok")() + conn("before", "nofile_1024", "good_fresh_failed")(),
      lambda: conn("before", "nofile_1024", "log_bytes_15s")() / MB,
      conn("after", "nofile_1024", "good_fresh_ok"),
      lambda: conn("after", "nofile_1024", "good_fresh_ok")() + conn("after", "nofile_1024", "good_fresh_failed")(),
      lambda: conn("after", "nofile_1024", "log_bytes_15s")() / KB]),
    (r"\| one review with a 6,000-entry `env` \(decode \+ mutate \+ validate\) \| ([\d.]+) s \| ([\d.]+) ms \|",
     [lambda: cost(6000)("before_ms") / 1000, lambda: cost(6000)("after_ms")]),
    (r"\| one review of a 70 KB TrainJob naming 1,500 patch targets the runtime lacks: CPU / message \| ([\d.,]+) ms / "
     r"([\d,]+) chars \| ([\d.,]+) ms / ([\d,]+) chars \|",
     [review_cost(t, "missing-targets", k) for t in ("before", "after") for k in ("attack_ms", "message_chars")]),
    (r"\| one review of a 1 MB ClusterTrainingRuntime of 6,000 jobs with `dependsOn`: CPU / peak RSS \(chart limit "
     r"512 MiB\) \| ([\d.,]+) ms / ([\d,]+) MiB \| ([\d.,]+) ms / ([\d,]+) MiB \|",
     [review_cost(t, "runtime-depends-on", k) for t in ("before", "after") for k in ("attack_ms", "peak_rss_mib")]),
    (r"puts a good request without attack at ([\d.]+) ms p50 before and ([\d.]+) ms after",
     [conn("before", "good_baseline_p50_ms"), conn("after", "good_baseline_p50_ms")]),
    # Admission latency (admission_bench.json)
    (r"the webhook's own p50 is ([\d.]+)-([\d.]+) ms",
     [server("p50_ms", min), server("p50_ms", max)]),
    (r"a CREATE through trainguard's two webhooks takes ([\d.]+) ms p50 / ([\d.]+) ms p99 at concurrency 1, "
     r"\*\*([\d.]+)x\*\* the p50 of the same CREATE with no webhook \(([\d.]+)-([\d.]+)x at 8 and 32 in flight",
     [cell("b/c1", "p50"), cell("b/c1", "p99"), ratio("c1", "p50_per_round", "median"),
      ratio("c8", "p50_per_round", "median"), ratio("c32", "p50_per_round", "median")]),
    (r"the webhook's own p50 is [\d.]+-[\d.]+ ms and p99 ([\d.]+)-([\d.]+) ms",
     [server("p99_ms", min), server("p99_ms", max)]),
    (r"at 8 and 32 in flight, p99 at\s+most (\d+) ms\)",
     [lambda: max(cell("b/c8", "p99")(), cell("b/c32", "p99")())]),
    (r"Throughput drops to ([\d.]+)-([\d.]+)x on 2 cores",
     [lambda: min(throughput()), lambda: max(throughput())]),
    (r"costs ([\d.]+)-([\d.]+) ms of CPU in\s+the webhook, apiserver and etcd against ([\d.]+)-([\d.]+) ms without",
     [lambda: min(cpu_per_create("b")), lambda: max(cpu_per_create("b")),
      lambda: min(cpu_per_create("a")), lambda: max(cpu_per_create("a"))]),
    # Node-local dataset cache: the rest of the benchmark paragraph (cache_bench.json)
    (r"`\.venv/bin/python bench/cache_bench\.py`, about (\d+) s;",
     [to_nearest(10, lambda: stored("cache_bench")["wall_seconds"])]),
    (r"a single request per 4 MiB shard does not \(([\d.]+)x\)", [cache_row("4MiB", "vs_direct")]),
    (r"Cold reads are disk-bound \(([\d.]+)-([\d.]+)x\)",
     [lambda: min(r["vs_direct"] for r in stored("cache_bench")["rows"] if r["state"] == "cold"),
      lambda: max(r["vs_direct"] for r in stored("cache_bench")["rows"] if r["state"] == "cold")]),
    # The connection limits bullet (connection_bench.json)
    (r"no TLS state until the client's first byte \(about ([\d.]+) KiB per silent socket\)",
     [conn("after", "idle_kib_per_connection")]),
    # Performance against upstream: the table and the paragraph after it (upstream_bench.json, webhook_ab_*.json)
    (r"`\.venv/bin/python bench/upstream_bench\.py`, (\d+) min for the stored run",
     [lambda: stored("upstream_bench")["duration_s"] / 60]),
    (r"with a TrainJobPolicy, concurrency 1 / 16 / 64 \| ([\d.]+) / ([\d.]+) / ([\d.]+) ms \| ([\d.]+) / ([\d.]+) / "
     r"([\d.]+) ms \| ([\d.]+)-([\d.]+)x \|",
     [*(lambda i=i: upstream_cpu("upstream")[i] for i in range(3)),
      *(lambda i=i: upstream_cpu("trainguard, policy")[i] for i in range(3)),
      upstream_ratio("trainguard, policy", min), upstream_ratio("trainguard, policy", max)]),
    (r"\| webhook CPU per admitted CREATE, no policy \| same \| ([\d.]+) / ([\d.]+) / ([\d.]+) ms \| "
     r"([\d.]+)-([\d.]+)x \|",
     [*(lambda i=i: upstream_cpu("trainguard, no policy")[i] for i in range(3)),
      upstream_ratio("trainguard, no policy", min), upstream_ratio("trainguard, no policy", max)]),
    (r"\| webhook RSS at 10,000 TrainJobs \| (\d+) MiB \(whole manager\) \| (\d+) MiB \| ([\d.]+)x \|",
     [steady_rss("upstream"), steady_rss("trainguard webhook"),
      lambda: steady_rss("trainguard webhook")() / steady_rss("upstream")()]),
    (r"\| controller RSS at 10,000 TrainJobs \| (\d+) MiB \| (\d+) MiB \| ([\d.]+)x \|",
     [steady_rss("upstream"), steady_rss("trainguard controller"),
      lambda: steady_rss("trainguard controller")() / steady_rss("upstream")()]),
    (r"\| reconcile CPU per TrainJob, bursts of 300 / 300 / 3,000 \| ([\d.]+)-([\d.]+) ms \| ([\d.]+)-([\d.]+) ms \| "
     r"([\d.]+)-([\d.]+)x \|",
     [lambda: min(bursts("upstream", "cpu_ms_per_trainjob")), lambda: max(bursts("upstream", "cpu_ms_per_trainjob")),
      lambda: min(bursts("trainguard", "cpu_ms_per_trainjob")),
      lambda: max(bursts("trainguard", "cpu_ms_per_trainjob")),
      lambda: min(burst_ratios()), lambda: max(burst_ratios())]),
    # every burst's writes print as the same whole number: the ones farthest from it are checked
    (r"\| API writes per TrainJob \| (\d+) \| (\d+) \| (\d+)x \|",
     [lambda: max(bursts("upstream", "writes_per_trainjob")), lambda: max(bursts("trainguard", "writes_per_trainjob")),
      lambda: max(t / u for t, u in zip(bursts("trainguard", "writes_per_trainjob"),
                                       bursts("upstream", "writes_per_trainjob"), strict=True))]),
    (r"one admitted CREATE with a policy costs ([\d.]+)-([\d.]+) ms of CPU in all \(kube-apiserver ([\d.]+)-([\d.]+), "
     r"webhook ([\d.]+)-([\d.]+)\), so the machine admits at most about (\d+)-(\d+) CREATEs a second",
     [lambda: min(upstream_path_cpu("trainguard, policy")), lambda: max(upstream_path_cpu("trainguard, policy")),
      lambda: min(c["apiserver_cpu_ms"] for c in stored("upstream_bench")["admission"]["trainguard, policy"].values()),
      lambda: max(c["apiserver_cpu_ms"] for c in stored("upstream_bench")["admission"]["trainguard, policy"].values()),
      lambda: min(upstream_cpu("trainguard, policy")), lambda: max(upstream_cpu("trainguard, policy")),
      lambda: 2000 / max(upstream_path_cpu("trainguard, policy")),
      lambda: 2000 / min(upstream_path_cpu("trainguard, policy"))]),
    (r"of trainguard's ([\d.]+)-([\d.]+) ms per CREATE, the smaller part is the review itself",
     [lambda: min(upstream_cpu("trainguard, policy")), lambda: max(upstream_cpu("trainguard, policy"))]),
    (r"loaded by other work \(load average ([\d.]+) at its end\)",
     [lambda: stored("upstream_bench")["load_avg_end"][0]]),
    (r"the same webhook measured ([\d.]+) ms and ([\d.]+) ms on different days",
     [lambda: stored("admission_bench")["cpu_ms_per_create"]["b/c1"]["webhook"],
      lambda: stored("webhook_ab_1c00805")["cells_result"]["old, policy"]["1"]["cpu_ms_per_create"]]),
    # Suite size and durations: the stored CI rehearsal (hack/rehearse.py, bench/results/ci_rehearsal.json)
    (r"`make test` ran ([\d,]+) tests in (\d+) min (\d+) s on a clean clone",
     [rehearsal("make test", "passed"), *clock(rehearsal("make test", "seconds"))]),
    (r"`make test-node`: (\d+) tests in (\d+) min (\d+) s\) took (\d+) min (\d+) s wall",
     [rehearsal("make test-node", "passed"), *clock(rehearsal("make test-node", "seconds")),
      *clock(rehearsal(None, "wall_seconds"))]),
    (r"`make test-node` took (\d+) min (\d+) s after `make test` ended, (\d+) min (\d+) s of it the tests",
     [*clock(lambda: rehearsal("make test-node", "finished_at_seconds")()
             - rehearsal("make test", "finished_at_seconds")()),
      *clock(rehearsal("make test-node", "seconds"))]),
    (r"costs nothing measurable \(([\d.]+)-([\d.]+)x against b331e99\)",
     [lambda: min(ab_ratios("b331e99")), lambda: max(ab_ratios("b331e99"))]),
    (r"none either \(([\d.]+)-([\d.]+)x against b9a544a, (\d+) rounds\)",
     [lambda: min(ab_ratios("b9a544a")), lambda: max(ab_ratios("b9a544a")),
      lambda: stored("webhook_ab_b9a544a")["rounds"]]),
    # The stored cold rehearsal (ci_rehearsal_cold.json: hack/rehearse.py --cold, every cache empty)
    (r"the first time \((\d+) min (\d+) s on 2 busy cores in the stored cold run",
     clock(cold("build-tools total"))),
    (r"the whole of `bash \.ci/run` passed in (\d+) min (\d+) s wall", clock(cold(key="wall_seconds"))),
    (r"took (\d+) min (\d+) s \(etcd (\d+) min (\d+) s, kube-apiserver (\d+) min (\d+) s, kubectl (\d+) s, helm "
     r"(\d+) min (\d+) s, kube-controller-manager (\d+) min (\d+) s, kube-scheduler (\d+) s, kwok (\d+) min (\d+) s, "
     r"JobSet controller (\d+) min (\d+) s, Kueue (\d+) min (\d+) s, upstream's manager (\d+) min (\d+) s, module "
     r"downloads included\), torch's environment (\d+) min (\d+) s beside it",
     [*clock(cold("build-tools total")), *clock(cold("build-tools etcd")), *clock(cold("build-tools kube-apiserver")),
      cold("build-tools kubectl"), *clock(cold("build-tools helm")),
      *clock(cold("build-tools kube-controller-manager")), cold("build-tools kube-scheduler"),
      *clock(cold("build-tools kwok")), *clock(cold("build-tools jobset-controller")),
      *clock(cold("build-tools kueue")), *clock(cold("build-tools trainer-controller-manager")),
      *clock(cold("torch-env all"))]),
    (r"/bin`: (\d+) min (\d+) s in the stored cold rehearsal, after the control plane \(kubelet and kube-proxy reuse "
     r"its Go build cache; BuildKit (\d+) min (\d+) s of it",
     [*clock(cold("build-tools total#2")),
      *clock(lambda: cold("build-tools buildkitd")() + cold("build-tools buildctl")())]),
    (r"the base by debootstrap from apt's mirror \((\d+) s in the stored cold rehearsal\)", [cold("images base")]),
    (r"the project's `Dockerfile` by BuildKit \((\d+) s there;", [cold("images trainguard")]),
    (r"passed in (\d+) min (\d+) s wall in the stored cold rehearsal \(`make test` ([\d,]+) tests in (\d+) min (\d+) s "
     r"after the builds, `make test-node` (\d+) tests in (\d+) min (\d+) s",
     [*clock(cold(key="wall_seconds")), cold(command="make test", key="passed"),
      *clock(cold(command="make test")), cold(command="make test-node", key="passed"),
      *clock(cold(command="make test-node"))]),
    (r"\(cold, in the first build above: kwok (\d+) min (\d+) s, JobSet (\d+) min (\d+) s\)",
     [*clock(cold("build-tools kwok")), *clock(cold("build-tools jobset-controller"))]),
    (r"cold build (\d+) min (\d+) s in the first build above\)", clock(cold("build-tools kueue"))),
    (r"(\d+) min (\d+) s wall in the stored cold rehearsal\) out", clock(cold("build-tools trainer-controller-manager"))),
    # One-off build and start times of earlier sessions (measurements.json: each with the commit that reports it);
    # the README says "reported" beside each (test_a_reported_figure_says_so)
    (r"takes ([\d.]+)-([\d.]+) minutes on 2 busy cores",
     [measured("demo", "min_seconds", per=60), measured("demo", "max_seconds", per=60)]),
    (r"reported a peak RSS of ([\d.]+) GB for the build and ([\d.]+) GB of caches \(Go build cache and binaries\) plus "
     r"([\d.]+) GB of Go modules",
     [measured("first_build_tools", "peak_rss_gb"), measured("first_build_caches", "build_cache_and_binaries_gb"),
      measured("first_build_caches", "go_modules_gb")]),
    (r"certificates included\): ([\d.]+)-([\d.]+) s over four runs",
     [measured("cluster_start_to_ready", "min_seconds"), measured("cluster_start_to_ready", "max_seconds")]),
    (r"Ready in (\d+)-(\d+) s quiet, (\d+)-(\d+) s loaded",
     [measured("node_up_down", f"ready_{state}_{end}_seconds")
      for state in ("quiet", "loaded") for end in ("min", "max")]),
    (r"hack/node\.sh down # (\d+)-(\d+) s; puts the host back",
     [measured("node_up_down", "down_min_seconds"), measured("node_up_down", "down_max_seconds")]),
    (r"an earlier session reported (\d+) MB and (\d+) min when built alone",
     [measured("node_binaries_cold", "size_mb"), measured("node_binaries_cold", "seconds", per=60)]),
    (r"an earlier session reported (\d+) s-(\d+) min after a code change",
     [measured("image_trainguard", "after_change_min_seconds"),
      measured("image_trainguard", "after_change_max_seconds", per=60)]),
    (r"cached in `~/\.cache/trainguard/images/` \(reported: (\d+) MB\)", [measured("image_cache", "size_mb")]),
]


def decimals(text: str) -> int:
    return len(text.partition(".")[2])


def is_backed(printed: str, value: float) -> bool:
    """Within half a unit of the printed figure's last place (``2,927``: thousands separators are not decimals)."""
    return abs(float(printed.replace(",", "")) - value) <= 0.5 * 10 ** -decimals(printed) + 1e-9


REPORTED_WINDOW = 160  # characters on either side of a reported figure's match, one of which must say "reported"


@pytest.mark.parametrize("pattern", [p for p, values in FIGURES if any(getattr(v, "reported", False) for v in values)])
def test_a_reported_figure_says_so(pattern: str) -> None:
    """A figure backed only by measurements.json (an earlier session's report, not a stored run) is marked as
    reported in the README, within its sentence."""
    found = re.search(pattern, readme())
    assert found, pattern
    around = readme()[max(0, found.start() - REPORTED_WINDOW):found.end() + REPORTED_WINDOW]
    assert "reported" in around, f"README.md prints a reported figure as measured: {found.group(0)!r}"


@pytest.mark.parametrize("pattern, values", FIGURES, ids=[p[:48] for p, _ in FIGURES])
def test_readme_figure_is_the_stored_result(pattern: str, values: list[Callable[[], float]]) -> None:
    found = re.search(pattern, readme())
    assert found, f"README.md no longer says {pattern!r}: update this table with the README"
    for printed, value in zip(found.groups(), values, strict=True):
        want = value()
        assert is_backed(printed, want), (
            f"README.md prints {printed} where bench/results holds {want}: {found.group(0)!r}")


@pytest.mark.parametrize("printed, stored_value, backed", [
    ("17", 16.5, True), ("16", 16.5, True), ("18", 16.5, False), ("0.77", 0.77, True), ("0.8", 0.77, True),
    ("0.78", 0.77, False), ("26.5", 26.473386, True), ("26.4", 26.473386, False),
])
def test_a_figure_is_backed_within_its_printed_precision(printed: str, stored_value: float, backed: bool) -> None:
    assert is_backed(printed, stored_value) is backed


REHEARSAL = {
    "source": "run", "ok": True, "problems": [], "wall_seconds": 1809.4,
    # by name, not position (and not by prefix: "make test" is the start of "make test-node")
    "commands": [{"name": "make test-node", "passed": 7, "seconds": 1439.6},
                 {"name": "make test", "passed": 2927, "seconds": 1437.21}],
}


@pytest.mark.parametrize("command, key, figures, want", [
    ("make test", "passed", None, 2927),
    ("make test", "seconds", "clock", [23, 57]),
    ("make test-node", "passed", None, 7),
    ("make test-node", "seconds", "clock", [24, 0]),  # 1439.6 s prints as 24 min 00 s
    (None, "wall_seconds", "clock", [30, 9]),
])
def test_the_rehearsal_getters_read_ci_rehearsal_json(monkeypatch: pytest.MonkeyPatch, command: str | None,
                                                      key: str, figures: str | None, want: Any) -> None:
    monkeypatch.setattr(f"{__name__}.stored", lambda name: REHEARSAL if name == "ci_rehearsal" else pytest.fail(name))
    getter = rehearsal(command, key)
    assert ([g() for g in clock(getter)] if figures == "clock" else getter()) == want


@pytest.mark.parametrize("change", [{"ok": False, "problems": ["bash .ci/run exited 2"]}, {"source": "log"}])
def test_only_a_passing_rehearsal_backs_a_figure(monkeypatch: pytest.MonkeyPatch, change: dict[str, Any]) -> None:
    monkeypatch.setattr(f"{__name__}.stored", lambda name: {**REHEARSAL, **change})
    with pytest.raises(AssertionError, match="not a passing rehearsal"):
        rehearsal("make test", "passed")()


@pytest.mark.parametrize("printed, stored_value, backed", [
    ("2,927", 2927, True), ("2,927", 2928, False), ("2,927", 2.927, False), ("1,149", 1149.4, True),
])
def test_a_figure_with_thousands_separators_is_compared_as_a_number(printed: str, stored_value: float,
                                                                     backed: bool) -> None:
    assert is_backed(printed, stored_value) is backed
