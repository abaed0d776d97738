#!/usr/bin/env python3
"""Benchmark: the admission server under connection attacks, before and after issue 10's connection hygiene.

Run from the repository root (a script, not a test)::

    .venv/bin/python bench/connection_bench.py     # ~4-5 min on 2 cores; writes bench/results/connection_bench.{json,md}

Two ``trainguard webhook`` processes side by side in one run, each attack performed on one and then the other:

* **before**: the webhook package as of ``--before`` (default: the commit before the connection hygiene),
  extracted with ``git archive`` into a temporary directory and run from there;
* **after**: this working tree, default flags.

Both serve HTTPS on loopback with a throwaway CA (``--cert-dir``), the real policy pipeline, and a kubeconfig that
points at a closed port: the connection handling under test never reads the cluster, and leaving the apiserver out
keeps the two cores for the attack (the informers retry with backoff in the background; a good request is a TrainJob
review the pipeline denies for its missing runtime, a full policy run all the same). The attacker is this process
(threads, blocking sockets, the stdlib ``ssl``). A *good request* is one AdmissionReview POSTed on a kept-alive
HTTPS connection, timed client side; ``p50``/``p99`` over the requests made while the attack runs.

1. **Idle connections**: 500 accepted TCP connections that send nothing; RSS growth / 500 (within 1.5 s, before any
   deadline could close them).
2. **Withheld bodies**: 40 clients send the head of an 8 MiB review and 8 MiB - 1 bytes of body, then hold (and
   reconnect when cut), for 20 s: peak RSS, good-request p50/p99 (baseline measured just before, same process).
3. **Slowloris**: 800 TLS connections trickling a request head one byte per second per connection (reconnecting
   when cut), for 20 s: peak RSS, good p50/p99; then the attack stops and **RSS after** is read 20 s later.
4. **nofile 1024**: each process restarted under ``prlimit --nofile=1024:1024`` (nothing to raise to) and sent
   1,100 idle connections for 15 s: good requests on fresh connections that succeeded, ``/healthz`` answers, and the
   bytes of log written.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import shutil
import socket
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
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from trainguard.webhook.admission.certs import new_ca, new_serving_cert  # noqa: E402

VALIDATE = "/validate-trainer-kubeflow-org-v1alpha1-trainjob"
DEFAULT_BEFORE = "f3765f5"  # the last commit before the connection hygiene (06a6a6c)
MiB = 1024 * 1024


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def review_body() -> bytes:
    obj = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
           "metadata": {"name": "bench", "namespace": "bench"},
           "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 2}}}
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": str(uuid.uuid4()), "kind": {"group": "trainer.kubeflow.org", "version": "v1alpha1", "kind": "TrainJob"},
        "resource": {"group": "trainer.kubeflow.org", "version": "v1alpha1", "resource": "trainjobs"},
        "name": "bench", "namespace": "bench", "operation": "CREATE", "userInfo": {"username": "bench"},
        "object": obj, "oldObject": None, "dryRun": False}}).encode()


# ``trainguard webhook`` without the CLI's entry points (they would load the installed tree's other subcommands).
LAUNCH = ("import argparse, sys; from trainguard.webhook.admission.main import configure; p = argparse.ArgumentParser(); "
          "run = configure(p); sys.exit(run(p.parse_args(sys.argv[1:])))")


@dataclass
class Server:
    name: str
    pythonpath: Path
    workdir: Path
    kubeconfig: Path
    prefix: list[str] = field(default_factory=list)
    port: int = 0
    health_port: int = 0
    proc: subprocess.Popen[bytes] | None = None

    @property
    def log(self) -> Path:
        return self.workdir / f"{self.name}.log"

    def start(self) -> "Server":
        self.port, self.health_port = free_port(), free_port()
        args = [*self.prefix, sys.executable, "-c", LAUNCH, "--bind-address", "127.0.0.1",
                "--port", str(self.port), "--health-port", str(self.health_port), "--kubeconfig", str(self.kubeconfig),
                "--cert-dir", str(self.workdir / "certs"), "--log-level", "info"]
        env = {**os.environ, "PYTHONPATH": str(self.pythonpath)}
        self.proc = subprocess.Popen(args, stdout=open(self.log, "ab"), stderr=subprocess.STDOUT, env=env,
                                     cwd=self.pythonpath)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return self
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"{self.name} did not open its port:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def rss(self) -> int:
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    def healthz(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/healthz", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False


class Good:
    """Good requests on one kept-alive HTTPS connection (reopened if the server closed it)."""

    def __init__(self, server: Server, ctx: ssl.SSLContext) -> None:
        self.server, self.ctx = server, ctx
        self.conn: http.client.HTTPSConnection | None = None

    def once(self, fresh: bool = False, timeout: float = 10) -> float | None:
        if fresh or self.conn is None:
            if self.conn is not None:
                self.conn.close()
            self.conn = http.client.HTTPSConnection("127.0.0.1", self.server.port, context=self.ctx, timeout=timeout)
        started = time.perf_counter()
        try:
            self.conn.request("POST", VALIDATE, body=review_body(), headers={"Content-Type": "application/json"})
            resp = self.conn.getresponse()
            resp.read()
            ok = resp.status == 200
        except (OSError, http.client.HTTPException):
            ok = False
            self.conn.close()
            self.conn = None
        return time.perf_counter() - started if ok else None

    def during(self, seconds: float, pause: float = 0.05) -> tuple[list[float], int]:
        lat, failed = [], 0
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            t = self.once()
            if t is None:
                failed += 1
            else:
                lat.append(t)
            time.sleep(pause)
        return lat, failed


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))]


def ms(v: float | None) -> float | None:
    return None if v is None else round(v * 1000, 1)


class Attack:
    """``workers`` threads each running ``one(stop)`` in a loop until stopped (one connection per iteration)."""

    def __init__(self, workers: int, one: Callable[[threading.Event], None]) -> None:
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._loop, args=(one,), daemon=True) for _ in range(workers)]

    def _loop(self, one: Callable[[threading.Event], None]) -> None:
        while not self.stop.is_set():
            try:
                one(self.stop)
            except (OSError, ssl.SSLError):
                time.sleep(0.05)

    def __enter__(self) -> "Attack":
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)


def withheld_body(server: Server, ctx: ssl.SSLContext) -> Callable[[threading.Event], None]:
    head = (f"POST {VALIDATE} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {8 * MiB}\r\n\r\n").encode()
    chunk = b" " * (256 * 1024)

    def one(stop: threading.Event) -> None:
        with ctx.wrap_socket(socket.create_connection(("127.0.0.1", server.port), timeout=30), server_hostname="127.0.0.1") as s:
            s.sendall(head)
            sent = 0
            while sent < 8 * MiB - 1 and not stop.is_set():
                n = min(len(chunk), 8 * MiB - 1 - sent)
                s.sendall(chunk[:n])
                sent += n
            s.settimeout(1)
            while not stop.is_set():  # hold until the server gives up on us
                try:
                    if not s.recv(4096):
                        return
                except socket.timeout:
                    continue
    return one


def slowloris(server: Server, ctx: ssl.SSLContext, per_thread: int) -> Callable[[threading.Event], None]:
    head = f"POST {VALIDATE} HTTP/1.1\r\nHost: x\r\nX-Slow: ".encode() + b"a" * 100000

    def one(stop: threading.Event) -> None:
        socks = []
        for _ in range(per_thread):
            try:
                socks.append(ctx.wrap_socket(socket.create_connection(("127.0.0.1", server.port), timeout=10),
                                             server_hostname="127.0.0.1"))
            except (OSError, ssl.SSLError):
                break
        i = 0
        try:
            while socks and not stop.is_set():
                for s in list(socks):
                    try:
                        s.send(head[i:i + 1])
                    except (OSError, ssl.SSLError):
                        socks.remove(s)  # cut by the server: reconnected by the next iteration
                i += 1
                stop.wait(1.0)
        finally:
            for s in socks:
                s.close()
    return one


def idle_connections(port: int, n: int) -> list[socket.socket]:
    out = []
    for _ in range(n):
        try:
            out.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        except OSError:
            break
    return out


def measure(server: Server, ctx: ssl.SSLContext, attack_seconds: float) -> dict[str, Any]:
    res: dict[str, Any] = {}
    good = Good(server, ctx)
    for _ in range(20):
        good.once()  # warm up
    time.sleep(1)
    base_rss = server.rss()
    res["rss_baseline_mb"] = round(base_rss / MiB, 1)

    # 1. idle connections
    socks = idle_connections(server.port, 500)
    time.sleep(1.5)
    res["idle_kib_per_connection"] = round((server.rss() - base_rss) / 1024 / max(1, len(socks)), 1)
    for s in socks:
        s.close()
    time.sleep(2)

    # 2. withheld bodies
    base_lat, _ = good.during(5)
    res["good_baseline_p50_ms"], res["good_baseline_p99_ms"] = ms(pct(base_lat, 0.5)), ms(pct(base_lat, 0.99))
    peak = [0]

    def sample() -> None:
        while not sampling.is_set():
            peak[0] = max(peak[0], server.rss())
            sampling.wait(0.25)

    sampling = threading.Event()
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    with Attack(40, withheld_body(server, ctx)):
        time.sleep(3)
        lat, failed = good.during(attack_seconds)
    sampling.set()
    sampler.join()
    res["withheld"] = {"rss_peak_mb": round(peak[0] / MiB, 1), "good_p50_ms": ms(pct(lat, 0.5)),
                       "good_p99_ms": ms(pct(lat, 0.99)), "good_ok": len(lat), "good_failed": failed}
    time.sleep(3)

    # 3. slowloris
    peak = [0]
    sampling = threading.Event()
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    with Attack(16, slowloris(server, ctx, per_thread=50)):
        time.sleep(5)
        lat, failed = good.during(attack_seconds)
    sampling.set()
    sampler.join()
    time.sleep(20)
    res["slowloris"] = {"rss_peak_mb": round(peak[0] / MiB, 1), "good_p50_ms": ms(pct(lat, 0.5)),
                        "good_p99_ms": ms(pct(lat, 0.99)), "good_ok": len(lat), "good_failed": failed,
                        "rss_20s_after_mb": round(server.rss() / MiB, 1)}
    if good.conn:
        good.conn.close()
    return res


def measure_nofile(server: Server, ctx: ssl.SSLContext, seconds: float = 15) -> dict[str, Any]:
    good = Good(server, ctx)
    good.once()
    log_before = server.log.stat().st_size
    socks = idle_connections(server.port, 1100)
    ok = failed = health_ok = health_failed = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if good.once(fresh=True, timeout=3) is None:
            failed += 1
        else:
            ok += 1
        if server.healthz():
            health_ok += 1
        else:
            health_failed += 1
        time.sleep(0.2)
    log_bytes = server.log.stat().st_size - log_before
    for s in socks:
        s.close()
    alive = server.proc is not None and server.proc.poll() is None
    return {"idle_opened": len(socks), "good_fresh_ok": ok, "good_fresh_failed": failed, "healthz_ok": health_ok,
            "healthz_failed": health_failed, "log_bytes_15s": log_bytes, "alive": alive}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--before", default=DEFAULT_BEFORE, help="git revision of the server to compare against")
    p.add_argument("--attack-seconds", type=float, default=20)
    p.add_argument("--out", type=Path, default=REPO / "bench/results")
    args = p.parse_args()

    work = Path(tempfile.mkdtemp(prefix="trainguard-connbench-"))
    try:
        old_tree = work / "before"
        old_tree.mkdir()
        archive = subprocess.run(["git", "-C", str(REPO), "archive", args.before, "webhook"], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(old_tree)], input=archive, check=True)
        now = datetime.now(timezone.utc)
        ca = new_ca(now=now, lifetime=timedelta(days=1))
        leaf = new_serving_cert(ca, dns_names=["localhost"], ip_addresses=["127.0.0.1"], now=now, lifetime=timedelta(days=1))
        (work / "certs").mkdir()
        (work / "certs/tls.crt").write_bytes(leaf.cert_pem)
        (work / "certs/tls.key").write_bytes(leaf.key_pem)
        kubeconfig = work / "kubeconfig"
        kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{free_port()}", "insecure-skip-tls-verify": True}}],
            "users": [{"name": "u", "user": {"token": "none"}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
        ctx = ssl.create_default_context(cadata=ca.cert_pem.decode())
        trees = {"before": old_tree, "after": REPO}
        results: dict[str, Any] = {"before_revision": args.before, "machine": f"{platform.machine()}, {os.cpu_count()} cpus",
                                   "python": platform.python_version(), "servers": {}}
        for name, tree in trees.items():
            server = Server(name, tree, work, kubeconfig).start()
            try:
                print(f"[{name}] attacks ...", flush=True)
                results["servers"][name] = measure(server, ctx, args.attack_seconds)
            finally:
                server.stop()
            print(json.dumps(results["servers"][name]), flush=True)
        for name, tree in trees.items():
            server = Server(f"{name}-nofile", tree, work, kubeconfig, prefix=["prlimit", "--nofile=1024:1024", "--"]).start()
            try:
                print(f"[{name}] nofile 1024 ...", flush=True)
                results["servers"][name]["nofile_1024"] = measure_nofile(server, ctx)
            finally:
                server.stop()
            print(json.dumps(results["servers"][name]["nofile_1024"]), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "connection_bench.json").write_text(json.dumps(results, indent=2) + "\n")
    (args.out / "connection_bench.md").write_text(table(results))
    print(table(results))
    return 0


def table(r: dict[str, Any]) -> str:
    b, a = r["servers"]["before"], r["servers"]["after"]

    def ratio(x: float | None, y: float | None) -> str:
        return f"{y / x:.2f}x" if x and y is not None else "-"

    rows = [
        ("RSS at rest (MB)", b["rss_baseline_mb"], a["rss_baseline_mb"]),
        ("RSS per idle TCP connection (KiB)", b["idle_kib_per_connection"], a["idle_kib_per_connection"]),
        ("good p50 / p99, no attack (ms)", f'{b["good_baseline_p50_ms"]} / {b["good_baseline_p99_ms"]}',
         f'{a["good_baseline_p50_ms"]} / {a["good_baseline_p99_ms"]}'),
        ("40 withheld 8 MiB bodies: peak RSS (MB)", b["withheld"]["rss_peak_mb"], a["withheld"]["rss_peak_mb"]),
        ("40 withheld 8 MiB bodies: good p50 / p99 (ms)", f'{b["withheld"]["good_p50_ms"]} / {b["withheld"]["good_p99_ms"]}',
         f'{a["withheld"]["good_p50_ms"]} / {a["withheld"]["good_p99_ms"]}'),
        ("40 withheld 8 MiB bodies: good ok / failed", f'{b["withheld"]["good_ok"]} / {b["withheld"]["good_failed"]}',
         f'{a["withheld"]["good_ok"]} / {a["withheld"]["good_failed"]}'),
        ("slowloris (800 conns): peak RSS (MB)", b["slowloris"]["rss_peak_mb"], a["slowloris"]["rss_peak_mb"]),
        ("slowloris: good p50 / p99 (ms)", f'{b["slowloris"]["good_p50_ms"]} / {b["slowloris"]["good_p99_ms"]}',
         f'{a["slowloris"]["good_p50_ms"]} / {a["slowloris"]["good_p99_ms"]}'),
        ("slowloris: good ok / failed", f'{b["slowloris"]["good_ok"]} / {b["slowloris"]["good_failed"]}',
         f'{a["slowloris"]["good_ok"]} / {a["slowloris"]["good_failed"]}'),
        ("RSS 20 s after the slowloris (MB)", b["slowloris"]["rss_20s_after_mb"], a["slowloris"]["rss_20s_after_mb"]),
    ]
    nb, na = b.get("nofile_1024", {}), a.get("nofile_1024", {})
    if nb and na:
        rows += [
            ("nofile 1024, 1,100 idle: fresh good requests ok / failed", f'{nb["good_fresh_ok"]} / {nb["good_fresh_failed"]}',
             f'{na["good_fresh_ok"]} / {na["good_fresh_failed"]}'),
            ("nofile 1024, 1,100 idle: /healthz ok / failed", f'{nb["healthz_ok"]} / {nb["healthz_failed"]}',
             f'{na["healthz_ok"]} / {na["healthz_failed"]}'),
            ("nofile 1024, 1,100 idle: log bytes in 15 s", nb["log_bytes_15s"], na["log_bytes_15s"]),
        ]
    out = [f"# Connection attacks: before ({r['before_revision']}) vs after, one run ({r['machine']}, Python {r['python']})", "",
           "| measure | before | after | after/before |", "|---|---:|---:|---:|"]
    for label, x, y in rows:
        rat = ratio(x, y) if isinstance(x, (int, float)) and isinstance(y, (int, float)) else ""
        out.append(f"| {label} | {x} | {y} | {rat} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.exit(main())
