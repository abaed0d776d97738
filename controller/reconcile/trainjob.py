"""The TrainJob reconciler: one key in, the cluster brought in line with it (reference §3.9).

Per reconcile, reading only from the watch caches except where a write must be exact:

1. TrainJob gone, being deleted, or ``managedBy`` someone else (MultiKueue) -> nothing to do. Deletion of the
   children is garbage collection's job (every child has a controller ownerReference).
2. A runtimeRef kind/group we do not serve -> ``Failed/TrainingRuntimeNotSupported``.
3. Not finished (no ``Complete=True``/``Failed=True``): the runtime comes from the snapshot ConfigMap
   ``<job>-runtime-snapshot`` (created once from the live runtime with a plain create, so a runtime edit racing
   with a stale cache can never overwrite it; then always read from it, ownership and kind validated by
   ``webhook.runtime.runtime_from_snapshot``). ``webhook.runtime.build_objects`` builds everything - the same
   call ``trainguard render`` makes, so both produce identical JobSets - and each object is server-side applied
   under the field manager ``trainguard`` with force. Secrets (MPI SSH key, Flux CURVE) are only ever created:
   key material is never overwritten. The build itself omits a running JobSet (never mutated) and frozen
   PodGroups; a resume re-applies the whole JobSet so patches made while suspended take effect.
   A build failure is recorded as a Warning event ``TrainJobResourcesCreationFailed`` and retried with backoff,
   after the status below is still brought up to date.
4. Status from ``status.next_status`` (pure), written as a JSON merge patch on ``/status`` only when it changed,
   guarded by the resourceVersion we computed it from (a stale cache yields a conflict and a retry, never an
   older status). The deadline deletes the JobSet and the caller requeues at the next deadline.
5. The ``trainguard.io/state`` label (see ``status``) is patched when it changed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Mapping, Protocol

from webhook.kube.client import KubeClient
from webhook.kube.errors import AlreadyExists, Conflict, NotFound
from webhook.kube.resources import CONFIGMAPS, JOBSETS, SECRETS, TRAINJOBS
from webhook.runtime import (
    BuildError,
    ExistingObjects,
    InvalidRuntimeSnapshot,
    build_objects,
    build_runtime_snapshot,
    generated_keys,
    runtime_from_snapshot,
)
from webhook.runtime.names import DATASET_CACHE_ANNOTATION

from controller.reconcile import status as st
from controller.reconcile.events import EventRecorder
from controller.reconcile.kinds import resource_for

log = logging.getLogger(__name__)

FIELD_MANAGER = "trainguard"
TRAINER_GROUP = "trainer.kubeflow.org"
RUNTIME_KINDS = ("TrainingRuntime", "ClusterTrainingRuntime")
# Upstream truncates the error in the event to 950 characters.
MAX_EVENT_ERROR = 950

Object = dict[str, Any]


class Cache(Protocol):
    def get(self, name: str, namespace: str = "") -> Object | None: ...


@dataclass
class TrainJobCaches:
    """The watch caches a TrainJob reconcile reads (``webhook.kube.informer.Informer`` instances)."""

    trainjobs: Cache
    jobsets: Cache
    configmaps: Cache
    secrets: Cache
    training_runtimes: Cache
    cluster_training_runtimes: Cache
    dataset_caches: Cache
    coscheduling_podgroups: Cache | None = None
    volcano_podgroups: Cache | None = None


@dataclass(frozen=True)
class Result:
    requeue_after: float | None = None


class ReconcileError(Exception):
    """A reconcile that must be retried with backoff; ``reason`` labels the error metric."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class RuntimeNotFound(Exception):
    pass


def snapshot_name(trainjob_name: str) -> str:
    return f"{trainjob_name}-runtime-snapshot"


class TrainJobReconciler:
    def __init__(
        self,
        kube: KubeClient,
        caches: TrainJobCaches,
        events: EventRecorder,
        *,
        now: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
    ) -> None:
        self._kube = kube
        self._caches = caches
        self._events = events
        self._now = now

    async def reconcile(self, namespace: str, name: str) -> Result:
        trainjob = self._caches.trainjobs.get(name, namespace)
        if trainjob is None or (trainjob.get("metadata") or {}).get("deletionTimestamp"):
            return Result()
        if not st.is_managed_by_us(trainjob):
            return Result()
        trainjob = _with_type(trainjob)

        ref = (trainjob.get("spec") or {}).get("runtimeRef") or {}
        kind = ref.get("kind") or "ClusterTrainingRuntime"
        group = ref.get("apiGroup") or TRAINER_GROUP
        if group != TRAINER_GROUP or kind not in RUNTIME_KINDS:
            decision = st.unsupported_runtime(trainjob, f"{group}/{kind}/{ref.get('name', '')}", self._now())
            if not await self._write_status(trainjob, decision):
                return Result()
            await self._write_state(trainjob, decision.state)
            await self._emit(trainjob, decision)
            return Result()

        build_error: ReconcileError | None = None
        applied_jobset: Object | None = None
        if not st.is_finished(trainjob):
            try:
                applied_jobset = await self._apply_objects(trainjob)
            except (BuildError, InvalidRuntimeSnapshot, RuntimeNotFound) as err:
                message = str(err)
                if len(message) > MAX_EVENT_ERROR:
                    message = message[:MAX_EVENT_ERROR] + " ..."
                await self._events.record(trainjob, "Warning", "TrainJobResourcesCreationFailed",
                                          f"TrainJob resources reconciliation failed: {message}")
                build_error = ReconcileError(type(err).__name__, message)

        jobset = applied_jobset or self._caches.jobsets.get(name, namespace)
        decision = st.next_status(trainjob, jobset, self._now())
        if decision.delete_jobset and jobset is not None:
            try:
                await self._kube.delete(JOBSETS, name, namespace, propagation="Background")
            except NotFound:
                pass
        if not await self._write_status(trainjob, decision):
            # Deleted while we reconciled (our cache was behind): nothing to report on and nothing to retry;
            # whatever was applied above carries its ownerReference and is garbage-collected.
            return Result()
        await self._write_state(trainjob, decision.state)
        await self._emit(trainjob, decision)
        if build_error is not None:
            raise build_error
        return Result(requeue_after=decision.requeue_after)

    # ---- objects ------------------------------------------------------------------------------------------
    async def _apply_objects(self, trainjob: Object) -> Object | None:
        meta = trainjob["metadata"]
        name, namespace = meta["name"], meta["namespace"]
        runtime = await self._runtime(trainjob)
        existing_jobset = self._caches.jobsets.get(name, namespace)
        dataset_cache = None
        cache_name = (meta.get("annotations") or {}).get(DATASET_CACHE_ANNOTATION)
        if cache_name:
            dataset_cache = self._caches.dataset_caches.get(cache_name, namespace)
            if dataset_cache is None:
                raise BuildError(f"DatasetCache {namespace}/{cache_name} named by annotation "
                                 f"{DATASET_CACHE_ANNOTATION} does not exist")
        objects = build_objects(
            trainjob, runtime, keys=generated_keys(), existing=self._existing(trainjob, existing_jobset),
            dataset_cache=dataset_cache,
        )
        applied_jobset: Object | None = None
        for obj in objects:
            resource = resource_for(obj)
            if resource is SECRETS:
                try:
                    await self._kube.create(SECRETS, obj)
                except AlreadyExists:
                    pass
                continue
            applied = await self._kube.apply(resource, obj, field_manager=FIELD_MANAGER, force=True)
            if resource is JOBSETS:
                applied_jobset = applied
                if existing_jobset is None:
                    await self._events.record(trainjob, "Normal", "Created", f"Created JobSet {namespace}/{name}")
        return applied_jobset

    def _existing(self, trainjob: Object, jobset: Object | None) -> ExistingObjects:
        meta = trainjob["metadata"]
        name, namespace = meta["name"], meta["namespace"]

        def has(cache: Cache | None, object_name: str) -> bool:
            return cache is not None and cache.get(object_name, namespace) is not None

        return ExistingObjects(
            jobset=jobset,
            mpi_ssh_secret=has(self._caches.secrets, f"{name}-mpi-ssh-auth"),
            flux_curve_secret=has(self._caches.secrets, f"{name}-flux-curve"),
            podgroup=has(self._caches.coscheduling_podgroups, name) or has(self._caches.volcano_podgroups, name),
        )

    async def _runtime(self, trainjob: Object) -> Object:
        """The runtime this job was admitted with: from its snapshot, else the live one (then snapshot it)."""
        meta = trainjob["metadata"]
        name, namespace = meta["name"], meta["namespace"]
        snap = self._caches.configmaps.get(snapshot_name(name), namespace)
        if snap is not None:
            return runtime_from_snapshot(snap, trainjob)
        live = self._live_runtime(trainjob)
        try:
            await self._kube.create(CONFIGMAPS, build_runtime_snapshot(trainjob, live))
            return live
        except AlreadyExists:
            # Our cache is behind: a snapshot exists already and is the truth, whatever the runtime says now.
            snap = await self._kube.get(CONFIGMAPS, snapshot_name(name), namespace)
            return runtime_from_snapshot(snap, trainjob)

    def _live_runtime(self, trainjob: Object) -> Object:
        ref = trainjob["spec"]["runtimeRef"]
        namespace = trainjob["metadata"]["namespace"]
        if (ref.get("kind") or "ClusterTrainingRuntime") == "TrainingRuntime":
            found = self._caches.training_runtimes.get(ref["name"], namespace)
            if found is None:
                raise RuntimeNotFound(f"TrainingRuntime specified in TrainJob is not found: {namespace}/{ref['name']}")
        else:
            found = self._caches.cluster_training_runtimes.get(ref["name"])
            if found is None:
                raise RuntimeNotFound(f"not found ClusterTrainingRuntime specified in TrainJob: {ref['name']}")
        return _with_type(found, "TrainingRuntime" if ref.get("kind") == "TrainingRuntime" else "ClusterTrainingRuntime")

    # ---- status -------------------------------------------------------------------------------------------
    async def _write_status(self, trainjob: Object, decision: st.StatusDecision) -> bool:
        """Patch the status if it changed; False when the TrainJob no longer exists."""
        if not decision.changed(trainjob) or not decision.status:
            return True
        meta = trainjob["metadata"]
        patch = {"metadata": {"resourceVersion": meta.get("resourceVersion")}, "status": decision.status}
        try:
            await self._kube.merge_patch(TRAINJOBS, meta["name"], patch, meta["namespace"], subresource="status",
                                         field_manager=FIELD_MANAGER)
        except NotFound:
            log.info("TrainJob %s/%s was deleted during its reconcile", meta["namespace"], meta["name"])
            return False
        except Conflict as err:
            raise ReconcileError("StaleTrainJob", f"status computed from a stale TrainJob: {err.message}") from err
        return True

    async def _write_state(self, trainjob: Object, state: str) -> None:
        meta = trainjob["metadata"]
        if (meta.get("labels") or {}).get(st.STATE_LABEL) == state:
            return
        try:
            await self._kube.merge_patch(TRAINJOBS, meta["name"], {"metadata": {"labels": {st.STATE_LABEL: state}}},
                                         meta["namespace"], field_manager=FIELD_MANAGER)
        except NotFound:
            pass

    async def _emit(self, trainjob: Object, decision: st.StatusDecision) -> None:
        for t in decision.transitions:
            await self._events.record(trainjob, t.type, t.reason, t.message)


def _with_type(obj: Mapping[str, Any], kind: str = "TrainJob") -> Object:
    """Objects from list calls lack apiVersion/kind; the build and the snapshot need them."""
    out = dict(obj)
    out.setdefault("apiVersion", "trainer.kubeflow.org/v1alpha1")
    out.setdefault("kind", kind)
    return out


def trainjobs_using_runtime(trainjobs: Any, runtime: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Keys of unfinished TrainJobs that reference ``runtime`` and have no snapshot yet is unknown here, so all
    unfinished referencing jobs: a runtime that appears late unblocks jobs that failed to find it."""
    meta = runtime.get("metadata") or {}
    kind = runtime.get("kind") or ("TrainingRuntime" if meta.get("namespace") else "ClusterTrainingRuntime")
    keys: list[tuple[str, str]] = []
    for (namespace, name), job in trainjobs.items():
        ref = (job.get("spec") or {}).get("runtimeRef") or {}
        if ref.get("name") != meta.get("name") or (ref.get("kind") or "ClusterTrainingRuntime") != kind:
            continue
        if kind == "TrainingRuntime" and namespace != meta.get("namespace"):
            continue
        if not st.is_finished(job):
            keys.append((namespace, name))
    return keys
