"""``trainguard controller``: the TrainJob (and DatasetCache) reconciler.

Lifecycle: start the watch caches and the HTTP endpoints -> wait until the caches have synced (``/readyz``) ->
with leader election, wait to acquire the Lease -> start N workers -> on SIGTERM/SIGINT stop handing out work,
let in-flight reconciles finish, release the Lease, exit 0.

Losing the Lease (no renewal within the renew deadline, e.g. an apiserver outage) cancels in-flight reconciles at
once and the replica goes back to campaigning, with its caches kept warm. controller-runtime exits instead and
relies on the pod's restart; with every replica cut off from the same apiserver that ends all of them together,
each restart then waits out CrashLoopBackOff, and a process without a restart policy (tests, ``make demo``) stays
down. Re-campaigning gives the same safety (no worker runs without the Lease; the new term starts from a fresh
queue holding every object) without either.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import os
import socket
import uuid
from typing import Any

from trainguard.process import configure_logging, stop_event
from trainguard.webhook.cli import Run
from trainguard.webhook.dataset_cache_flags import add_dataset_cache_flags, dataset_cache_agents, dataset_cache_sources
from trainguard.webhook.kube.config import load_config
from trainguard.webhook.kube.errors import AlreadyExists, Conflict as ApiConflict, NotFound
from trainguard.webhook.kube.resources import LEASES

from trainguard.controller.reconcile.leader import Conflict, ElectionConfig, LeaderElector
from trainguard.controller.reconcile.metrics import CountingKubeClient, Metrics, serve

log = logging.getLogger("trainguard.controller")


def seconds_or_never(text: str) -> float:
    """A finite number of seconds >= 0 (0: never)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a number of seconds, 0 or more (0: never): {text!r}")
    return value


def configure(parser: argparse.ArgumentParser) -> Run:
    parser.description = "Reconcile TrainJobs into JobSets (and DatasetCaches into agent DaemonSets)."
    parser.add_argument("--kubeconfig", default=None, help="kubeconfig path (default: $KUBECONFIG, in-cluster, ~/.kube)")
    parser.add_argument("--workers", type=int, default=5, help="concurrent reconciles (never two for one object)")
    parser.add_argument("--namespace", default=None, help="watch only this namespace (default: all)")
    parser.add_argument("--metrics-bind-address", default=":8080",
                        help="host:port for /metrics, /healthz, /readyz (plain HTTP); '0' disables")
    parser.add_argument("--leader-elect", action=argparse.BooleanOptionalAction, default=True,
                        help="run leader election so only one replica reconciles (default: on)")
    parser.add_argument("--leader-elect-lease-name", default="trainguard-controller")
    parser.add_argument("--leader-elect-namespace", default=None,
                        help="namespace of the Lease (default: $POD_NAMESPACE, else trainguard-system)")
    parser.add_argument("--leader-elect-identity", default=None, help="this replica's identity (default: host_uuid)")
    parser.add_argument("--leader-elect-lease-duration", type=float, default=15.0)
    parser.add_argument("--leader-elect-renew-deadline", type=float, default=10.0)
    parser.add_argument("--leader-elect-retry-period", type=float, default=2.0)
    parser.add_argument("--cache-agent-image", default=os.environ.get("TRAINGUARD_IMAGE", "ghcr.io/trainguard/trainguard:0.1.0"),
                        help="image of the DatasetCache agent DaemonSet")
    parser.add_argument("--cache-agent-cpu-request", default="100m", metavar="QUANTITY",
                        help="CPU request of every cache agent container (default %(default)s)")
    parser.add_argument("--cache-agent-cpu-limit", default="1", metavar="QUANTITY",
                        help="CPU limit of every cache agent container (default %(default)s)")
    parser.add_argument("--cache-agent-memory-overhead", default="128Mi", metavar="QUANTITY",
                        help="the agent's own memory on top of the cache's memoryBudget: its memory request and "
                             "limit are memoryBudget + this (default %(default)s)")
    add_dataset_cache_flags(parser)
    parser.add_argument("--no-podgroups", action="store_true",
                        help="do not watch PodGroups (scheduler-plugins/Volcano CRDs not installed)")
    parser.add_argument("--snapshot-namespace", default=None,
                        help="namespace where runtime snapshots are kept; users must not be able to write there "
                             "(default: $POD_NAMESPACE, else --leader-elect-namespace, else trainguard-system)")
    parser.add_argument("--policy-status-interval", type=float, default=2.0, metavar="SECONDS",
                        help="at most one status write per TrainJobPolicy per this many seconds (default %(default)s)")
    parser.add_argument("--policy-rescan-interval", type=seconds_or_never, default=3600.0, metavar="SECONDS",
                        help="check every unfinished TrainJob against the policies again this often, a safety net "
                             "for a change no watch delivered (default %(default)s; 0: never)")
    parser.add_argument("--graceful-shutdown-timeout", type=float, default=30.0,
                        help="seconds in-flight reconciles may take to finish on SIGTERM before they are cancelled")
    parser.add_argument("--log-level", default="INFO")

    def run(args: argparse.Namespace) -> int:
        configure_logging(args.log_level)
        try:
            return asyncio.run(serve_controller(args))
        except ValueError as err:
            log.error("%s", err)
            return 2

    return run


def agent_resources(args: argparse.Namespace) -> Any:
    """The agents' ``AgentResources`` from the flags; raises ``ValueError`` naming a bad one."""
    from trainguard.controller.reconcile.cache_daemonset import AgentResources

    return AgentResources(args.cache_agent_cpu_request, args.cache_agent_cpu_limit, args.cache_agent_memory_overhead)


def _host_port(text: str) -> tuple[str, int] | None:
    if text in ("0", ""):
        return None
    host, _, port = text.rpartition(":")
    return host, int(port)


async def serve_controller(args: argparse.Namespace) -> int:
    # Imported here, not at the top: the CLI loads every subcommand's ``configure`` for --help, and the
    # reconciler pulls in the whole runtime framework, which ``trainguard render --help`` does not need.
    from trainguard.controller.reconcile.controller import Controller, Settings

    identity = args.leader_elect_identity or f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"
    election = None
    if args.leader_elect:
        election = ElectionConfig(
            name=args.leader_elect_lease_name,
            namespace=args.leader_elect_namespace or os.environ.get("POD_NAMESPACE") or "trainguard-system",
            identity=identity,
            lease_duration=args.leader_elect_lease_duration,
            renew_deadline=args.leader_elect_renew_deadline,
            retry_period=args.leader_elect_retry_period,
        )
    stop = stop_event()

    metrics = Metrics()
    sources = dataset_cache_sources(args)
    log.info("DatasetCache sources: %s", sources.describe())
    agents = dataset_cache_agents(args)
    log.info("DatasetCache agents: %s", agents.describe())
    resources = agent_resources(args)
    kube = CountingKubeClient(load_config(args.kubeconfig), user_agent="trainguard-controller")
    controller = Controller(
        kube,
        Settings(workers=args.workers, namespace=args.namespace, cache_agent_image=args.cache_agent_image,
                 watch_podgroups=not args.no_podgroups, dataset_cache_sources=sources,
                 dataset_cache_agents=agents, cache_agent_resources=resources,
                 policy_status_interval=args.policy_status_interval,
                 policy_rescan_interval=args.policy_rescan_interval,
                 snapshot_namespace=(args.snapshot_namespace or os.environ.get("POD_NAMESPACE")
                                     or args.leader_elect_namespace or "trainguard-system")),
        metrics,
        identity,
    )
    runner = None
    address = _host_port(args.metrics_bind_address)
    if address is not None:
        runner = await serve(metrics, address[0], address[1], probe=controller.probe,
                             before_scrape=controller.observe_queue)
    try:
        controller.start_caches()
        synced = asyncio.create_task(controller.wait_synced())
        stopped = asyncio.create_task(stop.wait())
        await asyncio.wait({synced, stopped}, return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        if stop.is_set():
            synced.cancel()
            return 0
        log.info("caches synced")
        elector = LeaderElector(election, KubeLease(kube, election)) if election is not None else None
        return await lead(controller, elector, stop, metrics, args.graceful_shutdown_timeout)
    finally:
        await controller.stop_caches()
        if runner is not None:
            await runner.cleanup()
        await kube.close()


async def lead(controller: Any, elector: Any, stop: asyncio.Event, metrics: Metrics, grace: float) -> int:
    """Reconcile while leading, until ``stop``: campaign (``elector``; None means leader election is off), run the
    workers, and on a lost Lease cancel them at once and campaign again. Returns the exit status (0)."""
    while True:
        if elector is not None and not await elector.acquire(stop):
            return 0
        metrics.leader.set(1)
        log.info("starting workers")
        controller.start_workers()
        lost = await elector.keep(stop) if elector is not None else await _wait(stop)
        if not lost:
            break
        # Another replica may be reconciling already: stop at once, do not finish in-flight work.
        log.warning("leadership lost: cancelling in-flight reconciles, campaigning again")
        await controller.abort_workers()
        metrics.leader.set(0)
        metrics.leadership_lost.inc()
    log.info("stopping: finishing in-flight reconciles (at most %.0fs)", grace)
    await controller.shutdown_workers(grace=grace)
    metrics.leader.set(0)
    if elector is not None:
        await elector.release()
    return 0


async def _wait(stop: asyncio.Event) -> bool:
    """Without leader election leadership is never lost: wait for the stop signal."""
    await stop.wait()
    return False


class KubeLease:
    """``leader.LeaseAPI`` on the real apiserver."""

    def __init__(self, kube: CountingKubeClient, election: ElectionConfig) -> None:
        self._kube = kube
        self._election = election

    async def get(self) -> dict | None:
        try:
            return await self._kube.get(LEASES, self._election.name, self._election.namespace)
        except NotFound:
            return None

    async def create(self, lease: dict) -> dict:
        try:
            return await self._kube.create(LEASES, lease, self._election.namespace)
        except AlreadyExists as err:
            raise Conflict(str(err)) from err

    async def replace(self, lease: dict) -> dict:
        try:
            return await self._kube.replace(LEASES, lease)
        except ApiConflict as err:
            raise Conflict(str(err)) from err
