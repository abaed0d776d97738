"""`trainguard cache-agent`: run the node-local dataset cache agent (or, in the init container, prepare its socket
directory)."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import stat
import sys
from typing import Any

from webhook.cli import Run

log = logging.getLogger("trainguard.cache.agent")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message and the record's ``extra={"fields": {...}}``."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        line.update(getattr(record, "fields", None) or {})
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def configure(parser: argparse.ArgumentParser) -> Run:
    parser.description = (
        "Keep a dataset's shard files resident in this node's page cache and hand their file descriptors to "
        "training processes over a Unix socket."
    )
    parser.add_argument("--root", help="dataset directory (read-only mount)")
    parser.add_argument("--glob", default="**/*", help="shard files, relative to --root (default: every file)")
    parser.add_argument("--socket", default="/run/trainguard-cache/agent.sock", help="Unix socket path")
    parser.add_argument("--memory-budget", type=int, default=0, help="bytes of page cache to keep warm")
    parser.add_argument("--dataset", default="", help="DatasetCache name (for logs and ping)")
    parser.add_argument("--http-host", default="0.0.0.0")
    parser.add_argument("--http-port", type=int, default=9108, help="/healthz /readyz /metrics; -1 disables")
    parser.add_argument("--max-connections", type=int, default=256)
    parser.add_argument("--maintain-interval", type=float, default=5.0, help="seconds between residency passes")
    parser.add_argument("--rescan-interval", type=float, default=30.0, help="seconds between dataset rescans")
    parser.add_argument(
        "--report-to-pod",
        action="store_true",
        help="annotate this agent's Pod (POD_NAME/POD_NAMESPACE) with bytes resident and warm state",
    )
    parser.add_argument("--prepare-socket-dir", metavar="DIR", help="init-container mode: chown DIR and exit")
    parser.add_argument("--owner-uid", type=int, default=65532, help="owner for --prepare-socket-dir")
    parser.add_argument("--log-level", default="info")
    return run


def run(args: argparse.Namespace) -> int:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    logging.basicConfig(level=args.log_level.upper(), handlers=[handler], force=True)
    if args.prepare_socket_dir:
        return prepare_socket_dir(args.prepare_socket_dir, args.owner_uid)
    if not args.root:
        print("trainguard cache-agent: --root is required", file=sys.stderr)
        return 2
    try:
        return asyncio.run(_serve(args))
    except (FileNotFoundError, RuntimeError) as exc:
        log.error("cannot start", extra={"fields": {"error": str(exc)}})
        return 1


def prepare_socket_dir(path: str, uid: int) -> int:
    """Make the hostPath socket directory the agent's own (it runs as ``uid``) and searchable by clients.

    The init container runs as root with CAP_CHOWN only (no CAP_FOWNER), so it may chmod only a directory it
    owns: the mode is set while it owns the directory (taking it back first if an earlier run handed it over),
    and the directory is handed to ``uid`` last.
    """
    os.makedirs(path, exist_ok=True)
    st = os.stat(path)
    if stat.S_IMODE(st.st_mode) != 0o755:
        if st.st_uid != os.geteuid():
            os.chown(path, os.geteuid(), -1)
        os.chmod(path, 0o755)
    os.chown(path, uid, uid)
    log.info("socket directory prepared", extra={"fields": {"path": path, "uid": uid}})
    return 0


async def _serve(args: argparse.Namespace) -> int:
    from controller.cache.agent import AgentConfig, CacheAgent

    config = AgentConfig(
        root=args.root,
        socket_path=args.socket,
        glob=args.glob,
        memory_budget=args.memory_budget,
        dataset=args.dataset,
        http_host=args.http_host,
        http_port=None if args.http_port < 0 else args.http_port,
        max_connections=args.max_connections,
        maintain_interval=args.maintain_interval,
        rescan_interval=args.rescan_interval,
    )
    agent = CacheAgent(config, reporter=_pod_reporter() if args.report_to_pod else None)
    await agent.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("stopping")
    await agent.stop()
    return 0


def _pod_reporter():
    """Patch bytes resident / shard count / warm onto this Pod's annotations (read by ``daemonset.compute_status``)."""
    from kubernetes import client, config

    from controller.cache.daemonset import ANNOTATION_BYTES_RESIDENT, ANNOTATION_SHARDS, ANNOTATION_WARM

    name, namespace = os.environ.get("POD_NAME"), os.environ.get("POD_NAMESPACE")
    if not name or not namespace:
        raise RuntimeError("--report-to-pod needs POD_NAME and POD_NAMESPACE (downward API)")
    config.load_incluster_config()
    api = client.CoreV1Api()

    async def report(bytes_resident: int, shards: int, warm: bool) -> None:
        body = {
            "metadata": {
                "annotations": {
                    ANNOTATION_BYTES_RESIDENT: str(bytes_resident),
                    ANNOTATION_SHARDS: str(shards),
                    ANNOTATION_WARM: "true" if warm else "false",
                }
            }
        }
        await asyncio.to_thread(api.patch_namespaced_pod, name, namespace, body)

    return report
