#!/usr/bin/env python3
"""Benchmark: reading dataset shards through the cache agent's fd handoff vs. direct mmap vs. a copying stream.

Run from the repository root (a script, not a test)::

    .venv/bin/python bench/cache_bench.py            # writes bench/results/cache_bench.{json,md}

Three ways a consumer reads the same shards, measured side by side in one run:

* ``agent``: ``trainguard.cache.client`` asks a real ``trainguard cache-agent`` process for the shard, receives its
  fd over the Unix socket (SCM_RIGHTS) and maps it: the page-cache pages are shared, nothing is copied on the way.
  Two ways, both opening every shard through the agent in every pass: ``open`` (one request per shard) and
  ``open_shards`` (what a DataLoader walking a shard list uses: ``open_many`` requests of 32 shards, all their fds
  in one reply, each shard mapped when the consumer reaches it).
* ``direct`` (a): the consumer opens and maps the local file itself: the physical limit on this host.
* ``tcp`` (b): a separate server process streams the file over loopback TCP (``sendfile``, so the sender copies
  nothing; the consumer's ``recv_into`` copies each byte once, as any copying pipeline must).

The consumer's work is identical in all three: every byte passes through a 1 MiB buffer (memcpy-speed read).
"warm" means the shards are in the page cache (the agent warmed them); "cold" means they were dropped with
posix_fadvise(DONTNEED) right before each pass. First-byte latency is from "I want shard X" to holding its first
byte, with the page cache warm. A GPU section (H2D copies from the pinned vs. pageable mapping) runs only when
``trainguard.cache.client.pin`` works.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import mmap
import os
import platform
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from trainguard.cache.client import CacheClient, PinningUnavailable, load_cudart, pin  # noqa: E402

MiB = 1 << 20
CHUNK = 1 * MiB
SIZE_CLASSES = [(4 * MiB, 128), (64 * MiB, 8), (512 * MiB, 1)]  # 512 MiB per class


# -- data ------------------------------------------------------------------------------------------------------
def make_dataset(root: Path, classes: list[tuple[int, int]]) -> dict[str, list[str]]:
    block = os.urandom(4 * MiB)
    names: dict[str, list[str]] = {}
    for size, count in classes:
        label = f"{size // MiB}MiB"
        (root / label).mkdir(parents=True, exist_ok=True)
        names[label] = []
        for i in range(count):
            name = f"{label}/shard-{i:04d}.bin"
            with open(root / name, "wb") as f:
                written = 0
                while written < size:
                    n = min(len(block), size - written)
                    f.write(block[:n])
                    written += n
                f.flush()
                os.fsync(f.fileno())  # dirty pages cannot be dropped; cold passes need clean ones
            names[label].append(name)
    return names


def drop_cache(root: Path, names: list[str]) -> None:
    for name in names:
        fd = os.open(root / name, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)


# -- consumers -------------------------------------------------------------------------------------------------
def consume(view: memoryview, buf: bytearray) -> int:
    """Read every byte of ``view`` through ``buf`` (what a decoder or a staging copy does)."""
    out = memoryview(buf)
    total = len(view)
    for offset in range(0, total, CHUNK):
        n = min(CHUNK, total - offset)
        out[:n] = view[offset : offset + n]
    return total


def read_agent(client: CacheClient, names: list[str], buf: bytearray) -> int:
    done = 0
    for name in names:
        with client.open(name) as shard:
            done += consume(shard.view, buf)
    return done


def read_agent_batched(client: CacheClient, names: list[str], buf: bytearray) -> int:
    done = 0
    for shard in client.open_shards(names):
        with shard:
            done += consume(shard.view, buf)
    return done


def read_direct(root: Path, names: list[str], buf: bytearray) -> int:
    done = 0
    for name in names:
        with open(root / name, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapping:
            view = memoryview(mapping)
            done += consume(view, buf)
            view.release()
    return done


def read_tcp(address: tuple[str, int], names: list[str], buf: bytearray) -> int:
    done = 0
    with socket.create_connection(address) as sock:
        view = memoryview(buf)
        for name in names:
            encoded = name.encode()
            sock.sendall(struct.pack(">H", len(encoded)) + encoded)
            size = struct.unpack(">Q", _recv_exactly(sock, 8))[0]
            left = size
            while left:
                n = sock.recv_into(view, min(len(buf), left))
                if n == 0:
                    raise ConnectionError("stream server closed early")
                left -= n
            done += size
    return done


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("stream server closed early")
        data += chunk
    return data


TCP_SERVER = r"""
import os, socket, struct, sys
root = sys.argv[1]
srv = socket.create_server(("127.0.0.1", 0))
print(srv.getsockname()[1], flush=True)
while True:
    conn, _ = srv.accept()
    with conn:
        while True:
            head = conn.recv(2)
            if len(head) < 2:
                break
            (n,) = struct.unpack(">H", head)
            name = b""
            while len(name) < n:
                name += conn.recv(n - len(name))
            with open(os.path.join(root, name.decode()), "rb") as f:
                size = os.fstat(f.fileno()).st_size
                conn.sendall(struct.pack(">Q", size))
                conn.sendfile(f)
"""


# -- measurement -----------------------------------------------------------------------------------------------
def bandwidth(fn, repeats: int, before=None) -> float:
    """Best GB/s over ``repeats`` passes (``before`` runs untimed ahead of each pass)."""
    return side_by_side({"only": fn}, repeats, before)["only"]


def side_by_side(fns: dict, repeats: int, before=None) -> dict[str, float]:
    """Best GB/s of each method, the methods interleaved pass by pass so that load from other processes on a
    shared machine hits all of them alike; the best pass is the least disturbed one."""
    best = {key: 0.0 for key in fns}
    for _ in range(repeats):
        for key, fn in fns.items():
            if before:
                before()
            t0 = time.perf_counter()
            nbytes = fn()
            best[key] = max(best[key], nbytes / (time.perf_counter() - t0) / 1e9)
    return best


def first_byte(open_first_byte, names: list[str], iterations: int) -> dict:
    samples = []
    for i in range(iterations):
        name = names[i % len(names)]
        t0 = time.perf_counter()
        open_first_byte(name)
        samples.append((time.perf_counter() - t0) * 1e6)
    samples.sort()
    return {"p50_us": round(statistics.median(samples), 1), "p99_us": round(samples[int(len(samples) * 0.99) - 1], 1)}


def start_agent(root: Path, socket_path: Path, budget: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainguard.webhook.cli", "cache-agent", f"--root={root}", f"--socket={socket_path}",
         f"--memory-budget={budget}", "--http-port=-1", "--maintain-interval=3600", "--rescan-interval=3600",
         "--log-level=warning"],
        cwd=REPO,
    )
    client = CacheClient(str(socket_path), reconnect_timeout=60)
    deadline = time.monotonic() + 120
    while not client.ping().get("ready"):
        if time.monotonic() > deadline:
            raise RuntimeError("agent did not become ready")
        time.sleep(0.1)
    client.close()
    return proc


def gpu_section(client: CacheClient, name: str) -> dict:
    try:
        cudart = load_cudart()
        with client.open(name) as probe:
            pin(probe.view).unpin()
    except (PinningUnavailable, RuntimeError) as exc:
        return {"ran": False, "reason": str(exc)}
    cudart.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    cudart.cudaMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    from trainguard.cache.pages import buffer_address

    results = {"ran": True}
    with client.open(name) as shard:
        address, length = buffer_address(shard.view)
        device = ctypes.c_void_p()
        assert cudart.cudaMalloc(ctypes.byref(device), length) == 0

        def h2d() -> int:
            assert cudart.cudaMemcpy(device, ctypes.c_void_p(address), length, 1) == 0  # cudaMemcpyHostToDevice
            cudart.cudaDeviceSynchronize()
            return length

        h2d()
        results["pageable_GBps"] = round(bandwidth(h2d, 5), 2)
        pinned = pin(shard.view)
        h2d()
        results["pinned_GBps"] = round(bandwidth(h2d, 5), 2)
        pinned.unpin()
        cudart.cudaFree(device)
    results["shard_bytes"] = length
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", default=None, help="scratch directory on a real disk (default: a temp dir in /var/tmp)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=str(REPO / "bench" / "results"))
    args = parser.parse_args()

    scratch = Path(args.dir or tempfile.mkdtemp(prefix="trainguard-cache-bench-", dir="/var/tmp"))
    root = scratch / "data"
    root.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    procs: list[subprocess.Popen] = []
    try:
        names = make_dataset(root, SIZE_CLASSES)
        everything = [n for group in names.values() for n in group]
        total = sum((root / n).stat().st_size for n in everything)
        buf = bytearray(CHUNK)

        tcp = subprocess.Popen([sys.executable, "-c", TCP_SERVER, str(root)], stdout=subprocess.PIPE, text=True)
        procs.append(tcp)
        address = ("127.0.0.1", int(tcp.stdout.readline()))

        rows = []
        # Warm: an agent whose budget holds everything; it warms the shards before reporting ready.
        procs.append(start_agent(root, scratch / "warm.sock", budget=total + 64 * MiB))
        warm_client = CacheClient(str(scratch / "warm.sock"))
        for label, group in names.items():
            rates = side_by_side({
                "agent_GBps": lambda: read_agent(warm_client, group, buf),
                "agent_batched_GBps": lambda: read_agent_batched(warm_client, group, buf),
                "direct_GBps": lambda: read_direct(root, group, buf),
                "tcp_GBps": lambda: read_tcp(address, group, buf),
            }, args.repeats)
            rows.append({"shard": label, "state": "warm", "bytes": sum((root / n).stat().st_size for n in group),
                         **rates})
        small = names["4MiB"]

        def agent_first_byte(name: str) -> None:
            with warm_client.open(name) as shard:
                shard.view[0]

        def direct_first_byte(name: str) -> None:
            with open(root / name, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                m[0]

        def agent_walk_first_byte() -> dict:
            """Per shard of an open_shards walk: from asking for the next shard to holding its first byte (the
            shard that starts a batch of 32 pays the round trip, the others find their fd already there)."""
            samples = []
            walk = warm_client.open_shards(small * 3)
            for _ in range(len(small) * 3):
                t0 = time.perf_counter()
                with next(walk) as shard:
                    shard.view[0]
                samples.append((time.perf_counter() - t0) * 1e6)
            samples.sort()
            return {"p50_us": round(statistics.median(samples), 1),
                    "p99_us": round(samples[int(len(samples) * 0.99) - 1], 1)}

        tcp_sock = socket.create_connection(address)
        latency = {
            "agent": first_byte(agent_first_byte, small, 300),
            "agent_open_shards": agent_walk_first_byte(),
            "direct": first_byte(direct_first_byte, small, 300),
        }
        tcp_fb = []
        for i in range(100):
            name = small[i % len(small)]
            t0 = time.perf_counter()
            encoded = name.encode()
            tcp_sock.sendall(struct.pack(">H", len(encoded)) + encoded)
            size = struct.unpack(">Q", _recv_exactly(tcp_sock, 8))[0]
            tcp_sock.recv(1)
            tcp_fb.append((time.perf_counter() - t0) * 1e6)
            left = size - 1
            while left:
                left -= tcp_sock.recv_into(buf, min(len(buf), left))
        tcp_fb.sort()
        latency["tcp"] = {"p50_us": round(statistics.median(tcp_fb), 1), "p99_us": round(tcp_fb[98], 1)}
        tcp_sock.close()
        gpu = gpu_section(warm_client, names["64MiB"][0])
        warm_client.close()

        # Cold: an agent with no budget (serves, never warms); the pages are dropped before every pass.
        procs.append(start_agent(root, scratch / "cold.sock", budget=0))
        cold_client = CacheClient(str(scratch / "cold.sock"))
        for label, group in names.items():
            drop = lambda group=group: drop_cache(root, group)  # noqa: E731
            rates = side_by_side({
                "agent_GBps": lambda: read_agent(cold_client, group, buf),
                "agent_batched_GBps": lambda: read_agent_batched(cold_client, group, buf),
                "direct_GBps": lambda: read_direct(root, group, buf),
                "tcp_GBps": lambda: read_tcp(address, group, buf),
            }, args.repeats, drop)
            rows.append({"shard": label, "state": "cold", "bytes": sum((root / n).stat().st_size for n in group),
                         **rates})
        cold_client.close()
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(10)
        if not args.dir:
            shutil.rmtree(scratch, ignore_errors=True)

    for row in rows:
        row["vs_direct"] = round(row["agent_GBps"] / row["direct_GBps"], 2)
        row["vs_tcp"] = round(row["agent_GBps"] / row["tcp_GBps"], 2)
        row["batched_vs_direct"] = round(row["agent_batched_GBps"] / row["direct_GBps"], 2)
        row["batched_vs_tcp"] = round(row["agent_batched_GBps"] / row["tcp_GBps"], 2)
        for key in ("agent_GBps", "agent_batched_GBps", "direct_GBps", "tcp_GBps"):
            row[key] = round(row[key], 2)
    result = {
        "command": "python bench/cache_bench.py",
        "host": {"cpus": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version(),
                 "machine": platform.machine()},
        "repeats": args.repeats,
        "rows": rows,
        "first_byte_warm": latency,
        "gpu": gpu,
        "targets": {"warm_vs_direct": ">= 0.9", "warm_vs_tcp": ">= 5", "first_byte_warm_p50": "< 1000 us"},
        "wall_seconds": round(time.perf_counter() - started, 1),
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "cache_bench.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "cache_bench.md").write_text(markdown(result))
    print(markdown(result))
    return 0


def markdown(result: dict) -> str:
    lines = [
        "# Dataset cache benchmark",
        "",
        f"`{result['command']}` on {result['host']['cpus']} CPUs, kernel {result['host']['kernel']}, "
        f"best of {result['repeats']} interleaved passes, {result['wall_seconds']} s wall.",
        "",
        "Agent fd handoff two ways: `open` = one request per shard; `open_shards` = batched `open_many` "
        "(32 shards per request). Every shard is opened through the agent in every pass.",
        "",
        "| shards | state | bytes | agent `open` GB/s | agent `open_shards` GB/s | (a) direct mmap GB/s "
        "| (b) loopback TCP GB/s | `open` / (a) | `open_shards` / (a) | `open` / (b) | `open_shards` / (b) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['shard']} | {r['state']} | {r['bytes'] // MiB} MiB | {r['agent_GBps']} | {r['agent_batched_GBps']} "
            f"| {r['direct_GBps']} | {r['tcp_GBps']} | {r['vs_direct']}x | {r['batched_vs_direct']}x "
            f"| {r['vs_tcp']}x | {r['batched_vs_tcp']}x |"
        )
    lines += ["", "First byte, warm (open to first byte in hand, 4 MiB shards; `agent_open_shards` is per shard of a "
              "batched walk):", "",
              "| path | p50 µs | p99 µs |", "|---|---:|---:|"]
    for path, figures in result["first_byte_warm"].items():
        lines.append(f"| {path} | {figures['p50_us']} | {figures['p99_us']} |")
    gpu = result["gpu"]
    lines += ["", "GPU (H2D from the mapped shard): " + (
        f"pageable {gpu['pageable_GBps']} GB/s, pinned {gpu['pinned_GBps']} GB/s ({gpu['shard_bytes'] // MiB} MiB)"
        if gpu.get("ran") else f"skipped: {gpu['reason']}"), ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
