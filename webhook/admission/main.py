"""``trainguard webhook``: serve the admission webhooks over HTTPS, with health and metrics on a plain-HTTP port.

Startup order, so that nothing is served half-ready:

1. the health port (``/healthz`` answers at once; ``/readyz`` says 503 until 2 and 3 are done);
2. the informer caches start (admission reads cluster state only from them);
3. the serving certificate: from the rotator's Secret (default) or from ``--cert-dir`` (externally provided,
   only watched); the HTTPS port opens only once a certificate is loaded;
4. the HTTPS port.

Before any of it: the soft open-files limit is raised to the hard limit (both logged), the admission port's
connection cap is lowered to fit what that leaves, warnings and the event loop's errors are rate-limited, and glibc
is told to return large blocks to the system (``process.py``, ``ratelimit.py``). Both ports are ``GatedSite``
listeners (``connections.py``): a connection cap, TLS handshake and request-head deadlines.

SIGTERM/SIGINT: after `--shutdown-delay` seconds of draining (still serving, every response closing its connection),
stop accepting, wait for the client to close the connections it kept alive (``drain``: never closed from this side,
at most ``--idle-timeout`` + ``--read-timeout``), finish in-flight reviews, then exit 0.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import re
import sys
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Awaitable, Callable

from aiohttp import web

from trainguard.process import configure_logging, raise_nofile_limit, stop_event
from trainguard.webhook.admission.budget import DEFAULT_BODY_BUDGET_BYTES, BudgetSettings
from trainguard.webhook.admission.certs import Lifetimes, service_dns_names
from trainguard.webhook.admission.connections import (
    DEFAULT_HEADER_TIMEOUT,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_TLS_HANDSHAKE_TIMEOUT,
    ConnectionLimits,
    ConnectionMetrics,
    GatedSite,
)
from trainguard.webhook.admission.metrics import AdmissionMetrics
from trainguard.webhook.admission.process import MemoryReturner, connection_cap
from trainguard.webhook.admission.ratelimit import DEFAULT_LOG_INTERVAL, RateLimitedFilter, RateLimiter, rate_limited_exception_handler
from trainguard.webhook.admission.rotator import RotatorSettings, SecretRotator
from trainguard.webhook.admission.routes import DEFAULT_POLICY_MODULE, bind_routes
from trainguard.webhook.admission.server import (
    DEFAULT_IDLE_TIMEOUT,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_POLICY_TIMEOUT,
    DEFAULT_POLICY_WORKERS,
    DEFAULT_READ_TIMEOUT,
    AdmissionHandler,
    Readiness,
    ServerSettings,
    health_app,
)
from trainguard.webhook.admission.tls import CertDirWatcher, ServingCertificate
from trainguard.webhook.cli import Run
from trainguard.webhook.dataset_cache_flags import add_dataset_cache_flags, dataset_cache_agents, dataset_cache_sources
from trainguard.webhook.kube.client import KubeClient
from trainguard.webhook.kube.config import load_config
from trainguard.webhook.kube.snapshot import ClusterCaches
from trainguard.webhook.kube.served import unserved
from trainguard.webhook.policy.dataset_cache import DatasetCacheSources
from trainguard.webhook.policy.verdict import ClusterSnapshot

log = logging.getLogger("trainguard.admission")

SA_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h|d)$")


def duration(text: str) -> timedelta:
    """``90d``, ``8760h``, ``10m``, ``30s``: the spellings the flags accept."""
    m = _DURATION.match(text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"not a duration (e.g. 90d, 12h, 10m, 30s): {text!r}")
    value, unit = float(m.group(1)), m.group(2)
    return timedelta(**{{"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}[unit]: value})


def default_namespace() -> str:
    try:
        return SA_NAMESPACE_FILE.read_text().strip() or "trainguard-system"
    except OSError:
        return "trainguard-system"


def configure(parser: argparse.ArgumentParser) -> Run:
    parser.description = "Serve trainguard's mutating and validating admission webhooks (AdmissionReview v1 over HTTPS)."
    net = parser.add_argument_group("listeners")
    net.add_argument("--bind-address", default="0.0.0.0", help="address for both ports (default 0.0.0.0)")
    net.add_argument("--port", type=int, default=9443, help="HTTPS admission port (default 9443)")
    net.add_argument("--health-port", type=int, default=8081, help="plain-HTTP /healthz, /readyz, /metrics (default 8081)")
    net.add_argument("--max-body-bytes", type=int, default=DEFAULT_MAX_BODY_BYTES, help="larger reviews get HTTP 413 (default 8 MiB)")
    net.add_argument("--read-timeout", type=float, default=DEFAULT_READ_TIMEOUT, help="seconds to receive a body, else 408 (default 10)")
    net.add_argument("--idle-timeout", type=float, default=DEFAULT_IDLE_TIMEOUT, help="close connections idle this long (default 120 s)")
    net.add_argument("--max-connections", type=int, default=DEFAULT_MAX_CONNECTIONS,
                     help="admission connections open at once; at the cap a new one replaces the oldest that has not sent a "
                          "request, or is closed at accept, before TLS (default 1024; lowered to fit the open-files limit)")
    net.add_argument("--tls-handshake-timeout", type=float, default=DEFAULT_TLS_HANDSHAKE_TIMEOUT,
                     help="seconds for a client to finish the TLS handshake (default 5)")
    net.add_argument("--header-timeout", type=float, default=DEFAULT_HEADER_TIMEOUT,
                     help="seconds for a complete request head, from the handshake or the next request's first byte (default 10)")
    net.add_argument("--body-budget-bytes", type=int, default=DEFAULT_BODY_BUDGET_BYTES,
                     help="bytes of request bodies held at once; a review that cannot get its share in --read-timeout gets "
                          "503 (default 32 MiB; bodies over 1 MiB share 75%% of it)")
    net.add_argument("--shutdown-delay", type=float, default=0.0,
                     help="seconds to keep serving after SIGTERM, each response closing its connection, before the "
                          "listeners close (default 0; the chart sets 5 for rolling updates)")
    net.add_argument("--health-max-connections", type=int, default=HEALTH_MAX_CONNECTIONS,
                     help="connections open at once on the health port (default 128)")

    kube = parser.add_argument_group("cluster")
    kube.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)")

    pol = parser.add_argument_group("policy")
    pol.add_argument("--on-policy-error", choices=["deny", "allow"], default="deny",
                     help="an exception inside a policy: deny (AdmissionReview error, code 500) or allow with a warning")
    pol.add_argument("--policy-timeout", type=float, default=DEFAULT_POLICY_TIMEOUT,
                     help="seconds one review's policy work may take; then it is answered as a policy error (default 3)")
    pol.add_argument("--policy-workers", type=int, default=DEFAULT_POLICY_WORKERS,
                     help="threads running policy work off the event loop (default 4)")
    pol.add_argument("--policy-module", default=DEFAULT_POLICY_MODULE,
                     help="module providing the six policy functions (default trainguard.webhook.policy.pipeline; for tests and extensions)")
    pol.add_argument("--multikueue-dispatcher", action="append", default=[], metavar="USERNAME",
                     help="on a MultiKueue worker: the username the manager's MultiKueue kubeconfig authenticates as "
                          "(repeatable). TrainJobs it creates with Kueue's multikueue-origin label keep the manager's "
                          "policy decisions; this cluster's policies still validate them (default: none)")
    add_dataset_cache_flags(parser)

    certs = parser.add_argument_group("certificates")
    certs.add_argument("--cert-dir", default=None, help="use tls.crt/tls.key provided here (e.g. cert-manager); only watched, never written")
    certs.add_argument("--cert-dir-poll", type=float, default=10.0, help="seconds between looks at --cert-dir (default 10)")
    certs.add_argument("--namespace", default=None, help="trainguard's namespace (default: the service account's, else trainguard-system)")
    certs.add_argument("--service-name", default="trainguard-webhook", help="Service in front of the webhook; its DNS names go in the certificate")
    certs.add_argument("--cert-secret", default="trainguard-webhook-cert", help="Secret holding the CA and serving certificate")
    certs.add_argument("--cert-dns-name", action="append", default=[], help="extra DNS name for the certificate (repeatable)")
    certs.add_argument("--cert-ip", action="append", default=[], help="IP address for the certificate, e.g. 127.0.0.1 (repeatable)")
    certs.add_argument("--ca-lifetime", type=duration, default=Lifetimes.ca, help="default 3650d")
    certs.add_argument("--cert-lifetime", type=duration, default=Lifetimes.leaf, help="default 365d")
    certs.add_argument("--cert-renew-before", type=duration, default=Lifetimes.renew_before, help="renew this long before expiry (default 90d)")
    certs.add_argument("--ca-propagation", type=duration, default=Lifetimes.ca_propagation,
                       help="after a CA renewal, keep signing with the old CA this long (default 10m)")
    certs.add_argument("--cert-refresh-interval", type=duration, default=timedelta(minutes=1), help="how often to re-read the Secret (default 1m)")
    certs.add_argument("--mutating-configuration", default="trainguard-mutating", help="MutatingWebhookConfiguration to inject the CA into ('' = none)")
    certs.add_argument("--validating-configuration", default="trainguard-validating", help="ValidatingWebhookConfiguration to inject the CA into ('' = none)")

    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    parser.add_argument("--log-rate-interval", type=float, default=DEFAULT_LOG_INTERVAL,
                        help="at most one warning/error line of a kind per this many seconds, with a count of those left out "
                             "(default 10; 0 = no limit)")

    def run(args: argparse.Namespace) -> int:
        configure_logging(args.log_level)
        limiter = RateLimiter(args.log_rate_interval)
        for handler in logging.getLogger().handlers:
            handler.addFilter(RateLimitedFilter(limiter))
        nofile = raise_nofile_limit()
        args.max_connections = connection_cap(args.max_connections, nofile.soft)
        log.info("open-files limit", extra={"soft_before": nofile.soft_before, "soft": nofile.soft, "hard": nofile.hard,
                                            "max_connections": args.max_connections})
        try:
            return asyncio.run(serve(args))
        except StartupError as e:
            log.error("startup failed: %s", e)
            return 2

    return run


class StartupError(Exception):
    pass


HEALTH_MAX_CONNECTIONS = 128
# How often to look whether a burst of connections or bodies has passed, to hand freed memory back.
MEMORY_CHECK_INTERVAL = 15.0


async def serve(args: argparse.Namespace) -> int:
    try:
        routes = bind_routes(args.policy_module)
    except (ImportError, LookupError) as e:
        raise StartupError(f"policy module {args.policy_module}: {e}") from e
    try:
        limits = ConnectionLimits(args.max_connections, args.tls_handshake_timeout, args.header_timeout)
        health_limits = ConnectionLimits(args.health_max_connections, args.tls_handshake_timeout, args.header_timeout)
        settings = ServerSettings(
            max_body_bytes=args.max_body_bytes, read_timeout=args.read_timeout, idle_timeout=args.idle_timeout,
            on_policy_error=args.on_policy_error, policy_timeout=args.policy_timeout, policy_workers=args.policy_workers,
            body_budget=BudgetSettings(total_bytes=args.body_budget_bytes),
        )
    except ValueError as e:
        raise StartupError(str(e)) from e
    asyncio.get_running_loop().set_exception_handler(rate_limited_exception_handler(RateLimiter(args.log_rate_interval)))
    memory = MemoryReturner()
    memory.fix_mmap_threshold()

    metrics = AdmissionMetrics()
    connection_metrics = ConnectionMetrics(metrics.registry)

    def on_reload(leaf) -> None:  # type: ignore[no-untyped-def]
        metrics.cert_reloads.inc()
        metrics.cert_not_after.set(leaf.not_valid_after_utc.timestamp())

    serving = ServingCertificate(on_reload=on_reload)
    try:
        kube = KubeClient(load_config(args.kubeconfig))
    except Exception as e:  # the kubernetes loader raises its own ConfigException and friends
        raise StartupError(f"cannot load cluster configuration: {e}") from e

    stop = stop_event()
    draining = asyncio.Event()

    caches = ClusterCaches(kube, ClusterSnapshot)
    metrics.watch_caches(caches.sync_state)
    runners: list[web.AppRunner] = []
    background: list[asyncio.Task[None]] = []
    try:
        readiness = Readiness(lambda: serving.loaded, caches.sync_state, lambda: unserved(caches.informers.values()))
        health = web.AppRunner(health_app(readiness, metrics), access_log=None)
        await health.setup()
        runners.append(health)
        await GatedSite(health, args.bind_address, args.health_port, ssl_context=None, limits=health_limits,
                        metrics=connection_metrics, listener="health").start()
        caches.start()

        if args.cert_dir:
            watcher = CertDirWatcher(serving, args.cert_dir, interval=args.cert_dir_poll)
            while not watcher.check():
                if await _stopped(stop, 1.0):
                    return 0
            background.append(asyncio.create_task(watcher.run()))
        else:
            namespace = args.namespace or default_namespace()
            try:
                lifetimes = Lifetimes(args.ca_lifetime, args.cert_lifetime, args.cert_renew_before, args.ca_propagation)
            except ValueError as e:
                raise StartupError(str(e)) from e
            rotator = SecretRotator(
                kube,
                serving,
                RotatorSettings(
                    namespace=namespace,
                    secret_name=args.cert_secret,
                    dns_names=[*service_dns_names(args.service_name, namespace), *args.cert_dns_name],
                    ip_addresses=list(args.cert_ip),
                    mutating_configuration=args.mutating_configuration or None,
                    validating_configuration=args.validating_configuration or None,
                    lifetimes=lifetimes,
                    refresh_interval=args.cert_refresh_interval.total_seconds(),
                ),
                clock=lambda: datetime.now(timezone.utc),
            )
            delay = 0.5
            while True:
                try:
                    await rotator.reconcile_once()
                    break
                except Exception as e:  # keep trying: the apiserver may not be reachable yet
                    log.warning("initial certificate setup failed: %s: %s", type(e).__name__, e)
                    if await _stopped(stop, delay):
                        return 0
                    delay = min(delay * 2, 30.0)
            background.append(asyncio.create_task(rotator.run()))

        handler = AdmissionHandler(
            routes, with_admin_settings(caches.snapshot, dataset_cache_sources=dataset_cache_sources(args),
                                        dataset_cache_agents=dataset_cache_agents(args),
                                        multikueue_dispatchers=frozenset(args.multikueue_dispatcher)),
            metrics, settings,
        )
        https = handler.runner()
        # The apiserver pools connections per webhook Service, not per endpoint: one to a replica that is going
        # away is reused until that replica closes it, and a request sent on it as the listener closes ends in EOF
        # ("failed calling webhook"), a lost admission during every rolling update. While draining, each response
        # tells the apiserver to close its connection, so its next request dials a replica still in the endpoints.
        https.app.on_response_prepare.append(_close_when_draining(draining))
        await https.setup()
        runners.insert(0, https)
        site = GatedSite(https, args.bind_address, args.port, ssl_context=serving.context, limits=limits,
                         metrics=connection_metrics, listener="admission", backlog=512)
        await site.start()
        background.append(asyncio.create_task(_return_memory(memory, site, handler)))
        log.info("serving admission webhooks", extra={"port": args.port, "health_port": args.health_port, "paths": sorted(routes)})
        await stop.wait()
        if args.shutdown_delay > 0:
            log.info("draining", extra={"seconds": args.shutdown_delay})
            await drain(site, draining, args.shutdown_delay, linger=args.idle_timeout + args.read_timeout)
        log.info("shutting down")
        return 0
    finally:
        for task in background:
            task.cancel()
        for runner in runners:
            await runner.cleanup()
        await caches.stop()
        await kube.close()


def with_admin_settings(snapshot: Callable[[], ClusterSnapshot], **settings: Any) -> Callable[[], ClusterSnapshot]:
    """``snapshot`` with the admin's settings (from flags, not from the cluster: the DatasetCache sources and agent
    settings, the MultiKueue dispatchers) filled in; the copy is made once per cache change, not per request."""
    last: list[ClusterSnapshot | None] = [None, None]

    def current() -> ClusterSnapshot:
        base = snapshot()
        if base is not last[0]:
            last[0], last[1] = base, replace(base, **settings)
        return last[1]  # type: ignore[return-value]

    return current


def with_dataset_cache_sources(
    snapshot: Callable[[], ClusterSnapshot], sources: DatasetCacheSources,
) -> Callable[[], ClusterSnapshot]:
    return with_admin_settings(snapshot, dataset_cache_sources=sources)


async def _return_memory(memory: MemoryReturner, site: GatedSite, handler: AdmissionHandler) -> None:
    """After a burst (many connections gone, or megabytes of bodies held and released), trim the heap."""
    while True:
        await asyncio.sleep(MEMORY_CHECK_INTERVAL)
        connections_gone = site.gate.take_peak() - site.gate.open
        bodies_held = handler.budget.take_peak()
        if connections_gone >= 32 or bodies_held >= 4 * 1024 * 1024:
            memory.trim()


async def drain(site: GatedSite, draining: asyncio.Event, delay: float, linger: float) -> None:
    """A replica's way out of a rolling update without failing a review.

    For ``delay`` seconds everything is served and every response closes its connection (``draining``): the
    apiserver's endpoints catch up with the replica's removal and each pooled connection that carries a request is
    closed by the apiserver after its answer. Then the listener closes, but the kept-alive connections the
    apiserver has not used since stay open until the apiserver closes them itself (on its next request's
    ``Connection: close``, or after its 90 s idle timeout), at most ``linger`` seconds. Closing one from this side
    is never safe in HTTP/1.1: the apiserver can pick an idle pooled connection and write a review on it just as
    the close arrives, and Go does not resend a POST that was written: the review fails with "EOF". Its pool
    hands out the most recently used connection first, so one to this replica can sit idle under one to another
    replica for the whole delay and be picked only when two reviews overlap."""
    draining.set()
    await asyncio.sleep(delay)
    await site.stop()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + linger
    while site.gate.open > 0 and loop.time() < deadline:
        await asyncio.sleep(0.1)
    if site.gate.open:
        log.info("closing connections left open", extra={"connections": site.gate.open})


def _close_when_draining(draining: asyncio.Event) -> Callable[[web.Request, web.StreamResponse], Awaitable[None]]:
    async def prepare(_: web.Request, response: web.StreamResponse) -> None:
        if draining.is_set():
            response.force_close()
            # aiohttp computes its own Connection header before this hook runs, so force_close() alone closed the
            # connection after a response that did not say so: the apiserver put it back in its pool and could
            # write its next review on it as it closed ("EOF"). The header is written after the hook.
            response.headers["Connection"] = "close"

    return prepare


async def _stopped(stop: asyncio.Event, delay: float) -> bool:
    try:
        await asyncio.wait_for(stop.wait(), delay)
        return True
    except asyncio.TimeoutError:
        return False


if __name__ == "__main__":
    from trainguard.webhook.cli import main

    sys.exit(main(["webhook", *sys.argv[1:]]))
