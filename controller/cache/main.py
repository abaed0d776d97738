"""`trainguard cache-agent`: run the node-local dataset cache agent (or, in the init container, prepare its socket
directory)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import stat
import sys
from typing import Callable

from trainguard.cache.report import pod_reporter
from trainguard.process import configure_logging, raise_nofile_limit, stop_event

# The `trainguard` CLI's subcommand contract (``trainguard.webhook.cli.Run``), restated so the agent imports nothing
# of the control plane.
Run = Callable[[argparse.Namespace], int]

log = logging.getLogger("trainguard.cache.agent")


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
    parser.add_argument("--max-connections-per-peer", type=int, default=128,
                        help="connections one peer (SO_PEERCRED uid and pid; pid 0 from other pods) may hold")
    parser.add_argument("--idle-timeout", type=float, default=60.0,
                        help="seconds without traffic after which a connection is closed (clients reconnect)")
    parser.add_argument("--max-unread-fds", type=int, default=512,
                        help="descriptors sent on one connection and not yet received before it is held")
    parser.add_argument("--max-unread-fds-total", type=int, default=8192,
                        help="descriptors in flight in all (also at most half of RLIMIT_NOFILE)")
    parser.add_argument(
        "--socket-group",
        type=int,
        help="GID owning the socket (mode 0660) and its directory (0750); only peers in this group are served "
        "(default: the agent's own group)",
    )
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
    configure_logging(args.log_level)
    if args.prepare_socket_dir:
        return prepare_socket_dir(args.prepare_socket_dir, args.owner_uid, args.socket_group)
    if not args.root:
        print("trainguard cache-agent: --root is required", file=sys.stderr)
        return 2
    try:
        return asyncio.run(_serve(args))
    except (FileNotFoundError, RuntimeError) as exc:
        log.error("cannot start", extra={"fields": {"error": str(exc)}})
        return 1


SOCKET_DIR_MODE = 0o750


def prepare_socket_dir(path: str, uid: int, gid: int | None = None) -> int:
    """Make the hostPath socket directory the agent's own (it runs as ``uid``), searchable by group ``gid`` (the
    socket's group, which the cache's trainer pods carry; default ``uid``) and by no one else.

    The init container runs as root with CAP_CHOWN only (no CAP_FOWNER), so it may chmod only a directory it
    owns: the mode is set while it owns the directory (taking it back first if an earlier run handed it over),
    and the directory is handed to ``uid`` last.
    """
    group = uid if gid is None else gid
    os.makedirs(path, exist_ok=True)
    st = os.stat(path)
    if stat.S_IMODE(st.st_mode) != SOCKET_DIR_MODE:
        if st.st_uid != os.geteuid():
            os.chown(path, os.geteuid(), -1)
        os.chmod(path, SOCKET_DIR_MODE)
    os.chown(path, uid, group)
    log.info("socket directory prepared", extra={"fields": {"path": path, "uid": uid, "gid": group}})
    return 0


async def _serve(args: argparse.Namespace) -> int:
    from trainguard.cache.agent import AgentConfig, CacheAgent

    nofile = raise_nofile_limit()
    log.info("open-files limit", extra={"soft_before": nofile.soft_before, "soft": nofile.soft, "hard": nofile.hard})
    config = AgentConfig(
        root=args.root,
        socket_path=args.socket,
        glob=args.glob,
        memory_budget=args.memory_budget,
        dataset=args.dataset,
        http_host=args.http_host,
        http_port=None if args.http_port < 0 else args.http_port,
        max_connections=args.max_connections,
        max_connections_per_peer=args.max_connections_per_peer,
        idle_timeout=args.idle_timeout,
        max_unread_fds=args.max_unread_fds,
        max_unread_fds_total=args.max_unread_fds_total,
        socket_group=args.socket_group,
        maintain_interval=args.maintain_interval,
        rescan_interval=args.rescan_interval,
    )
    agent = CacheAgent(config, reporter=pod_reporter() if args.report_to_pod else None)
    await agent.start()
    await stop_event().wait()
    log.info("stopping")
    await agent.stop()
    return 0
