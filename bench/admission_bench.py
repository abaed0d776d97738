#!/usr/bin/env python3
"""Benchmark: what trainguard's admission webhooks cost a TrainJob CREATE, end to end and server side.

Run from the repository root (a script, not a test)::

    .venv/bin/python bench/admission_bench.py        # ~3-4 min on 2 cores; writes bench/results/admission_bench.{json,md}

One run, everything side by side (the machine is shared and noisy, so configurations are interleaved round by
round and compared by ratios within the run; the spread over rounds is reported):

* **End to end**, through a real kube-apiserver + etcd started by ``hack/cluster.sh`` in a temporary state
  directory (JobSet CRD and trainguard's ``crds/`` installed with ``kubectl apply --server-side``; stopped at the
  end). A raw HTTPS client (aiohttp, keep-alive, admin client certificate) POSTs TrainJobs at concurrency 1, 8 and
  32 into two namespaces of the same cluster:

  - (a) ``bench-plain``: no webhook matches it (the baseline: authn/z, CRD decoding, schema defaulting, etcd);
  - (b) ``bench-hook``: trainguard's mutating + validating webhooks registered by URL (namespaceSelector narrowed to
    this namespace) and served by the real ``trainguard webhook`` process (Secret mode: it makes its own CA and
    injects it into the configurations), with the real policy pipeline, the ``torch-distributed``
    ClusterTrainingRuntime and the ``gpu-teams`` TrainJobPolicy of ``examples/`` (Kueue defaults, three GPU
    topology levels, limits, tolerations), so the mutation adds labels, suspend, a deadline and a runtimePatch;
  - a denied CREATE in (b) (16 GPUs per node against ``maxGpusPerNode: 8``), concurrency 1.

  Only the CREATE is timed; the namespace's TrainJobs are deleted (deletecollection) after each cell, untimed.
* **Server side**: the webhook's ``trainguard_admission_duration_seconds`` histogram, scraped before/after every
  (b) cell (so it covers exactly those reviews); a direct HTTPS POST of the same AdmissionReviews to the webhook
  (no apiserver: the webhook's HTTP + TLS + JSON + policy); and in process, thousands of calls of
  ``trainguard.webhook.policy.pipeline.mutate_trainjob`` / ``validate_trainjob`` alone and of the server's review step
  (``parse_review`` + ``AdmissionHandler.review`` incl. the JSON patch + response encoding), plus a cProfile of
  the latter to show where the time goes.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import copy
import cProfile
import io
import json
import os
import platform
import pstats
import random
import shutil
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import aiohttp  # noqa: E402
import yaml  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from trainguard.webhook.admission.metrics import AdmissionMetrics  # noqa: E402
from trainguard.webhook.admission.registration import NAMESPACE_NAME_LABEL, Registration, webhook_configurations  # noqa: E402
from trainguard.webhook.admission.review import parse_review  # noqa: E402
from trainguard.webhook.admission.routes import bind_routes  # noqa: E402
from trainguard.webhook.admission.server import AdmissionHandler, _dumps  # noqa: E402
from trainguard.webhook.policy.pipeline import mutate_trainjob, validate_trainjob  # noqa: E402
from trainguard.webhook.policy.verdict import AdmissionInput, ClusterSnapshot  # noqa: E402

PLAIN, HOOK, OWN = "bench-plain", "bench-hook", "trainguard-system"
GROUP_PATH = "/apis/trainer.kubeflow.org/v1alpha1"
MUTATE = "/mutate-trainer-kubeflow-org-v1alpha1-trainjob"
VALIDATE = "/validate-trainer-kubeflow-org-v1alpha1-trainjob"
WEBHOOKS = {"defaulter.trainjob.trainer.kubeflow.org": "mutating", "validator.trainjob.trainer.kubeflow.org": "validating"}
CONCURRENCY = (1, 8, 32)
GATE_SERVER_P99_MS = 25.0
GATE_E2E_P99_MS = 1000.0


# -- small helpers ---------------------------------------------------------------------------------------------
def pct(values: list[float], q: float) -> float:
    """Percentile with linear interpolation (q in 0..100)."""
    s = sorted(values)
    if not s:
        return float("nan")
    k = (len(s) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def summary_ms(seconds: list[float]) -> dict[str, float]:
    ms = [x * 1000 for x in seconds]
    return {"n": len(ms), "p50": round(pct(ms, 50), 2), "p95": round(pct(ms, 95), 2), "p99": round(pct(ms, 99), 2),
            "mean": round(statistics.fmean(ms), 2) if ms else float("nan"), "max": round(max(ms), 2) if ms else float("nan")}


def spread(values: list[float], digits: int = 2) -> dict[str, float]:
    return {"median": round(statistics.median(values), digits), "min": round(min(values), digits), "max": round(max(values), digits)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# -- objects ---------------------------------------------------------------------------------------------------
def example_objects() -> dict[str, dict[str, Any]]:
    docs = [*yaml.safe_load_all((REPO / "examples/gpu-topology-policy.yaml").read_text()),
            *yaml.safe_load_all((REPO / "examples/torch-distributed-gpu.yaml").read_text())]
    by_kind = {d["kind"]: d for d in docs if d}
    trainjob = by_kind["TrainJob"]
    trainjob["metadata"] = {"name": "x", "namespace": HOOK}
    denied = copy.deepcopy(trainjob)
    denied["spec"]["trainer"]["resourcesPerNode"]["limits"]["nvidia.com/gpu"] = 16  # > maxGpusPerNode 8
    return {"runtime": by_kind["ClusterTrainingRuntime"], "policy": by_kind["TrainJobPolicy"], "trainjob": trainjob, "denied": denied}


def with_name(obj: dict[str, Any], namespace: str, name: str) -> bytes:
    o = dict(obj)
    o["metadata"] = {**obj["metadata"], "name": name, "namespace": namespace}
    return json.dumps(o).encode()


# -- the control plane and the webhook -------------------------------------------------------------------------
class Cluster:
    def __init__(self, state: Path) -> None:
        self.env = {**os.environ, "TRAINGUARD_CLUSTER_DIR": str(state)}
        self.state = state
        self.kubeconfig = ""
        self.bin = Path()

    def up(self) -> None:
        t0 = time.monotonic()
        out = subprocess.run([str(REPO / "hack/cluster.sh"), "up"], env=self.env, check=True, capture_output=True, text=True)
        self.kubeconfig = out.stdout.strip().splitlines()[-1]
        self.bin = Path((self.state / "bin_dir").read_text().strip())
        log(f"control plane ready in {time.monotonic() - t0:.1f} s")

    def down(self) -> None:
        subprocess.run([str(REPO / "hack/cluster.sh"), "down"], env=self.env, check=False, capture_output=True)

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> str:
        out = subprocess.run([str(self.bin / "kubectl"), "--kubeconfig", self.kubeconfig, *args], input=input,
                             capture_output=True, text=True)
        if check and out.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {out.stderr.strip()}")
        return out.stdout

    def version(self) -> str:
        # built from pinned Go modules, so /version says v0.0.0-master; the pin is in hack/versions.sh
        out = subprocess.run(["bash", "-c", f"source {REPO}/hack/versions.sh && echo $KUBERNETES_VERSION etcd $ETCD_VERSION"],
                             capture_output=True, text=True)
        return out.stdout.strip() or "?"

    def client_ssl(self) -> tuple[str, ssl.SSLContext]:
        kc = yaml.safe_load(Path(self.kubeconfig).read_text())
        cluster, user = kc["clusters"][0]["cluster"], kc["users"][0]["user"]
        ctx = ssl.create_default_context(cafile=cluster["certificate-authority"])
        ctx.load_cert_chain(user["client-certificate"], user["client-key"])
        return cluster["server"], ctx


class Webhook:
    def __init__(self, cluster: Cluster, workdir: Path, port: int, mutating: str, validating: str) -> None:
        self.port, self.health = port, free_port()
        self.log_path = workdir / "webhook.log"
        self.args = [str(Path(sys.executable).with_name("trainguard")), "webhook", "--bind-address", "127.0.0.1",
                     "--port", str(self.port), "--health-port", str(self.health), "--kubeconfig", cluster.kubeconfig,
                     "--namespace", OWN, "--cert-secret", "trainguard-webhook-cert", "--cert-ip", "127.0.0.1",
                     "--mutating-configuration", mutating, "--validating-configuration", validating]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 90) -> None:
        self.proc = subprocess.Popen(self.args, stdout=open(self.log_path, "ab"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"trainguard webhook exited {self.proc.returncode}: {self.log_path.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.health}/readyz", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError("trainguard webhook not ready")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.health}/metrics", timeout=5) as r:
            return r.read().decode()


def histogram(text: str) -> dict[str, dict[str, Any]]:
    """webhook name -> {"buckets": {le: cumulative count}, "sum": s, "count": n} of the admission duration histogram,
    summed over verdicts."""
    out: dict[str, dict[str, Any]] = {}
    for fam in text_string_to_metric_families(text):
        if fam.name != "trainguard_admission_duration_seconds":
            continue
        for s in fam.samples:
            h = out.setdefault(s.labels.get("webhook", ""), {"buckets": {}, "sum": 0.0, "count": 0.0})
            if s.name.endswith("_bucket"):
                le = float(s.labels["le"])
                h["buckets"][le] = h["buckets"].get(le, 0.0) + s.value
            elif s.name.endswith("_sum"):
                h["sum"] += s.value
            elif s.name.endswith("_count"):
                h["count"] += s.value
    return out


def hist_diff(after: dict[str, dict[str, Any]], before: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out = {}
    for name, a in after.items():
        b = before.get(name, {"buckets": {}, "sum": 0.0, "count": 0.0})
        out[name] = {"buckets": {le: v - b["buckets"].get(le, 0.0) for le, v in a["buckets"].items()},
                     "sum": a["sum"] - b["sum"], "count": a["count"] - b["count"]}
    return out


def hist_add(acc: dict[str, dict[str, Any]], d: dict[str, dict[str, Any]]) -> None:
    for name, h in d.items():
        a = acc.setdefault(name, {"buckets": {}, "sum": 0.0, "count": 0.0})
        for le, v in h["buckets"].items():
            a["buckets"][le] = a["buckets"].get(le, 0.0) + v
        a["sum"] += h["sum"]
        a["count"] += h["count"]


def hist_quantile(h: dict[str, Any], q: float) -> float:
    """Prometheus-style histogram_quantile (linear within the bucket), in ms."""
    n = h["count"]
    if n <= 0:
        return float("nan")
    rank, prev_le, prev_c = q * n, 0.0, 0.0
    for le in sorted(h["buckets"]):
        c = h["buckets"][le]
        if c >= rank:
            if le == float("inf"):
                return prev_le * 1000
            return (prev_le + (le - prev_le) * ((rank - prev_c) / max(c - prev_c, 1e-9))) * 1000
        prev_le, prev_c = le, c
    return prev_le * 1000


def hist_summary(h: dict[str, Any]) -> dict[str, Any]:
    n = h["count"]
    within = h["buckets"].get(0.025, 0.0)
    return {"n": int(n), "mean_ms": round(h["sum"] / n * 1000, 3) if n else None,
            "p50_ms": round(hist_quantile(h, 0.50), 2), "p99_ms": round(hist_quantile(h, 0.99), 2),
            "share_le_5ms": round(h["buckets"].get(0.005, 0.0) / n, 4) if n else None,
            "share_le_25ms": round(within / n, 4) if n else None}


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (its threads included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def established_peers(port: int) -> set[str]:
    """Remote endpoints of established TCP connections to local ``port`` (from /proc/net/tcp, no fork)."""
    out = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        f = line.split()
        if f[3] == "01" and int(f[1].rsplit(":", 1)[1], 16) == port:
            out.add(f[2])
    return out


# -- end-to-end load -------------------------------------------------------------------------------------------
class Load:
    def __init__(self, server: str, ctx: ssl.SSLContext) -> None:
        self.server = server
        self.ctx = ctx
        self.session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> "Load":
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=self.ctx, limit=64, limit_per_host=64),
                                             headers={"Content-Type": "application/json", "Accept": "application/json"})
        return self

    async def __aexit__(self, *exc: Any) -> None:
        assert self.session is not None
        await self.session.close()

    async def create_many(self, namespace: str, obj: dict[str, Any], count: int, concurrency: int,
                          expect: int = 201) -> tuple[list[float], float, list[str]]:
        """POST ``count`` TrainJobs with ``concurrency`` in flight; return (latencies s, wall s, unexpected answers)."""
        assert self.session is not None
        url = f"{self.server}{GROUP_PATH}/namespaces/{namespace}/trainjobs"
        prefix = uuid.uuid4().hex[:6]
        bodies = [with_name(obj, namespace, f"b{prefix}-{i}") for i in range(count)]
        latencies: list[float] = []
        errors: list[str] = []
        it = iter(bodies)

        async def worker() -> None:
            for body in it:
                t = time.perf_counter()
                async with self.session.post(url, data=body) as r:  # type: ignore[union-attr]
                    text = await r.read()
                    dt = time.perf_counter() - t
                if r.status != expect:
                    errors.append(f"{r.status}: {text[:300]!r}")
                latencies.append(dt)

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return latencies, time.perf_counter() - t0, errors

    async def delete_all(self, namespace: str) -> None:
        assert self.session is not None
        async with self.session.delete(f"{self.server}{GROUP_PATH}/namespaces/{namespace}/trainjobs") as r:
            await r.read()
            if r.status != 200:
                raise RuntimeError(f"deletecollection {namespace}: {r.status}")

    async def get(self, path: str) -> dict[str, Any]:
        assert self.session is not None
        async with self.session.get(f"{self.server}{path}") as r:
            return await r.json()


async def direct_posts(url: str, ca_pem: bytes, body: bytes, count: int, keep_alive: bool = True) -> list[float]:
    """The webhook alone: POST one AdmissionReview ``count`` times, on one keep-alive HTTPS connection or on a new
    connection (TCP + TLS handshake) each time."""
    ctx = ssl.create_default_context(cadata=ca_pem.decode())
    out: list[float] = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx, limit=1, force_close=not keep_alive),
                                     headers={"Content-Type": "application/json"}) as s:
        for _ in range(count):
            t = time.perf_counter()
            async with s.post(url, data=body) as r:
                await r.read()
                if r.status != 200:
                    raise RuntimeError(f"direct POST {url}: {r.status}")
            out.append(time.perf_counter() - t)
    return out


def review_body(obj: dict[str, Any], namespace: str, dry_run: bool = False) -> bytes:
    """An AdmissionReview as the apiserver sends it for a TrainJob CREATE."""
    return json.dumps({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "trainer.kubeflow.org", "version": "v1alpha1", "kind": "TrainJob"},
            "resource": {"group": "trainer.kubeflow.org", "version": "v1alpha1", "resource": "trainjobs"},
            "requestKind": {"group": "trainer.kubeflow.org", "version": "v1alpha1", "kind": "TrainJob"},
            "requestResource": {"group": "trainer.kubeflow.org", "version": "v1alpha1", "resource": "trainjobs"},
            "name": obj["metadata"]["name"], "namespace": namespace, "operation": "CREATE",
            "userInfo": {"username": "trainguard-admin", "groups": ["system:masters", "system:authenticated"]},
            "object": obj, "oldObject": None, "dryRun": dry_run,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
        },
    }).encode()


# -- in process ------------------------------------------------------------------------------------------------
def time_calls(fn: Callable[[], Any], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def in_process_cases(snapshot: ClusterSnapshot, mutate_obj: dict[str, Any], validate_obj: dict[str, Any],
                     denied_obj: dict[str, Any]) -> dict[str, Callable[[], Any]]:
    now = datetime.now(timezone.utc)
    routes = bind_routes()
    handler = AdmissionHandler(routes, lambda: snapshot, AdmissionMetrics())
    m_body, v_body, d_body = review_body(mutate_obj, HOOK), review_body(validate_obj, HOOK), review_body(denied_obj, HOOK)

    def policy(fn: Callable[..., Any], obj: dict[str, Any]) -> Callable[[], Any]:
        # The server hands the policy a private copy; so do we (not timed as policy: built outside the call).
        def call() -> Any:
            return fn(AdmissionInput("CREATE", obj, None, now, namespace=HOOK), snapshot)
        return call

    def review(path: str, body: bytes) -> Callable[[], Any]:
        bound = routes[path]

        def call() -> Any:
            response, _ = handler.review(bound, parse_review(body))
            return _dumps(response)
        return call

    # sanity: the cases do what the e2e run does
    assert policy(mutate_trainjob, mutate_obj)().obj != mutate_obj
    assert policy(validate_trainjob, validate_obj)().allowed
    assert not policy(validate_trainjob, denied_obj)().allowed
    return {
        "policy: mutate_trainjob": policy(mutate_trainjob, mutate_obj),
        "policy: validate_trainjob": policy(validate_trainjob, validate_obj),
        "policy: validate_trainjob (denied)": policy(validate_trainjob, denied_obj),
        "server review step: mutating (parse + copy + policy + jsonpatch + encode)": review(MUTATE, m_body),
        "server review step: validating (parse + copy + policy + encode)": review(VALIDATE, v_body),
        "JSON only: parse_review + dumps of the mutating review": lambda: _dumps(parse_review(m_body).request.object),
    }


def profile(cases: dict[str, Callable[[], Any]], n: int) -> dict[str, Any]:
    """cProfile both review steps; the share of their time in a few named places."""
    steps = [cases["server review step: mutating (parse + copy + policy + jsonpatch + encode)"],
             cases["server review step: validating (parse + copy + policy + encode)"]]
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(n):
        for s in steps:
            s()
    prof.disable()
    st = pstats.Stats(prof)
    total = sum(v[2] for v in st.stats.values())  # tottime over all functions = profiled time  # type: ignore[attr-defined]

    def cum(pred: Callable[[tuple[str, int, str]], bool]) -> float:
        return max((v[3] for k, v in st.stats.items() if pred(k)), default=0.0)  # type: ignore[attr-defined]

    def tot(pred: Callable[[tuple[str, int, str]], bool]) -> float:
        return sum(v[2] for k, v in st.stats.items() if pred(k))  # type: ignore[attr-defined]

    shares = {
        # effective_job_or_none runs once per webhook (not recursive): its cumulative time is the whole runtime build
        "effective job (trainguard.webhook.runtime, once per webhook)": cum(lambda k: k[2] == "effective_job_or_none"),
        "copy.deepcopy, all callers (runtime merge/draft, defaults, timestamps)": tot(lambda k: k[0].endswith("copy.py")),
        "jsonpatch.make_patch": cum(lambda k: k[2] == "make_patch"),
        "parse_review (json.loads + models at the door)": cum(lambda k: k[2] == "parse_review"),
        "server _copy (JSON round trip of the object)": cum(lambda k: k[2] == "_copy" and k[0].endswith("server.py")),
    }
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(12)
    top = [line.strip() for line in out.getvalue().splitlines() if line.strip()[:1].isdigit()][-12:]
    return {"calls_per_step": n, "profiled_s": round(total, 4),
            "per_pair_us": round(total / n * 1e6, 1),
            "share": {k: round(v / total, 3) for k, v in shares.items()},
            "top_tottime": top}


# -- the run ---------------------------------------------------------------------------------------------------
async def measure(args: argparse.Namespace, cluster: Cluster, webhook: Webhook, objs: dict[str, Any]) -> dict[str, Any]:
    server, ctx = cluster.client_ssl()
    counts = {1: args.n1, 8: args.n8, 32: args.n32}
    res: dict[str, Any] = {"rounds": [], "cells": {}}
    lat: dict[str, list[float]] = {}
    hist_total: dict[int, dict[str, dict[str, Any]]] = {c: {} for c in CONCURRENCY}
    hist_denied: dict[str, dict[str, Any]] = {}
    direct: dict[str, list[float]] = {"mutating, keep-alive": [], "validating, keep-alive": [],
                                      "mutating, new TLS connection each": []}
    pids = {"webhook": webhook.proc.pid, "kube-apiserver": int((cluster.state / "kube-apiserver.pid").read_text()),  # type: ignore[union-attr]
            "etcd": int((cluster.state / "etcd.pid").read_text()), "bench client": os.getpid()}
    cpu: dict[str, dict[str, float]] = {}
    conns: dict[int, list[int]] = {c: [] for c in CONCURRENCY}
    inproc: dict[str, list[float]] = {}
    async with Load(server, ctx) as load:
        # warm up both paths (connections apiserver->webhook, caches, code paths), untimed
        for ns in (PLAIN, HOOK):
            _, _, errs = await load.create_many(ns, objs["trainjob"], 64, 16)
            if errs:
                raise RuntimeError(f"warm-up in {ns}: {errs[:3]}")
            await load.delete_all(ns)
        _, _, errs = await load.create_many(HOOK, objs["denied"], 8, 1, expect=403)
        if errs:
            raise RuntimeError(f"warm-up denial: {errs[:3]}")

        # the objects exactly as admission sees them, for the direct and in-process measurements
        await load.create_many(PLAIN, objs["trainjob"], 1, 1)
        await load.create_many(HOOK, objs["trainjob"], 1, 1)
        plain = (await load.get(f"{GROUP_PATH}/namespaces/{PLAIN}/trainjobs"))["items"][0]
        hooked = (await load.get(f"{GROUP_PATH}/namespaces/{HOOK}/trainjobs"))["items"][0]
        await load.delete_all(PLAIN)
        await load.delete_all(HOOK)
        mutate_obj = copy.deepcopy(plain)  # what the mutating webhook gets: no uid/creationTimestamp yet
        mutate_obj["metadata"]["namespace"] = HOOK
        for k in ("uid", "resourceVersion", "creationTimestamp", "generation"):
            mutate_obj["metadata"].pop(k, None)
        mutate_obj.pop("status", None)
        validate_obj = hooked  # what the validating webhook gets: the mutated object
        validate_obj.pop("status", None)
        denied_obj = copy.deepcopy(validate_obj)
        denied_obj["spec"]["trainer"]["resourcesPerNode"]["limits"]["nvidia.com/gpu"] = 16
        res["objects"] = {"mutating_review_bytes": len(review_body(mutate_obj, HOOK)),
                          "validating_review_bytes": len(review_body(validate_obj, HOOK)),
                          "mutation": {k: v for k, v in validate_obj["metadata"].items() if k == "labels"}
                          | {"spec_added": sorted(set(validate_obj["spec"]) - set(mutate_obj["spec"]))}}
        snapshot = ClusterSnapshot(
            cluster_training_runtimes={objs["runtime"]["metadata"]["name"]: objs["runtime"]},
            policies={objs["policy"]["metadata"]["name"]: objs["policy"]},
            namespace_labels={HOOK: {NAMESPACE_NAME_LABEL: HOOK, "trainguard.io/tier": "gpu"}},
        )
        cases = in_process_cases(snapshot, mutate_obj, validate_obj, denied_obj)
        ca_pem = base64.b64decode(json.loads(cluster.kubectl(
            "get", "validatingwebhookconfiguration", args.validating_name, "-o", "json"))["webhooks"][0]["clientConfig"]["caBundle"])
        m_body, v_body = review_body(mutate_obj, HOOK, dry_run=True), review_body(validate_obj, HOOK, dry_run=True)

        rng = random.Random(args.seed)
        for rnd in range(args.rounds):
            row: dict[str, Any] = {"round": rnd + 1}
            for c in CONCURRENCY:
                order = ["a", "b"]
                rng.shuffle(order)  # which configuration goes first changes from round to round
                for cfg in order:
                    ns = PLAIN if cfg == "a" else HOOK
                    before = histogram(webhook.metrics()) if cfg == "b" else None
                    cpu0 = {k: cpu_seconds(p) for k, p in pids.items()}
                    initial = established_peers(webhook.port)
                    seen: set[str] = set()
                    census = asyncio.create_task(watch_peers(webhook.port, seen))  # in (a) too: same client overhead
                    lats, wall, errs = await load.create_many(ns, objs["trainjob"], counts[c], c)
                    census.cancel()
                    if cfg == "b":
                        conns[c].append(len(seen - initial))  # connections opened during the cell
                    acc = cpu.setdefault(f"{cfg}/c{c}", {"creates": 0.0})
                    acc["creates"] += len(lats)
                    for k, p in pids.items():
                        acc[k] = acc.get(k, 0.0) + cpu_seconds(p) - cpu0[k]
                    if cfg == "b":
                        d = hist_diff(histogram(webhook.metrics()), before)  # type: ignore[arg-type]
                        hist_add(hist_total[c], d)
                    if errs:
                        raise RuntimeError(f"round {rnd + 1} c={c} ({cfg}): {len(errs)} failed, e.g. {errs[0]}")
                    await load.delete_all(ns)
                    key = f"{cfg}/c{c}"
                    lat.setdefault(key, []).extend(lats)
                    row[key] = {**summary_ms(lats), "throughput_per_s": round(len(lats) / wall, 1)}
            # a denied CREATE (webhook path, concurrency 1)
            before = histogram(webhook.metrics())
            lats, wall, errs = await load.create_many(HOOK, objs["denied"], args.n_denied, 1, expect=403)
            hist_add(hist_denied, hist_diff(histogram(webhook.metrics()), before))
            if errs:
                raise RuntimeError(f"denied CREATE answered otherwise: {errs[0]}")
            lat.setdefault("b/denied", []).extend(lats)
            row["b/denied"] = {**summary_ms(lats), "throughput_per_s": round(len(lats) / wall, 1)}
            # the webhook alone over HTTPS (dryRun reviews, same objects), between e2e cells
            direct["mutating, keep-alive"] += await direct_posts(webhook_url(webhook, MUTATE), ca_pem, m_body, args.n_direct)
            direct["validating, keep-alive"] += await direct_posts(webhook_url(webhook, VALIDATE), ca_pem, v_body, args.n_direct)
            direct["mutating, new TLS connection each"] += await direct_posts(
                webhook_url(webhook, MUTATE), ca_pem, m_body, args.n_direct // 2, keep_alive=False)
            # in process, same objects
            for name, fn in cases.items():
                inproc.setdefault(name, []).extend(time_calls(fn, args.n_inproc))
            res["rounds"].append(row)
            log(f"round {rnd + 1}/{args.rounds}: " + ", ".join(
                f"{k} p50 {v['p50']} ms" for k, v in row.items() if isinstance(v, dict)))

    # pooled statistics and per-round ratios
    for key, values in lat.items():
        walls = [r[key]["throughput_per_s"] for r in res["rounds"]]
        res["cells"][key] = {**summary_ms(values), "throughput_per_s": spread(walls, 1),
                             "p50_over_rounds": spread([r[key]["p50"] for r in res["rounds"]]),
                             "p99_over_rounds": spread([r[key]["p99"] for r in res["rounds"]])}
    res["ratios_b_over_a"] = {}
    for c in CONCURRENCY:
        a, b = lat[f"a/c{c}"], lat[f"b/c{c}"]
        per_round = {m: [r[f"b/c{c}"][m] / r[f"a/c{c}"][m] for r in res["rounds"]] for m in ("p50", "p99")}
        tput = [r[f"b/c{c}"]["throughput_per_s"] / r[f"a/c{c}"]["throughput_per_s"] for r in res["rounds"]]
        res["ratios_b_over_a"][f"c{c}"] = {
            "p50": round(pct(b, 50) / pct(a, 50), 2), "p95": round(pct(b, 95) / pct(a, 95), 2), "p99": round(pct(b, 99) / pct(a, 99), 2),
            "p50_per_round": spread(per_round["p50"]), "p99_per_round": spread(per_round["p99"]),
            "throughput": spread(tput), "added_p50_ms": round((pct(b, 50) - pct(a, 50)) * 1000, 2),
        }
    res["server_histogram"] = {f"c{c}": {WEBHOOKS.get(n, n): hist_summary(h) for n, h in hist_total[c].items() if n in WEBHOOKS}
                               for c in CONCURRENCY}
    res["server_histogram"]["denied_c1"] = {WEBHOOKS.get(n, n): hist_summary(h) for n, h in hist_denied.items() if n in WEBHOOKS}
    res["cpu_ms_per_create"] = {key: {k: round(v / acc["creates"] * 1000, 3) for k, v in acc.items() if k != "creates"}
                                for key, acc in cpu.items()}
    res["apiserver_to_webhook_connections_seen"] = {f"c{c}": spread([float(x) for x in v], 0) for c, v in conns.items()}
    res["direct_https"] = {k: {**summary_ms(v)} for k, v in direct.items()}
    res["in_process"] = {k: {"n": len(v), "p50_us": round(pct(v, 50) * 1e6, 1), "p99_us": round(pct(v, 99) * 1e6, 1),
                             "mean_us": round(statistics.fmean(v) * 1e6, 1)} for k, v in inproc.items()}
    res["profile"] = profile(cases, args.n_profile)
    return res


async def watch_peers(port: int, seen: set[str]) -> None:
    """Sample the connections to the webhook every 50 ms: how many distinct ones the apiserver used (a lower bound)."""
    while True:
        seen.update(established_peers(port))
        await asyncio.sleep(0.05)


def webhook_url(webhook: Webhook, path: str) -> str:
    return f"https://127.0.0.1:{webhook.port}{path}"


def setup(cluster: Cluster, objs: dict[str, Any], reg: Registration, port: int, work: Path) -> Webhook:
    crds = [str(p) for p in sorted((cluster.bin / "crds" / "jobset").glob("*.yaml"))] + [str(REPO / "crds")]
    args = ["apply", "--server-side"]
    for c in crds:
        args += ["-f", c]
    cluster.kubectl(*args)
    for crd in cluster.kubectl("get", "crd", "-o", "name").split():
        cluster.kubectl("wait", "--for", "condition=established", "--timeout=60s", crd)
    ns_docs = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n, "labels": {"trainguard.io/tier": "gpu"}}}
               for n in (PLAIN, HOOK)] + [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OWN}}]
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(ns_docs))
    mutating, validating = webhook_configurations(reg)
    for config in (mutating, validating):  # namespaced webhooks: (b)'s namespace only; (a) is never sent to us
        for hook in config["webhooks"]:
            if "namespaceSelector" in hook:
                hook["namespaceSelector"]["matchExpressions"].append(
                    {"key": NAMESPACE_NAME_LABEL, "operator": "In", "values": [HOOK]})
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([mutating, validating]))
    webhook = Webhook(cluster, work, port, reg.mutating_name, reg.validating_name)
    webhook.start()
    deadline = time.monotonic() + 60
    while not json.loads(cluster.kubectl("get", "validatingwebhookconfiguration", reg.validating_name, "-o", "json"))[
            "webhooks"][0]["clientConfig"].get("caBundle"):
        if time.monotonic() > deadline:
            raise RuntimeError("the webhook never injected its CA")
        time.sleep(0.3)
    # the runtime and the policy go through trainguard's own validators (cluster-scoped webhooks match everything)
    deadline = time.monotonic() + 60
    while True:
        try:
            cluster.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all([objs["runtime"], objs["policy"]]))
            break
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    # wait until the apiserver calls the webhook for (b) and the webhook's caches hold the runtime and policy
    deadline = time.monotonic() + 60
    probe = with_name(objs["trainjob"], HOOK, "probe").decode()
    while True:
        out = subprocess.run([str(cluster.bin / "kubectl"), "--kubeconfig", cluster.kubeconfig, "create", "--dry-run=server",
                              "-o", "json", "-f", "-"], input=probe, capture_output=True, text=True)
        if out.returncode == 0 and "kueue.x-k8s.io/queue-name" in out.stdout:
            return webhook
        if time.monotonic() > deadline:
            raise RuntimeError(f"the apiserver never applied trainguard's mutation: {out.stderr or out.stdout[:500]}")
        time.sleep(0.3)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--n1", type=int, default=60, help="CREATEs per round per configuration at concurrency 1")
    p.add_argument("--n8", type=int, default=240, help="... at concurrency 8")
    p.add_argument("--n32", type=int, default=480, help="... at concurrency 32")
    p.add_argument("--n-denied", type=int, default=40, help="denied CREATEs per round (concurrency 1)")
    p.add_argument("--n-direct", type=int, default=100, help="direct HTTPS reviews per round per webhook")
    p.add_argument("--n-inproc", type=int, default=600, help="in-process calls per round per case")
    p.add_argument("--n-profile", type=int, default=500)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", type=Path, default=REPO / "bench/results")
    p.add_argument("--validating-name", default="tg-bench-validating", help=argparse.SUPPRESS)
    args = p.parse_args()

    objs = example_objects()
    work = Path(tempfile.mkdtemp(prefix="trainguard-admission-bench-"))
    cluster = Cluster(work / "cluster")
    port = free_port()  # the webhook's HTTPS port: registered by URL before the process starts, as in hack/demo.sh
    reg = Registration(url_base=f"https://127.0.0.1:{port}", own_namespace=OWN, failure_policy="Fail",
                       mutating_name="tg-bench-mutating", validating_name=args.validating_name)
    webhook: Webhook | None = None
    t0 = time.monotonic()
    try:
        cluster.up()
        webhook = setup(cluster, objs, reg, port, work)
        log(f"setup done in {time.monotonic() - t0:.1f} s; measuring")
        t1 = time.monotonic()
        res = asyncio.run(measure(args, cluster, webhook, objs))
        res["measure_s"] = round(time.monotonic() - t1, 1)
        res["env"] = {
            "cpus": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version(),
            "kube_apiserver": cluster.version(), "aiohttp": aiohttp.__version__,
            "command": "python bench/admission_bench.py " + " ".join(sys.argv[1:]),
            "params": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "validating_name"},
            "webhook": {"replicas": 1, "failurePolicy": "Fail", "timeoutSeconds": reg.timeout_seconds, "log_level": "info"},
        }
    finally:
        if webhook is not None:
            webhook.stop()
        cluster.down()
        shutil.rmtree(work, ignore_errors=True)
    res["wall_s"] = round(time.monotonic() - t0, 1)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "admission_bench.json").write_text(json.dumps(res, indent=1) + "\n")
    (args.out / "admission_bench.md").write_text(render(res))
    print(render(res))
    return 0


def render(res: dict[str, Any]) -> str:
    env = res["env"]
    L = ["# Admission webhook benchmark", "",
         f"`{env['command'].strip()}` on {env['cpus']} CPUs (shared), kernel {env['kernel']}, Python {env['python']}, "
         f"kube-apiserver {env['kube_apiserver']} on loopback, 1 webhook replica, {len(res['rounds'])} interleaved "
         f"rounds, {res['wall_s']} s wall. (a) = no webhook, (b) = trainguard mutating + validating webhooks.", "",
         "## End to end: TrainJob CREATE through the apiserver", "",
         "| conc. | config | n | p50 ms | p95 ms | p99 ms | p50 over rounds (min-max) | CREATE/s (median, min-max) |",
         "|---:|---|---:|---:|---:|---:|---|---|"]
    for c in CONCURRENCY:
        for cfg in ("a", "b"):
            x = res["cells"][f"{cfg}/c{c}"]
            L.append(f"| {c} | ({cfg}) {'no webhook' if cfg == 'a' else 'trainguard'} | {x['n']} | {x['p50']} | {x['p95']} | {x['p99']} | "
                     f"{x['p50_over_rounds']['min']}-{x['p50_over_rounds']['max']} | {x['throughput_per_s']['median']} "
                     f"({x['throughput_per_s']['min']}-{x['throughput_per_s']['max']}) |")
    d = res["cells"]["b/denied"]
    L.append(f"| 1 | (b) denied CREATE | {d['n']} | {d['p50']} | {d['p95']} | {d['p99']} | "
             f"{d['p50_over_rounds']['min']}-{d['p50_over_rounds']['max']} | {d['throughput_per_s']['median']} |")
    L += ["", "Ratio (b)/(a), pooled, and per round (median, min-max):", "",
          "| conc. | p50 | p95 | p99 | p50 per round | p99 per round | throughput (b)/(a) per round | added p50 ms |",
          "|---:|---:|---:|---:|---|---|---|---:|"]
    for c in CONCURRENCY:
        r = res["ratios_b_over_a"][f"c{c}"]
        f = lambda s: f"{s['median']} ({s['min']}-{s['max']})"  # noqa: E731
        L.append(f"| {c} | {r['p50']}x | {r['p95']}x | {r['p99']}x | {f(r['p50_per_round'])} | {f(r['p99_per_round'])} | "
                 f"{f(r['throughput'])} | {r['added_p50_ms']} |")
    L += ["", "CPU per CREATE, ms (utime+stime from /proc over each cell, summed over rounds; 2 cores = 2000 ms/s), and "
          "apiserver->webhook TCP connections newly opened per (b) cell (sampled every 50 ms: a lower bound; median, min-max over rounds):", "",
          "| cell | " + " | ".join(next(iter(res["cpu_ms_per_create"].values()))) + " | new connections |",
          "|---|" + "---:|" * (len(next(iter(res["cpu_ms_per_create"].values()))) + 1)]
    for c in CONCURRENCY:
        for cfg in ("a", "b"):
            row = res["cpu_ms_per_create"][f"{cfg}/c{c}"]
            cn = res["apiserver_to_webhook_connections_seen"][f"c{c}"]
            L.append(f"| ({cfg}) c{c} | " + " | ".join(str(v) for v in row.values()) + " | "
                     + (f"{cn['median']:.0f} ({cn['min']:.0f}-{cn['max']:.0f})" if cfg == "b" else "-") + " |")
    L += ["", "## Server side", "",
          "`trainguard_admission_duration_seconds` (body read -> response ready), scraped around the (b) cells; "
          "quantiles interpolated within the histogram's buckets (1, 2.5, 5, 10, 25 ms ...):", "",
          "| cell | webhook | reviews | mean ms | p50 ms | p99 ms | <= 5 ms | <= 25 ms |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for cell, hooks in res["server_histogram"].items():
        for name, h in sorted(hooks.items()):
            L.append(f"| {cell} | {name} | {h['n']} | {h['mean_ms']} | {h['p50_ms']} | {h['p99_ms']} | "
                     f"{100 * (h['share_le_5ms'] or 0):.1f}% | {100 * (h['share_le_25ms'] or 0):.1f}% |")
    L += ["", "Where the time goes, concurrency 1 (µs unless marked):", "", "| measured | n | p50 | p99 | mean |", "|---|---:|---:|---:|---:|"]
    for k, v in res["in_process"].items():
        L.append(f"| in process: {k} | {v['n']} | {v['p50_us']} | {v['p99_us']} | {v['mean_us']} |")
    for k, v in res["direct_https"].items():
        L.append(f"| direct HTTPS POST to the webhook (no apiserver), {k} (ms) | {v['n']} | {v['p50']} ms | {v['p99']} ms | {v['mean']} ms |")
    pr = res["profile"]
    L += ["", f"cProfile of both review steps ({pr['calls_per_step']} pairs, {pr['per_pair_us']} µs per pair under the "
          f"profiler): share of time in", ""]
    for k, v in pr["share"].items():
        L.append(f"- {k}: {100 * v:.0f}%")
    L += ["", f"Objects: mutating review {res['objects']['mutating_review_bytes']} B, validating review "
          f"{res['objects']['validating_review_bytes']} B; the mutation adds {res['objects']['mutation']}.", ""]
    return "\n".join(L) + "\n"


if __name__ == "__main__":
    sys.exit(main())
