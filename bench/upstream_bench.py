#!/usr/bin/env python3
"""Benchmark: trainguard against upstream Kubeflow Trainer v2.3.0's own Go manager, side by side, in one run.

Run from the repository root (a script, not a test)::

    .venv/bin/python bench/upstream_bench.py          # ~12-15 min on 2 cores; writes bench/results/upstream_bench.{json,md,svg}
    .venv/bin/python bench/upstream_bench.py --quick  # ~4 min: one round, small cells, bursts of 100/300, 1,000 jobs

Two control planes (``hack/cluster.sh``, each its own etcd + kube-apiserver v1.35.4, temporary state, stopped at the
end), as the parity suite runs them (``tests/parity/peer.py``):

* **upstream**: ``trainer-controller-manager`` v2.3.0 (``hack/build-tools.sh trainer-manager``; one process serving
  its webhooks and running its reconcilers), its CRDs and webhook registration read from the Go module, the
  registration narrowed to the namespace ``bench-admit``;
* **trainguard**: ``trainguard webhook`` (registered for ``bench-policy``, whose labels the ``gpu-teams``
  TrainJobPolicy of ``examples/`` selects, and ``bench-plain``, which no policy selects) and ``trainguard
  controller`` (all namespaces, no leader election), with trainguard's ``crds/``.

Both clusters get the JobSet and scheduler-plugins CRDs (no JobSet controller) and the ``torch-distributed``
ClusterTrainingRuntime of ``examples/``. The TrainJob is ``examples/``' ``llm-ddp`` (4 nodes x 8 GPUs) with a
runtimePatch (nodeSelector, toleration).

Phases, each interleaved side by side (the machine is shared: CPU is read from the processes' own counters,
``/proc/<pid>/stat`` utime + stime, which other load does not inflate the way it inflates wall time):

1. **Admission**: TrainJob CREATEs with ``dryRun=All`` over keep-alive HTTPS (admin client certificate) at
   concurrency 1, 16 and 64, the three configurations (upstream, trainguard with the policy, trainguard without)
   rotated within every round. Dry run: the apiserver calls both webhooks (mutating then validating) and stores
   nothing, so no reconcile runs and upstream's one process spends its CPU on admission only. Per cell: CPU of the
   webhook process per admitted CREATE, end-to-end p50/p99.
2. **Reconcile bursts** of 300 and 3,000 TrainJobs, created at concurrency 16 into a namespace no webhook matches:
   time from the first CREATE until every JobSet exists, controller CPU per TrainJob (until the controller is
   quiet), API writes per TrainJob by resource and verb (the apiserver's ``apiserver_request_total``, minus the
   bench's own TrainJob CREATEs; the bench writes nothing else), RSS.
3. **Steady state**: both filled to 10,000 TrainJobs with their JobSets (both sides at once), then RSS of each
   process once quiet. RSS is sampled every second through the whole run; ``upstream_bench.svg`` plots it against
   the number of TrainJobs in the cluster.

Upstream is one process, trainguard two: each trainguard process is compared with the whole upstream process.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import os
import platform
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import aiohttp  # noqa: E402
import yaml  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from tests.conftest import HACK, Cluster, upstream_crds, wait_for_crds  # noqa: E402
from tests.integration.conftest import TRAINGUARD, free_port, start_webhook  # noqa: E402
from tests.parity.peer import UpstreamPeer, build_peer, trainer_module_dir  # noqa: E402
from trainguard.webhook.admission.registration import Registration, webhook_configurations  # noqa: E402

RESULTS = REPO / "bench" / "results"
GROUP_PATH = "/apis/trainer.kubeflow.org/v1alpha1"
ADMIT_GO, ADMIT_POLICY, ADMIT_PLAIN = "bench-admit", "bench-policy", "bench-plain"
OWN = "trainguard-system"
WRITE_VERBS = ("POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION")
CLK = os.sysconf("SC_CLK_TCK")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    if not s:
        return float("nan")
    k = (len(s) - 1) * q / 100
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, all its threads (``/proc/<pid>/stat`` fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


# -- objects ---------------------------------------------------------------------------------------------------
def example_objects() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    docs = [d for name in ("torch-distributed-gpu.yaml", "gpu-topology-policy.yaml")
            for d in yaml.safe_load_all((REPO / "examples" / name).read_text()) if d]
    by_kind = {d["kind"]: d for d in docs}
    job = copy.deepcopy(by_kind["TrainJob"])
    job["spec"]["runtimePatches"] = [{"manager": "example.io/platform", "trainingRuntimeSpec": {"template": {"spec": {
        "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {
            "nodeSelector": {"node-type": "training"},
            "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]}}}}}]}}}}]
    return by_kind["ClusterTrainingRuntime"], by_kind["TrainJobPolicy"], job


def body_for(job: dict[str, Any], namespace: str, name: str) -> bytes:
    o = dict(job)
    o["metadata"] = {"name": name, "namespace": namespace}
    return json.dumps(o).encode()


# -- a side ----------------------------------------------------------------------------------------------------
@dataclass
class Side:
    name: str
    cluster: Cluster
    webhook_pid: int
    controller_pid: int
    state_dir: Path | None = None  # hack/cluster.sh's state: the apiserver's and etcd's pid files
    created: int = 0  # TrainJobs stored in this cluster (for the RSS plot)
    server: str = ""
    ctx: ssl.SSLContext | None = None

    def __post_init__(self) -> None:
        kc = yaml.safe_load(Path(self.cluster.kubeconfig).read_text())
        c, u = kc["clusters"][0]["cluster"], kc["users"][0]["user"]
        self.server = c["server"]
        self.ctx = ssl.create_default_context(cafile=c["certificate-authority"])
        self.ctx.load_cert_chain(u["client-certificate"], u["client-key"])

    def server_pids(self) -> dict[str, int]:
        assert self.state_dir is not None
        return {name: int((self.state_dir / f"{name}.pid").read_text().split()[0]) for name in ("kube-apiserver", "etcd")}

    def get(self, path: str) -> bytes:
        with urllib.request.urlopen(self.server + path, context=self.ctx, timeout=30) as r:
            return r.read()

    def count(self, path: str) -> int:
        """Objects in a collection from one ``limit=1`` page (its remainingItemCount), without listing them."""
        meta_items = json.loads(self.get(path + "?limit=1"))
        return len(meta_items.get("items") or []) + int(meta_items["metadata"].get("remainingItemCount") or 0)

    def writes(self) -> dict[str, float]:
        """The apiserver's non-dry-run write requests so far, by ``VERB resource[/subresource]``."""
        out: dict[str, float] = {}
        for fam in text_string_to_metric_families(self.get("/metrics").decode()):
            if fam.name != "apiserver_request":
                continue
            for s in fam.samples:
                lb = s.labels
                if s.name != "apiserver_request_total" or lb.get("verb") not in WRITE_VERBS or lb.get("dry_run"):
                    continue
                key = f"{lb['verb']} {lb['resource']}" + (f"/{lb['subresource']}" if lb.get("subresource") else "")
                out[key] = out.get(key, 0.0) + s.value
        return out


def diff(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0) > 0}


# -- load ------------------------------------------------------------------------------------------------------
async def create_many(side: Side, namespace: str, job: dict[str, Any], count: int, concurrency: int,
                      dry_run: bool) -> tuple[list[float], list[str]]:
    """POST ``count`` TrainJobs with ``concurrency`` in flight on kept-alive connections; (latencies, errors)."""
    url = f"{side.server}{GROUP_PATH}/namespaces/{namespace}/trainjobs" + ("?dryRun=All" if dry_run else "")
    prefix = uuid.uuid4().hex[:6]
    bodies = iter([body_for(job, namespace, f"b{prefix}-{i}") for i in range(count)])
    latencies: list[float] = []
    errors: list[str] = []
    connector = aiohttp.TCPConnector(ssl=side.ctx, limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, headers={"Content-Type": "application/json"}) as session:
        async def worker() -> None:
            for body in bodies:
                t = time.perf_counter()
                async with session.post(url, data=body) as r:
                    text = await r.read()
                latencies.append(time.perf_counter() - t)
                if r.status != 201:
                    errors.append(f"{r.status}: {text[:300]!r}")
                elif not dry_run:
                    side.created += 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies, errors


def wait_quiet(pid: int, window: float = 2.0, limit: float = 60.0) -> None:
    """Until the process used under 2% of a core over ``window`` seconds (its queue drained), at most ``limit``."""
    deadline = time.monotonic() + limit
    last = cpu_seconds(pid)
    while time.monotonic() < deadline:
        time.sleep(window)
        now = cpu_seconds(pid)
        if now - last < 0.02 * window:
            return
        last = now


# -- RSS sampling ----------------------------------------------------------------------------------------------
@dataclass
class Sampler:
    sides: list[Side]
    samples: list[dict[str, Any]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        t0 = time.monotonic()
        while not self.stop.wait(1.0):
            row: dict[str, Any] = {"t": round(time.monotonic() - t0, 1)}
            try:
                for s in self.sides:
                    row[s.name] = {"trainjobs": s.created, "webhook": round(rss_mib(s.webhook_pid), 1),
                                   "controller": round(rss_mib(s.controller_pid), 1)}
            except OSError:  # a process exited (a failed run is being torn down)
                return
            self.samples.append(row)


# -- phases ----------------------------------------------------------------------------------------------------
def admission_phase(configs: list[tuple[str, Side, str]], job: dict[str, Any], rounds: int,
                    cells: dict[int, int]) -> dict[str, Any]:
    out: dict[str, dict[int, dict[str, list[float]]]] = {}
    for name, side, ns in configs:  # warm-up: connections, caches, the Go runtime's and Python's first-call costs
        _, errors = asyncio.run(create_many(side, ns, job, 60, 4, True))
        if errors:
            raise RuntimeError(f"{name}: warm-up CREATE failed: {errors[0]}")
    for r in range(rounds):
        for conc, n in cells.items():
            order = configs[r % 3:] + configs[:r % 3]
            for name, side, ns in order:
                servers = side.server_pids()
                c0, s0 = cpu_seconds(side.webhook_pid), {k: cpu_seconds(p) for k, p in servers.items()}
                own0, t0 = time.process_time(), time.monotonic()
                lat, errors = asyncio.run(create_many(side, ns, job, n, conc, True))
                wall, own = time.monotonic() - t0, time.process_time() - own0
                cpu = cpu_seconds(side.webhook_pid) - c0
                # On the shared machine a review can miss the apiserver's 5 s webhook timeout at 64 in flight: counted
                # and reported, the CPU divided over the admitted ones (a timed-out review was still worked on).
                admitted = n - len(errors)
                if admitted < n / 2:
                    raise RuntimeError(f"{name} c={conc}: {len(errors)} of {n} CREATEs not admitted: {errors[0]}")
                cell = out.setdefault(name, {}).setdefault(conc, {"cpu_ms": [], "lat": [], "per_s": [], "apiserver_ms": [],
                                                                   "etcd_ms": [], "client_ms": [], "errors": []})
                cell["errors"] += errors[:3]
                cell["failed"] = cell.get("failed", 0) + len(errors)
                cell["cpu_ms"].append(cpu * 1000 / admitted)
                cell["lat"].extend(lat)
                cell["per_s"].append(admitted / wall)
                cell["apiserver_ms"].append((cpu_seconds(servers["kube-apiserver"]) - s0["kube-apiserver"]) * 1000 / admitted)
                cell["etcd_ms"].append((cpu_seconds(servers["etcd"]) - s0["etcd"]) * 1000 / admitted)
                cell["client_ms"].append(own * 1000 / admitted)
        log(f"admission round {r + 1}/{rounds} done")
    result: dict[str, Any] = {}
    for name, by_conc in out.items():
        result[name] = {str(c): {"cpu_ms_per_create": round(statistics.median(v["cpu_ms"]), 3),
                                 "cpu_ms_rounds": [round(x, 3) for x in v["cpu_ms"]],
                                 "p50_ms": round(pct(v["lat"], 50) * 1000, 2), "p99_ms": round(pct(v["lat"], 99) * 1000, 2),
                                 "creates_per_s": round(statistics.median(v["per_s"]), 1),
                                 "apiserver_cpu_ms": round(statistics.median(v["apiserver_ms"]), 3),
                                 "etcd_cpu_ms": round(statistics.median(v["etcd_ms"]), 3),
                                 "client_cpu_ms": round(statistics.median(v["client_ms"]), 3),
                                 "n": len(v["lat"]), "failed": v.get("failed", 0), "errors": v["errors"]}
                            for c, v in by_conc.items()}
    return result


def burst(side: Side, n: int, job: dict[str, Any]) -> dict[str, Any]:
    ns = f"burst-{uuid.uuid4().hex[:6]}"
    side.cluster.kubectl("create", "namespace", ns)
    wait_quiet(side.controller_pid, 1.0, 20)
    w0, c0, t0 = side.writes(), cpu_seconds(side.controller_pid), time.monotonic()
    _, errors = asyncio.run(create_many(side, ns, job, n, 16, False))
    if errors:
        raise RuntimeError(f"{side.name}: burst CREATE failed: {errors[0]}")
    created_s = time.monotonic() - t0
    deadline = t0 + 900
    jobsets = 0
    while jobsets < n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{side.name}: {jobsets}/{n} JobSets after 900 s")
        time.sleep(0.2)
        jobsets = side.count(f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets")
    all_jobsets_s = time.monotonic() - t0
    wait_quiet(side.controller_pid)
    cpu = cpu_seconds(side.controller_pid) - c0
    writes = diff(side.writes(), w0)
    writes["POST trainjobs"] = writes.get("POST trainjobs", 0.0) - n  # the bench's own CREATEs
    writes = {k: v for k, v in writes.items() if v > 0}
    return {"n": n, "created_s": round(created_s, 2), "all_jobsets_s": round(all_jobsets_s, 2),
            "controller_cpu_s": round(cpu, 2), "cpu_ms_per_trainjob": round(cpu * 1000 / n, 3),
            "writes_per_trainjob": round(sum(writes.values()) / n, 3),
            "writes_by_kind_per_trainjob": {k: round(v / n, 3) for k, v in sorted(writes.items())},
            "controller_rss_mib": round(rss_mib(side.controller_pid), 1)}


def fill(side: Side, total: int, job: dict[str, Any]) -> dict[str, Any]:
    """Up to ``total`` TrainJobs in the cluster, then until every one has its JobSet and the controller is quiet."""
    ns = f"fill-{uuid.uuid4().hex[:6]}"
    side.cluster.kubectl("create", "namespace", ns)
    t0, missing = time.monotonic(), total - side.created
    while side.created < total:  # in slices, so the RSS plot sees the count grow
        step = min(500, total - side.created)
        _, errors = asyncio.run(create_many(side, ns, job, step, 16, False))
        if errors:
            raise RuntimeError(f"{side.name}: fill CREATE failed: {errors[0]}")
    while side.count("/apis/jobset.x-k8s.io/v1alpha2/jobsets") < total:
        if time.monotonic() - t0 > 900:
            raise RuntimeError(f"{side.name}: JobSets missing after 900 s")
        time.sleep(1)
    wait_quiet(side.controller_pid, 3.0, 120)
    return {"added": missing, "s": round(time.monotonic() - t0, 1)}


# -- the plot --------------------------------------------------------------------------------------------------
def svg_plot(samples: list[dict[str, Any]], series: list[tuple[str, str, str, str]]) -> str:
    """RSS (MiB) against TrainJobs in the cluster; ``series`` = (side, process, label, colour)."""
    W, H, L, B, T, R = 760, 440, 70, 50, 30, 200
    xmax = max(max(s[side]["trainjobs"] for s in samples) for side, *_ in series) or 1
    ymax = max(max(s[side][proc] for s in samples) for side, proc, *_ in series) * 1.1 or 1
    px = lambda x: L + (W - L - R) * x / xmax  # noqa: E731
    py = lambda y: H - B - (H - B - T) * y / ymax  # noqa: E731
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{L}" y="18" font-size="14">RSS against TrainJobs in the cluster (one run, sampled every 1 s)</text>']
    for i in range(6):
        x, y = xmax * i / 5, ymax * i / 5
        out.append(f'<line x1="{px(x):.1f}" y1="{H - B}" x2="{px(x):.1f}" y2="{T}" stroke="#ddd"/>'
                   f'<text x="{px(x):.1f}" y="{H - B + 16}" text-anchor="middle">{x:,.0f}</text>')
        out.append(f'<line x1="{L}" y1="{py(y):.1f}" x2="{W - R}" y2="{py(y):.1f}" stroke="#ddd"/>'
                   f'<text x="{L - 6}" y="{py(y) + 4:.1f}" text-anchor="end">{y:,.0f}</text>')
    out.append(f'<text x="{(L + W - R) / 2}" y="{H - 12}" text-anchor="middle">TrainJobs (each with its JobSet once '
               f'reconciled)</text>')
    out.append(f'<text x="16" y="{(H - B + T) / 2}" transform="rotate(-90 16 {(H - B + T) / 2})" '
               f'text-anchor="middle">RSS (MiB)</text>')
    for i, (side, proc, label, colour) in enumerate(series):
        pts = " ".join(f"{px(s[side]['trainjobs']):.1f},{py(s[side][proc]):.1f}" for s in samples)
        out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{pts}"/>')
        y = T + 20 + 20 * i
        out.append(f'<line x1="{W - R + 12}" y1="{y}" x2="{W - R + 36}" y2="{y}" stroke="{colour}" stroke-width="3"/>'
                   f'<text x="{W - R + 42}" y="{y + 4}">{label}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


# -- main ------------------------------------------------------------------------------------------------------
def start_cluster() -> tuple[Cluster, Path]:
    state = Path(tempfile.mkdtemp(prefix="trainguard-bench-cluster-"))
    proc = subprocess.run([str(HACK / "cluster.sh"), "up"], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "TRAINGUARD_CLUSTER_DIR": str(state)})
    if proc.returncode != 0:
        raise RuntimeError(f"hack/cluster.sh up failed:\n{proc.stderr}")
    c = Cluster(proc.stdout.strip().splitlines()[-1], Path((state / "bin_dir").read_text().strip()))
    args = ["apply", "--server-side", "--force-conflicts"]
    for m in upstream_crds(c.bin_dir, "jobset", "scheduler-plugins") + sorted((REPO / "crds").glob("*.yaml")):
        args += ["-f", str(m)]
    c.kubectl(*args, timeout=120)
    wait_for_crds(c)
    return c, state


def stop_cluster(state: Path) -> None:
    """``hack/cluster.sh down`` for a control plane ``start_cluster`` (or another ``cluster.sh up``) made in
    ``state``, then its directory gone."""
    subprocess.run([str(HACK / "cluster.sh"), "down"], capture_output=True, timeout=120,
                   env={**os.environ, "TRAINGUARD_CLUSTER_DIR": str(state)})
    shutil.rmtree(state, ignore_errors=True)


def narrowed(configs: list[dict[str, Any]], namespaces: list[str]) -> list[dict[str, Any]]:
    for config in configs:
        for hook in config["webhooks"]:
            if hook["rules"][0]["resources"] == ["trainjobs"]:
                sel = hook.setdefault("namespaceSelector", {})
                sel.setdefault("matchExpressions", []).append(
                    {"key": "kubernetes.io/metadata.name", "operator": "In", "values": namespaces})
    return configs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="one round, small cells, bursts of 100/300, 1,000 jobs")
    parser.add_argument("--out", default=str(RESULTS), help="directory for upstream_bench.{json,md,svg}")
    parser.add_argument("--profile", metavar="DIR", help="run trainguard's processes under cProfile, stats into DIR "
                        "(slows them: figures from such a run are not comparable)")
    parser.add_argument("--report", metavar="JSON", help="only rewrite the .md and .svg from a run's upstream_bench.json")
    args = parser.parse_args()
    if args.report:
        result = json.loads(Path(args.report).read_text())
        write_outputs(Path(args.out), result)
        return 0
    if args.quick:
        rounds, cells, bursts, steady = 1, {1: 60, 16: 160, 64: 192}, [100, 300], 1000
    else:
        rounds, cells, bursts, steady = 4, {1: 120, 16: 320, 64: 384}, [300, 300, 3000], 10_000
    runtime, policy, job = example_objects()
    work = Path(tempfile.mkdtemp(prefix="trainguard-upstream-bench-"))
    t_start = time.monotonic()
    peer = webhook = controller = None
    tg_state = None
    try:
        binary, module_dir = build_peer(), trainer_module_dir()
        log("starting upstream's manager on its own control plane")
        (work / "upstream").mkdir()
        peer = UpstreamPeer(work / "upstream", module_dir, binary).start()
        assert peer.cluster is not None and peer.proc is not None
        for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):  # narrowed to ADMIT_GO
            configs = json.loads(peer.cluster.kubectl("get", kind, "-o", "json").stdout)["items"]
            peer.cluster.kubectl("replace", "-f", "-", input=json.dumps(
                {"apiVersion": "v1", "kind": "List", "items": narrowed(configs, [ADMIT_GO])}))
        log("starting trainguard's control plane, webhook and controller")
        tg_cluster, tg_state = start_cluster()
        for c, namespaces in ((peer.cluster, [ADMIT_GO]), (tg_cluster, [ADMIT_POLICY, ADMIT_PLAIN, OWN])):
            for ns in namespaces:
                c.kubectl("create", "namespace", ns)
            c.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(runtime))
        tg_cluster.kubectl("label", "namespace", ADMIT_POLICY, "trainguard.io/tier=gpu")
        profile_args = (lambda role: [sys.executable, "-m", "cProfile", "-o", f"{args.profile}/{role}.prof"]) \
            if args.profile else (lambda role: [])
        webhook = start_webhook(tg_cluster, work / "webhook")
        if args.profile:
            webhook.stop()
            webhook.args = profile_args("webhook") + webhook.args
            webhook.start()
        reg = Registration(url_base=webhook.url_base, ca_bundle=webhook.ca_pem, failure_policy="Fail",
                           mutating_name="bench-mutating", validating_name="bench-validating")
        tg_cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(
            narrowed(list(webhook_configurations(reg)), [ADMIT_POLICY, ADMIT_PLAIN])))
        tg_cluster.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(policy))
        metrics_port = free_port()
        controller_log = open(work / "controller.log", "ab")
        controller = subprocess.Popen(
            profile_args("controller") + [str(TRAINGUARD), "controller", "--kubeconfig", tg_cluster.kubeconfig,
                                          "--metrics-bind-address", f"127.0.0.1:{metrics_port}", "--no-leader-elect",
                                          "--snapshot-namespace", OWN, "--log-level", "info"],
            stdout=controller_log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/readyz", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if controller.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"trainguard controller not ready:\n{(work / 'controller.log').read_text()[-3000:]}")
            time.sleep(0.2)
        go = Side("upstream", peer.cluster, peer.proc.pid, peer.proc.pid, peer.state_dir)
        tg = Side("trainguard", tg_cluster, webhook.proc.pid, controller.pid, tg_state)  # type: ignore[union-attr]
        rss_start = {"upstream": rss_mib(go.webhook_pid), "trainguard webhook": rss_mib(tg.webhook_pid),
                     "trainguard controller": rss_mib(tg.controller_pid)}
        sampler = Sampler([go, tg])
        thread = threading.Thread(target=sampler.run, daemon=True)
        thread.start()
        log(f"ready after {time.monotonic() - t_start:.0f} s; admission phase")

        configs = [("upstream", go, ADMIT_GO), ("trainguard, policy", tg, ADMIT_POLICY),
                   ("trainguard, no policy", tg, ADMIT_PLAIN)]
        admission = admission_phase(configs, job, rounds, cells)
        rss_admission = {"upstream": rss_mib(go.webhook_pid), "trainguard webhook": rss_mib(tg.webhook_pid)}

        results_bursts: dict[str, list[dict[str, Any]]] = {"upstream": [], "trainguard": []}
        for i, n in enumerate(bursts):
            for side in ([go, tg] if i % 2 == 0 else [tg, go]):
                r = burst(side, n, job)
                results_bursts[side.name].append(r)
                log(f"burst {n} {side.name}: all JobSets {r['all_jobsets_s']} s, CPU {r['controller_cpu_s']} s, "
                    f"writes/TrainJob {r['writes_per_trainjob']}")

        log(f"filling both to {steady:,} TrainJobs")
        fills: dict[str, Any] = {}
        threads = [threading.Thread(target=lambda s=s: fills.__setitem__(s.name, fill(s, steady, job))) for s in (go, tg)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if set(fills) != {"upstream", "trainguard"}:
            raise RuntimeError("a fill failed (see above)")
        time.sleep(5)
        steady_rss = {"upstream": rss_mib(go.webhook_pid), "trainguard webhook": rss_mib(tg.webhook_pid),
                      "trainguard controller": rss_mib(tg.controller_pid)}
        time.sleep(2)
        sampler.stop.set()
        thread.join()
        result = {
            "python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
            "load_avg_end": os.getloadavg(), "quick": args.quick, "profiled": bool(args.profile),
            "duration_s": round(time.monotonic() - t_start, 1), "rounds": rounds, "cells": cells,
            "admission": admission, "rss_start_mib": rss_start, "rss_after_admission_mib": rss_admission,
            "bursts": results_bursts, "steady_trainjobs": steady, "fill": fills, "steady_rss_mib": steady_rss,
            "samples": sampler.samples,
        }
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "upstream_bench.json").write_text(json.dumps(result, indent=1) + "\n")
        write_outputs(out, result)
        return 0
    finally:
        if controller is not None and controller.poll() is None:
            controller.terminate()
            try:
                controller.wait(30)
            except subprocess.TimeoutExpired:
                controller.kill()
        if webhook is not None:
            webhook.stop()
        if peer is not None:
            peer.stop()
        if tg_state is not None:
            stop_cluster(tg_state)
        shutil.rmtree(work, ignore_errors=True)


def write_outputs(out: Path, result: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "upstream_bench.svg").write_text(svg_plot(result["samples"], [
        ("upstream", "controller", "upstream manager (Go)", "#1f77b4"),
        ("trainguard", "controller", "trainguard controller", "#d62728"),
        ("trainguard", "webhook", "trainguard webhook", "#ff7f0e")]))
    md = report(result)
    (out / "upstream_bench.md").write_text(md)
    print(md)


def report(r: dict[str, Any]) -> str:
    a = r["admission"]
    go = a["upstream"]
    ratio: Callable[[float, float], str] = lambda x, y: f"{x / y:.2f}x" if y else "-"  # noqa: E731
    lines = [f"# trainguard vs upstream Kubeflow Trainer v2.3.0 (Go), one run{' (--quick)' if r['quick'] else ''}", "",
             f"`.venv/bin/python bench/upstream_bench.py{' --quick' if r['quick'] else ''}`: {r['duration_s']:.0f} s, "
             f"{r['cpus']} CPUs, load average at the end {r['load_avg_end'][0]:.1f}, Python {r['python']}.", "",
             "## Admission (dry-run CREATE: mutating + validating review), CPU of the webhook process per CREATE "
             "(median of the rounds)", "",
             "| conc. | upstream CPU ms | trainguard policy CPU ms (ratio) | trainguard no policy CPU ms (ratio) | "
             "upstream p50 / p99 ms | trainguard policy p50 / p99 | no policy p50 / p99 |", "|---:|---:|---:|---:|---|---|---|"]
    for c in sorted(go, key=int):
        g, p, n = go[c], a["trainguard, policy"][c], a["trainguard, no policy"][c]
        lines.append(f"| {c} | {g['cpu_ms_per_create']:.2f} | {p['cpu_ms_per_create']:.2f} "
                     f"({ratio(p['cpu_ms_per_create'], g['cpu_ms_per_create'])}) | {n['cpu_ms_per_create']:.2f} "
                     f"({ratio(n['cpu_ms_per_create'], g['cpu_ms_per_create'])}) | {g['p50_ms']} / {g['p99_ms']} | "
                     f"{p['p50_ms']} / {p['p99_ms']} | {n['p50_ms']} / {n['p99_ms']} |")
    lines += [] if "apiserver_cpu_ms" not in go["1"] else ["", "Where one CREATE's CPU goes (ms, median of the rounds) and the throughput it bounds: the CREATEs per "
              "second two dedicated cores could serve if every process on the path (bench client, kube-apiserver, "
              "etcd, webhook) were CPU-bound, 2,000 / sum; measured CREATE/s on the shared machine beside it.", "",
              "| conc. | configuration | webhook | kube-apiserver | etcd | client | sum | 2-core bound CREATE/s | "
              "measured CREATE/s |", "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for c in sorted(go, key=int) if "apiserver_cpu_ms" in go["1"] else ():
        for name in ("upstream", "trainguard, policy", "trainguard, no policy"):
            x = a[name][c]
            total = x["cpu_ms_per_create"] + x["apiserver_cpu_ms"] + x["etcd_cpu_ms"] + x["client_cpu_ms"]
            lines.append(f"| {c} | {name} | {x['cpu_ms_per_create']:.2f} | {x['apiserver_cpu_ms']:.2f} | "
                         f"{x['etcd_cpu_ms']:.2f} | {x['client_cpu_ms']:.2f} | {total:.2f} | {2000 / total:.0f} | "
                         f"{x['creates_per_s']:.0f} |")
    failed = [f"{name} at {c}: {x['failed']} of {x['n']}" for name, by_c in a.items() for c, x in by_c.items()
              if x.get("failed")]
    if failed:
        lines += ["", "CREATEs that missed the apiserver's webhook timeout (5 s) on the shared machine, left out of the CPU "
                  "per CREATE: " + "; ".join(failed) + "."]
    ra = r["rss_after_admission_mib"]
    lines += ["", f"RSS after the admission phase: upstream {ra['upstream']:.0f} MiB (webhooks and controllers, one "
              f"process), trainguard webhook {ra['trainguard webhook']:.0f} MiB "
              f"({ratio(ra['trainguard webhook'], ra['upstream'])}).", "",
              "## Reconcile bursts (no webhook on the namespace; time from the first CREATE)", "",
              "| TrainJobs | side | all JobSets s | controller CPU s | CPU ms / TrainJob | API writes / TrainJob | "
              "writes by kind / TrainJob | controller RSS MiB |", "|---:|---|---:|---:|---:|---:|---|---:|"]
    for i in range(len(r["bursts"]["upstream"])):
        for side in ("upstream", "trainguard"):
            b = r["bursts"][side][i]
            kinds = ", ".join(f"{k} {v:g}" for k, v in b["writes_by_kind_per_trainjob"].items())
            lines.append(f"| {b['n']:,} | {side} | {b['all_jobsets_s']} | {b['controller_cpu_s']} | "
                         f"{b['cpu_ms_per_trainjob']:.2f} | {b['writes_per_trainjob']:.2f} | {kinds} | "
                         f"{b['controller_rss_mib']:.0f} |")
        g, t = r["bursts"]["upstream"][i], r["bursts"]["trainguard"][i]
        lines.append(f"| | ratio | {ratio(t['all_jobsets_s'], g['all_jobsets_s'])} | | "
                     f"{ratio(t['cpu_ms_per_trainjob'], g['cpu_ms_per_trainjob'])} | "
                     f"{ratio(t['writes_per_trainjob'], g['writes_per_trainjob'])} | | "
                     f"{ratio(t['controller_rss_mib'], g['controller_rss_mib'])} |")
    s = r["steady_rss_mib"]
    lines += ["", f"## Steady state: {r['steady_trainjobs']:,} TrainJobs and their JobSets", "",
              "| process | RSS MiB | / upstream |", "|---|---:|---:|",
              f"| upstream manager | {s['upstream']:.0f} | 1.00x |",
              f"| trainguard webhook | {s['trainguard webhook']:.0f} | {ratio(s['trainguard webhook'], s['upstream'])} |",
              f"| trainguard controller | {s['trainguard controller']:.0f} | "
              f"{ratio(s['trainguard controller'], s['upstream'])} |", "",
              "RSS against the number of TrainJobs: `upstream_bench.svg`."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
