"""Wiring: watch caches -> work queue -> N workers -> reconcilers, plus leader election and shutdown.

Event handlers only turn a watch event into a queue key (they never block):
* TrainJob -> itself (DELETED also -> its runtime snapshot, for garbage collection); JobSet / ConfigMap / PodGroup
  -> their controlling TrainJob owner; a runtime snapshot (``--snapshot-namespace``) -> itself: a snapshot whose
  TrainJob is gone is deleted, and the initial list makes this the orphan sweep at every start;
* TrainJobPolicy, or a Namespace's labels -> every unfinished TrainJob (in that namespace): it may be blocked or
  allowed now, or warned about while it runs (``enforcement``); not for the controller's own status write (same
  generation, labels and annotations). A TrainJobPolicy also -> itself, and a TrainJob whose per-policy results
  changed (or that finished or was deleted) -> the policies concerned, for their status, coalesced and at most one
  write per policy per ``--policy-status-interval`` (``policy_status``); a Kueue Workload -> its controlling TrainJob (a
  blocked job's Workload is deactivated once Kueue creates it, ``quota``);
* TrainingRuntime / ClusterTrainingRuntime -> the unfinished TrainJobs that reference it (a runtime created after
  its jobs unblocks them at once instead of at the next backoff);
* DatasetCache -> itself and the TrainJobs in its namespace that name it; DaemonSet / agent Pod -> their cache;
  a trainer Pod still held by the scheduling gate ``trainguard.io/dataset-cache-warm`` -> the cache it waits for
  (its label ``trainguard.io/waits-for-dataset-cache``; see ``gates``).

Caches run on every replica (a standby is warm and can take over at once); workers run only on the leader. The
initial list delivers ADDED for every object, so a new leader re-reconciles everything: nothing is lost when a
leader dies mid-burst, and nothing is duplicated because every child has a fixed name and is applied
idempotently. A replica that loses the Lease aborts its workers and campaigns again; if it leads again it starts
from a fresh queue holding every object in its caches (``start_workers``), as a new leader would.

Secrets are not watched (the controller may not read them; see ``trainjob``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from trainguard.controller.reconcile.cache_daemonset import COMPONENT, LABEL_CACHE, LABEL_COMPONENT, AgentResources
from trainguard.controller.reconcile.datasetcache import DatasetCacheReconciler
from trainguard.controller.reconcile.enforcement import rechecked_trainjobs
from trainguard.controller.reconcile.quota import JOB_UID_LABEL, WorkloadIndex, workload_view
from trainguard.controller.reconcile.events import EventRecorder
from trainguard.controller.reconcile.gates import gated_pod_view, pods_to_cache_keys
from trainguard.controller.reconcile.metrics import Metrics, start_counting
from trainguard.controller.reconcile.policy_status import (
    Counts, PolicyStatusReconciler, PolicyTally, only_status_changed,
)
from trainguard.controller.reconcile.queue import ShutDown, WorkQueue
from trainguard.controller.reconcile import readiness
from trainguard.webhook.api.apimachinery import controller_owner
from trainguard.webhook.api.constants import (
    CLUSTER_TRAINING_RUNTIME_KIND,
    DATASET_CACHE_KIND,
    TRAINER_GROUP,
    TRAINING_RUNTIME_KIND,
    TRAINJOB_KIND,
    TRAINJOB_POLICY_KIND,
)
from trainguard.webhook.api.views import KubeObject, TrainJob, object_labels
from trainguard.controller.reconcile.trainjob import (
    ReconcileError, Result, TrainJobCaches, TrainJobReconciler, trainjobs_using_runtime,
)
from trainguard.webhook.kube.client import KubeClient
from trainguard.webhook.kube.errors import ApiError, NotFound
from trainguard.webhook.kube.informer import CacheEvent, Informer, object_key, strip_managed_fields
from trainguard.webhook.kube.resources import (
    CLUSTER_TRAINING_RUNTIMES,
    CONFIGMAPS,
    COSCHEDULING_PODGROUPS,
    DAEMONSETS,
    DATASET_CACHES,
    JOBSETS,
    PODS,
    TRAINING_RUNTIMES,
    TRAINJOBS,
    VOLCANO_PODGROUPS,
    WORKLOADS,
)
from trainguard.webhook.kube.snapshot import SNAPSHOT_FIELDS, ClusterCaches
from trainguard.process.probes import Probe
from trainguard.webhook.policy.dataset_cache import DatasetCacheSources
from trainguard.webhook.policy.dataset_cache_agents import DatasetCacheAgents
from trainguard.webhook.policy.verdict import ClusterSnapshot
from trainguard.webhook.runtime.dataset_cache import WAITS_FOR_LABEL
from trainguard.webhook.runtime.names import DATASET_CACHE_ANNOTATION
from trainguard.webhook.runtime.snapshot import LABEL_OF_UID, snapshot_name

log = logging.getLogger(__name__)

TRAINJOB = TRAINJOB_KIND
DATASET_CACHE = DATASET_CACHE_KIND
TRAINJOB_POLICY = TRAINJOB_POLICY_KIND
RUNTIME_SNAPSHOT = "RuntimeSnapshot"
# What the Enforce check reads; runtimes and DatasetCaches come from the reconciler's own caches. Not JobSets: the
# check never reads them, and a field that changes with every reconcile made each reconcile rebuild the snapshot's
# copy of every JobSet (quadratic in a burst of TrainJobs).
POLICY_VIEW_FIELDS = ("training_runtimes", "cluster_training_runtimes", "policies", "namespace_labels",
                      "dataset_caches")
Key = tuple[str, str, str]  # (kind, namespace, name)


# ``kubectl apply`` stores the whole applied object here - for a Secret, its data in clear.
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def _metadata_only(obj: dict[str, Any]) -> dict[str, Any]:
    obj = strip_managed_fields(obj)
    out = {k: v for k, v in obj.items() if k not in ("data", "stringData", "binaryData")}
    meta = KubeObject(out).metadata
    if LAST_APPLIED in meta.annotations:
        annotations = {k: v for k, v in meta.annotations.items() if k != LAST_APPLIED}
        out["metadata"] = {**meta.raw, "annotations": annotations}
    return out


def configmap_metadata_only(obj: dict[str, Any]) -> dict[str, Any]:
    """The ConfigMaps of the watched namespaces are cached for existence and owner only (a TrainJob's hostfile
    ConfigMap changing requeues the TrainJob); the controller never reads their data - users can write it. The runtime
    snapshots, whose data it does read, have their own cache in the snapshot namespace."""
    return _metadata_only(obj)


@dataclass
class Settings:
    workers: int = 5
    namespace: str | None = None  # None: all namespaces
    cache_agent_image: str = "ghcr.io/trainguard/trainguard:latest"
    watch_podgroups: bool = True
    # Where runtime snapshots live: the controller's own namespace, which users cannot write.
    snapshot_namespace: str = "trainguard-system"
    # Where DatasetCaches may read from (the admin's flags); the default refuses every hostPath source.
    dataset_cache_sources: DatasetCacheSources = field(default_factory=DatasetCacheSources)
    # What DatasetCaches may ask for their agents, and the agents' CPU and memory (the admin's flags).
    dataset_cache_agents: DatasetCacheAgents = field(default_factory=DatasetCacheAgents)
    cache_agent_resources: AgentResources = field(default_factory=AgentResources)
    # At most one status write per TrainJobPolicy per this many seconds (a burst of TrainJob events is coalesced).
    policy_status_interval: float = 2.0
    # Every this many seconds each unfinished TrainJob is checked against the policies again (0: never): a safety net
    # for a change no watch delivered (every input of the check is watched and rechecks at once).
    policy_rescan_interval: float = 3600.0


class Controller:
    def __init__(self, kube: KubeClient, settings: Settings, metrics: Metrics, identity: str) -> None:
        self.kube = kube
        self.settings = settings
        self.metrics = metrics
        self.queue: WorkQueue[Key] = WorkQueue()
        ns = settings.namespace

        def informer(resource: Any, **kw: Any) -> Informer:
            return Informer(kube, resource, namespace=None if not resource.namespaced else ns, **kw)

        self.trainjobs = informer(TRAINJOBS)
        self.jobsets = informer(JOBSETS)
        self.configmaps = informer(CONFIGMAPS, transform=configmap_metadata_only)
        self.snapshots = Informer(kube, CONFIGMAPS, namespace=settings.snapshot_namespace, label_selector=LABEL_OF_UID)
        self.training_runtimes = informer(TRAINING_RUNTIMES)
        self.cluster_training_runtimes = informer(CLUSTER_TRAINING_RUNTIMES)
        self.dataset_caches = informer(DATASET_CACHES)
        self.daemonsets = informer(DAEMONSETS, label_selector=f"{LABEL_COMPONENT}={COMPONENT}")
        self.agent_pods = informer(PODS, label_selector=f"{LABEL_COMPONENT}={COMPONENT}")
        # Trainer pods held until their DatasetCache is warm: metadata and scheduling gates only.
        self.gated_pods = informer(PODS, label_selector=WAITS_FOR_LABEL, transform=gated_pod_view)
        # Most clusters serve at most one of the two PodGroup kinds: an unserved one is an empty cache that keeps looking
        # (picked up once its CRD is installed), not a warning on every retry.
        self.podgroups = ([informer(COSCHEDULING_PODGROUPS, absent_ok=True), informer(VOLCANO_PODGROUPS, absent_ok=True)]
                          if settings.watch_podgroups else [])
        # Kueue's Workloads of jobs (optional: Kueue may not be installed), trimmed to what ``quota`` reads.
        self.workloads = informer(WORKLOADS, absent_ok=True, label_selector=JOB_UID_LABEL, transform=workload_view)
        self.workload_index = WorkloadIndex(self.workloads)
        # TrainJobPolicies and Namespace labels for the Enforce check, through the webhook's own snapshot builders.
        self.policy_view = ClusterCaches(
            kube, ClusterSnapshot, fields=[f for f in SNAPSHOT_FIELDS if f.name in POLICY_VIEW_FIELDS],
            shared={"training_runtimes": self.training_runtimes,
                    "cluster_training_runtimes": self.cluster_training_runtimes,
                    "dataset_caches": self.dataset_caches},
        )
        self.policies = self.policy_view.informers["policies"]
        self.namespaces = self.policy_view.informers["namespace_labels"]
        self._informers = [self.trainjobs, self.jobsets, self.configmaps, self.snapshots, self.training_runtimes,
                           self.cluster_training_runtimes, self.dataset_caches, self.daemonsets, self.agent_pods,
                           self.gated_pods, self.policies, self.namespaces, *self.podgroups, self.workloads]
        # PodGroup and Workload CRDs are optional (scheduler-plugins / Volcano / Kueue may not be installed): they do
        # not gate readiness.
        self._required = self._informers[: len(self._informers) - len(self.podgroups) - 1]

        events = EventRecorder(kube, identity)
        self.policy_status = PolicyStatusReconciler(
            kube, self.policies, PolicyTally(),
            lambda name, delay: self.queue.add_after((TRAINJOB_POLICY, "", name), delay),
            interval=settings.policy_status_interval)
        metrics.watch_policy_results(self.policy_results)
        self.trainjob_reconciler = TrainJobReconciler(
            kube,
            TrainJobCaches(
                trainjobs=self.trainjobs, jobsets=self.jobsets, snapshots=self.snapshots,
                training_runtimes=self.training_runtimes, cluster_training_runtimes=self.cluster_training_runtimes,
                dataset_caches=self.dataset_caches, cluster_snapshot=self.policy_view.snapshot,
                coscheduling_podgroups=self.podgroups[0] if self.podgroups else None,
                volcano_podgroups=self.podgroups[1] if self.podgroups else None,
                workloads=self.workload_index,
            ),
            events,
            snapshot_namespace=settings.snapshot_namespace,
            scope=settings.namespace,
            policy_results=self.policy_status,
        )
        self.cache_reconciler = DatasetCacheReconciler(
            kube, self.dataset_caches, self.daemonsets, self.agent_pods, events,
            agent_image=settings.cache_agent_image, gated_pods=self.gated_pods, trainjobs=self.trainjobs,
            sources=settings.dataset_cache_sources, agents=settings.dataset_cache_agents,
            resources=settings.cache_agent_resources,
        )
        self._wire_handlers()
        self._workers: list[asyncio.Task[None]] = []
        self._rescans: asyncio.Task[None] | None = None

    # ---- caches -------------------------------------------------------------------------------------------
    def _add(self, key: Key) -> None:
        # Always the current queue: a replica that leads again gets a fresh one (``start_workers``).
        self.queue.add(key)

    def _recheck_trainjobs(self, namespace: str | None = None) -> int:
        """Queue every unfinished TrainJob (in ``namespace`` when given) for the policy check; the number queued."""
        jobs = rechecked_trainjobs(self.trainjobs.items(), namespace)
        for ns, name in jobs:
            self._add((TRAINJOB, ns, name))
        return len(jobs)

    def _wire_handlers(self) -> None:
        add = self._add
        snapshot_namespace = self.settings.snapshot_namespace

        def trainjob_changed(ev: CacheEvent) -> None:
            add((TRAINJOB, *object_key(ev.obj)))
            if ev.type == "DELETED":
                uid = TrainJob(ev.obj).metadata.uid
                if uid:
                    add((RUNTIME_SNAPSHOT, snapshot_namespace, snapshot_name(uid)))
                    self.policy_status.forget(uid)

        self.trainjobs.add_handler(trainjob_changed)

        def snapshot_changed(ev: CacheEvent) -> None:
            if ev.type != "DELETED":
                add((RUNTIME_SNAPSHOT, *object_key(ev.obj)))

        self.snapshots.add_handler(snapshot_changed)

        def owned(ev: CacheEvent) -> None:
            owner = controller_owner(ev.obj, TRAINJOB_KIND, TRAINER_GROUP)
            if owner:
                add((TRAINJOB, object_key(ev.obj)[0], owner))

        def workload_changed(ev: CacheEvent) -> None:
            self.workload_index.update(ev.type, ev.obj)

        # Indexed before the owner is queued, so its reconcile finds the Workload.
        self.workloads.add_handler(workload_changed)
        for inf in (self.jobsets, self.configmaps, *self.podgroups, self.workloads):
            inf.add_handler(owned)

        def policy_changed(ev: CacheEvent) -> None:
            self.policy_status.mark([object_key(ev.obj)[1]])
            if ev.type == "MODIFIED" and only_status_changed(ev.old, ev.obj):
                return
            self._recheck_trainjobs()

        def namespace_changed(ev: CacheEvent) -> None:
            if ev.type == "ADDED" and object_key(ev.obj)[1] == snapshot_namespace:
                # The snapshot namespace created late: the jobs backing off on ControllerMisconfigured build now.
                self._recheck_trainjobs()
                return
            # Only label changes matter: a namespace that was just ADDED (or listed at start) holds no job this
            # replica has not queued anyway.
            if ev.type != "MODIFIED" or (ev.old is not None and object_labels(ev.old) == object_labels(ev.obj)):
                return
            self._recheck_trainjobs(object_key(ev.obj)[1])

        self.policies.add_handler(policy_changed)
        self.namespaces.add_handler(namespace_changed)

        def runtime_changed(ev: CacheEvent) -> None:
            if ev.type == "DELETED":
                return
            obj = dict(ev.obj)
            obj.setdefault("kind", TRAINING_RUNTIME_KIND if KubeObject(obj).metadata.namespace
                           else CLUSTER_TRAINING_RUNTIME_KIND)
            for ns, name in trainjobs_using_runtime(self.trainjobs, obj):
                add((TRAINJOB, ns, name))

        self.training_runtimes.add_handler(runtime_changed)
        self.cluster_training_runtimes.add_handler(runtime_changed)

        def cache_changed(ev: CacheEvent) -> None:
            ns, name = object_key(ev.obj)
            add((DATASET_CACHE, ns, name))
            for (job_ns, job_name), job in self.trainjobs.items():
                if job_ns == ns and TrainJob(job).metadata.annotations.get(DATASET_CACHE_ANNOTATION) == name:
                    add((TRAINJOB, job_ns, job_name))

        self.dataset_caches.add_handler(cache_changed)

        def agent_changed(ev: CacheEvent) -> None:
            cache = KubeObject(ev.obj).metadata.labels.get(LABEL_CACHE)
            if cache:
                add((DATASET_CACHE, object_key(ev.obj)[0], cache))

        self.daemonsets.add_handler(agent_changed)
        self.agent_pods.add_handler(agent_changed)

        def gated_pod_changed(ev: CacheEvent) -> None:
            if ev.type == "DELETED":
                return
            for ns, cache in pods_to_cache_keys([ev.obj]):
                add((DATASET_CACHE, ns, cache))

        self.gated_pods.add_handler(gated_pod_changed)

    def start_caches(self) -> None:
        for inf in self._informers:
            inf.start()

    @property
    def synced(self) -> bool:
        return all(inf.synced.is_set() for inf in self._required)

    async def wait_synced(self) -> None:
        await asyncio.gather(*(inf.synced.wait() for inf in self._required))

    def probe(self) -> Probe:
        """/readyz: the caches' own state and the snapshot namespace in the Namespace cache (no API call)."""
        states = [readiness.CacheState(inf.resource, inf.synced.is_set(), inf.not_served, inf.last_error)
                  for inf in self._required]
        where = self.settings.snapshot_namespace
        return readiness.probe(readiness.problems(states, snapshot_namespace=where,
                                                  snapshot_namespace_exists=self.namespaces.get(where) is not None))

    async def stop_caches(self) -> None:
        await asyncio.gather(*(inf.stop() for inf in self._informers))

    # ---- workers ------------------------------------------------------------------------------------------
    def start_workers(self) -> None:
        """Start reconciling. After ``abort_workers`` (leadership lost, then won again) the old queue is shut down:
        start from a fresh one holding every object the caches know, exactly what a newly started leader gets
        from the initial lists."""
        if self.queue.shutting_down:
            self.queue = WorkQueue()
            self.policy_status.reset()
            self.requeue_all()
        for i in range(self.settings.workers):
            self._workers.append(asyncio.create_task(self._worker(), name=f"reconcile-worker-{i}"))
        if self.settings.policy_rescan_interval > 0 and self._rescans is None:
            self._rescans = asyncio.create_task(self._rescan_periodically(), name="policy-rescan")

    async def shutdown_workers(self, grace: float | None = None) -> None:
        """Hand out no more keys, let every in-flight reconcile finish (at most ``grace`` seconds; None: no
        limit), then stop the workers. Reconciles still running after ``grace`` are cancelled, like
        controller-runtime's GracefulShutdownTimeout: a stuck API call must not keep the process from exiting."""
        try:
            await asyncio.wait_for(self.queue.shutdown(), grace)
        except TimeoutError:
            log.warning("in-flight reconciles did not finish within %.1fs; cancelling %s", grace,
                        sorted(self.queue.in_flight))
        await self.abort_workers()

    async def abort_workers(self) -> None:
        """Stop reconciling NOW: cancel in-flight reconciles (leadership lost - another replica may already be
        reconciling the same objects, so finishing ours would race it)."""
        if not self.queue.shutting_down:
            self.queue.begin_shutdown()
        tasks = [*self._workers, *([self._rescans] if self._rescans else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._workers.clear()
        self._rescans = None

    def requeue_all(self) -> None:
        for ns, name in self.trainjobs.keys():
            self._add((TRAINJOB, ns, name))
        for ns, name in self.dataset_caches.keys():
            self._add((DATASET_CACHE, ns, name))
        for ns, name in self.snapshots.keys():
            self._add((RUNTIME_SNAPSHOT, ns, name))
        for _, name in self.policies.keys():
            self._add((TRAINJOB_POLICY, "", name))

    def rescan(self) -> int:
        """Queue every unfinished TrainJob for the policy check (the same reconcile a policy change triggers: the
        webhook's own pure check, no second implementation); the number queued."""
        queued = self._recheck_trainjobs()
        self.metrics.policy_rescans.inc()
        self.metrics.policy_rescan_jobs.set(queued)
        return queued

    async def _rescan_periodically(self) -> None:
        # The first scan one interval after leading: starting to lead already queued every object.
        while True:
            await asyncio.sleep(self.settings.policy_rescan_interval)
            log.info("policy rescan: %d unfinished TrainJobs queued", self.rescan())

    def policy_results(self) -> dict[str, Counts]:
        """Each existing policy's counts, while leading: a standby evaluates nothing (its tally is empty or stale
        from an earlier term), so it exports none and a sum over replicas stays right."""
        if not self._workers:
            return {}
        return {name: self.policy_status.tally.counts(name) for _, name in self.policies.keys()}

    def observe_queue(self) -> None:
        self.metrics.queue_depth.set(len(self.queue))
        self.metrics.queue_in_flight.set(len(self.queue.in_flight))

    async def _worker(self) -> None:
        while True:
            try:
                key = await self.queue.get()
            except ShutDown:
                return
            try:
                await self._process(key)
            finally:
                self.queue.done(key)

    async def _process(self, key: Key) -> None:
        kind, namespace, name = key
        counter = start_counting()
        started = time.perf_counter()
        result_label = "success"
        try:
            if kind == TRAINJOB:
                result = await self.trainjob_reconciler.reconcile(namespace, name)
            elif kind == RUNTIME_SNAPSHOT:
                result = await self.trainjob_reconciler.collect_snapshot(name)
            elif kind == TRAINJOB_POLICY:
                await self.policy_status.reconcile(name)
                result = Result()
            else:
                result = await self.cache_reconciler.reconcile(namespace, name)
            self.queue.forget(key)
            if result.requeue_after is not None:
                result_label = "requeue"
                self.queue.add_after(key, result.requeue_after)
        except asyncio.CancelledError:
            raise
        except Exception as err:  # every failure is retried with backoff; the reason labels the metric
            result_label = "error"
            reason = _reason(err)
            self.metrics.errors.labels(kind, reason).inc()
            self.metrics.queue_retries.inc()
            level = logging.INFO if reason in ("StaleTrainJob", "Conflict") else logging.WARNING
            log.log(level, "reconcile %s %s/%s failed (%s): %s", kind, namespace, name, reason, err)
            self.queue.add_rate_limited(key)
        finally:
            self.metrics.reconciles.labels(kind, result_label).inc()
            self.metrics.duration.labels(kind).observe(time.perf_counter() - started)
            self.metrics.api_requests.labels(kind).observe(counter[0])
            self.observe_queue()


def _reason(err: Exception) -> str:
    if isinstance(err, ReconcileError):
        return err.reason
    if isinstance(err, NotFound):
        return "NotFound"
    if isinstance(err, ApiError):
        return err.reason or f"HTTP{err.code}"
    return type(err).__name__

