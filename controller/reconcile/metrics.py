"""Prometheus metrics and the plain-HTTP health endpoints of ``trainguard controller``.

One port serves ``/metrics`` (Prometheus text format), ``/healthz`` (the process and its event loop answer) and
``/readyz`` (the watch caches have synced; a standby is ready too, since it can take over at once). The registry
is per instance, so tests can run several controllers in one process.

API requests per reconcile are counted by ``CountingKubeClient``: every request goes through
``KubeClient.request``, and the reconcile in progress on this task owns a counter in a context variable.
Watches and list calls of the caches run in their own tasks with no counter and are not counted.
"""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from trainguard.process.probes import Probe, probe_app, serve_probes
from trainguard.webhook.kube.client import KubeClient

if TYPE_CHECKING:  # not imported at run time: it pulls in the policy model, which `--help` does not need
    from trainguard.controller.reconcile.policy_status import Counts

_requests: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar("trainguard_api_requests", default=None)


class CountingKubeClient(KubeClient):
    """``KubeClient`` that adds one to the current reconcile's request counter per API call."""

    async def request(self, *args: Any, **kwargs: Any) -> Any:
        counter = _requests.get()
        if counter is not None:
            counter[0] += 1
        return await super().request(*args, **kwargs)


def start_counting() -> list[int]:
    """Begin counting API requests made from this task; read the returned cell at the end."""
    cell = [0]
    _requests.set(cell)
    return cell


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.reconciles = Counter("trainguard_reconcile_total", "Reconciles by kind and result (success, error, requeue).",
                                  ["kind", "result"], registry=r)
        self.duration = Histogram("trainguard_reconcile_duration_seconds", "Time spent in one reconcile.", ["kind"],
                                  buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
                                  registry=r)
        self.errors = Counter("trainguard_reconcile_errors_total", "Failed reconciles by reason.", ["kind", "reason"],
                              registry=r)
        self.api_requests = Histogram("trainguard_reconcile_api_requests", "API requests made by one reconcile.",
                                      ["kind"], buckets=(0, 1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 50), registry=r)
        self.queue_depth = Gauge("trainguard_workqueue_depth", "Keys waiting in the work queue.", registry=r)
        self.queue_in_flight = Gauge("trainguard_workqueue_in_flight", "Keys being reconciled now.", registry=r)
        self.queue_retries = Counter("trainguard_workqueue_retries_total", "Keys requeued with backoff.", registry=r)
        self.leader = Gauge("trainguard_leader", "1 while this replica holds the leader Lease.", registry=r)
        self.leadership_lost = Counter("trainguard_leadership_lost", "Times this replica lost the Lease and went "
                                       "back to campaigning.", registry=r)
        self.policy_rescans = Counter("trainguard_policy_rescans_total", "Periodic policy rescans started "
                                      "(--policy-rescan-interval).", registry=r)
        self.policy_rescan_jobs = Gauge("trainguard_policy_rescan_jobs", "Unfinished TrainJobs the last periodic "
                                        "policy rescan queued.", registry=r)
        self._policy_results: Callable[[], Mapping[str, Counts]] = dict
        r.register(_PolicyResults(lambda: self._policy_results()))

    def watch_policy_results(self, counts: Callable[[], Mapping[str, Counts]]) -> None:
        """``trainguard_policy_results`` is read from ``counts`` at scrape time: the policy status tally's own
        counts (no second evaluation), one entry per existing policy, so a deleted policy leaves no series."""
        self._policy_results = counts

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _PolicyResults(Collector):
    """``trainguard_policy_results{policy,result}``: unfinished TrainJobs a policy selects, by result (pass, warn,
    fail). Built afresh on each scrape rather than kept in a Gauge, so no series outlives its policy; three series
    per policy."""

    NAME = "trainguard_policy_results"

    def __init__(self, counts: Callable[[], Mapping[str, Counts]]) -> None:
        self._counts = counts

    def describe(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(self.NAME, self._HELP, labels=["policy", "result"])

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(self.NAME, self._HELP, labels=["policy", "result"])
        for policy, c in sorted(self._counts().items()):
            for result, value in (("pass", c.passed), ("warn", c.warned), ("fail", c.failed)):
                family.add_metric([policy, result], value)
        yield family

    _HELP = "Unfinished TrainJobs a TrainJobPolicy selects, by result (the policy's status.trainJobs)."


async def serve(metrics: Metrics, host: str, port: int, probe: Callable[[], Probe],
                before_scrape: Callable[[], None] = lambda: None) -> web.AppRunner:
    """Start the HTTP endpoints; ``probe`` answers /readyz. Returns the runner (``await runner.cleanup()`` to stop)."""

    def scrape() -> bytes:
        before_scrape()
        return metrics.render()

    return await serve_probes(probe_app(ready=probe, metrics=scrape), host, port)
