"""The TrainJob reconciler: one key in, the cluster brought in line with it (upstream's
``TrainJobReconciler.Reconcile`` in ``pkg/controller/trainjob_controller.go``, with the differences below).

Per reconcile, reading only from the watch caches except where a write must be exact:

1. TrainJob gone or being deleted -> nothing to do. Deletion of the children is garbage collection's job (every
   child has a controller ownerReference). ``managedBy`` MultiKueue (run on a worker cluster) -> nothing is built;
   only the ``trainguard.io/state`` label, from the status MultiKueue copies back (``multikueue``).
2. A runtimeRef kind/group we do not serve -> ``Failed/TrainingRuntimeNotSupported``.
3. Not finished (no ``Complete=True``/``Failed=True``): the runtime comes from the snapshot ConfigMap
   ``runtime-snapshot-<uid>`` in the controller's own namespace (``trainguard.webhook.runtime.snapshot``: created once from
   the live runtime with a plain create, so a runtime edit racing with a stale cache can never overwrite it; then
   always read from it, bounded JSON, namespace, name, labels and kind validated; users cannot write there, and a
   ``<job>-runtime-snapshot`` in the user's namespace is never read). Unless its JobSet runs, the TrainJob must pass
   the Enforce policies (``enforcement``); a denied job is Blocked, nothing is built for it and its Kueue Workload
   is deactivated so Kueue gives the quota back (``quota``; reactivated once the policies allow the job). What the
   Audit policies find in the same check becomes a Warning event ``PolicyViolation``, once per finding per job.
   ``trainguard.webhook.runtime.build_objects`` builds everything - the same call ``trainguard render`` makes, so both produce
   identical JobSets - and each object is server-side applied under the field manager ``trainguard`` with force,
   in ``apply_order``: the JobSet's dependants (MPI Secret and hostfile, PodGroup, Flux objects) first, the JobSet
   last. The first write the apiserver refuses (a PodGroup whose CRD is not installed) stops the reconcile: nothing
   after it is written, so no JobSet runs without its gang PodGroup; it is reported and retried like a build failure.
   Secrets (MPI SSH key, Flux CURVE) are only ever created, AlreadyExists meaning done: key material is never
   overwritten, and the controller needs no right to read Secrets (it remembers which ones it has made sure of).
   The build itself omits a running JobSet (never mutated) and frozen PodGroups; a resume re-applies the whole
   JobSet so patches made while suspended take effect.
   A build failure is recorded as a Warning event ``TrainJobResourcesCreationFailed`` and retried with backoff,
   after the status below is still brought up to date.
   A snapshot that cannot be created because ``--snapshot-namespace`` does not exist is the admin's to fix: one
   Warning ``ControllerMisconfigured`` per job naming the fix (not one per retry), retried the same way.
4. Status from ``status.next_status`` (pure), written as a JSON merge patch on ``/status`` only when it changed,
   guarded by the resourceVersion we computed it from (a stale cache yields a conflict and a retry, never an
   older status). The deadline deletes the JobSet and the caller requeues at the next deadline.
5. The ``trainguard.io/state`` label (see ``status``; ``Blocked`` from ``enforcement``) is patched when it changed.

Snapshots have no ownerReference (it cannot cross namespaces): ``collect_snapshot`` deletes one whose TrainJob is
gone (confirmed with a live GET), driven by TrainJob DELETED events and by the snapshot cache's initial list (the
sweep at every start).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Mapping, Protocol

from trainguard.webhook.api.constants import (
    CLUSTER_TRAINING_RUNTIME_KIND,
    TRAINER_API_VERSION,
    TRAINING_RUNTIME_KIND,
    TRAINJOB_KIND,
)
from trainguard.webhook.api.views import KubeObject, TrainJob
from trainguard.webhook.kube.client import KubeClient
from trainguard.webhook.kube.errors import AlreadyExists, ApiError, Conflict, NotFound
from trainguard.webhook.kube.resources import CONFIGMAPS, JOBSETS, SECRETS, TRAINJOBS, WORKLOADS, resource_for
from trainguard.webhook.policy.pipeline import AuditFinding, PolicyResult
from trainguard.webhook.policy.verdict import ClusterSnapshot
from trainguard.webhook.runtime import (
    BuildError,
    ExistingObjects,
    InvalidRuntimeSnapshot,
    apply_order,
    build_objects,
    build_runtime_snapshot,
    generated_keys,
    runtime_from_snapshot,
)
from trainguard.webhook.runtime.names import DATASET_CACHE_ANNOTATION
from trainguard.webhook.runtime.snapshot import snapshot_name, snapshot_owner

from trainguard.controller.reconcile import enforcement, quota, readiness
from trainguard.controller.reconcile import status as st
from trainguard.controller.reconcile.events import EventRecorder
from trainguard.controller.reconcile.multikueue import dispatched_state

log = logging.getLogger(__name__)

FIELD_MANAGER = "trainguard"
# Upstream truncates the error in the event to 950 characters.
MAX_EVENT_ERROR = 950

Object = dict[str, Any]


class Cache(Protocol):
    def get(self, name: str, namespace: str = "") -> Object | None: ...


@dataclass
class TrainJobCaches:
    """The watch caches a TrainJob reconcile reads (``trainguard.webhook.kube.informer.Informer`` instances)."""

    trainjobs: Cache
    jobsets: Cache
    snapshots: Cache  # runtime snapshot ConfigMaps, in the snapshot namespace only
    training_runtimes: Cache
    cluster_training_runtimes: Cache
    dataset_caches: Cache
    # TrainJobPolicies, Namespace labels (and runtimes) for the Enforce check, built from the caches.
    cluster_snapshot: Callable[[], ClusterSnapshot] = ClusterSnapshot
    coscheduling_podgroups: Cache | None = None
    volcano_podgroups: Cache | None = None
    # Kueue Workloads by TrainJob UID (None: Kueue's Workloads are not watched).
    workloads: quota.WorkloadIndex | None = None


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


class ControllerMisconfigured(ReconcileError):
    """The controller cannot reconcile any job until the admin fixes its setup (the message says how), e.g. its
    snapshot namespace does not exist; /readyz reports the same (``readiness``)."""

    def __init__(self, message: str) -> None:
        super().__init__(readiness.REASON_MISCONFIGURED, message)


class ObjectWriteFailed(Exception):
    """The apiserver refused one of the TrainJob's objects; nothing after it in ``apply_order`` was written."""

    def __init__(self, obj: Mapping[str, Any], err: ApiError) -> None:
        super().__init__(write_failure_message(obj, err))


def write_failure_message(obj: Mapping[str, Any], err: ApiError) -> str:
    """The error as upstream's event carries it. A write never gets a 404 for the object itself (apply creates
    it), so a 404 means the apiserver does not serve the kind (its CRD is not installed): upstream's client says
    so in its REST mapper's words."""
    view = KubeObject(obj)
    if isinstance(err, NotFound):
        return f'no matches for kind "{view.kind}" in version "{view.api_version}"'
    meta = view.metadata
    return err.message or f"{view.kind} {meta.namespace}/{meta.name}: {err}"


class PolicyBlocked(Exception):
    """An Enforce TrainJobPolicy denies the TrainJob: nothing is built for it (``enforcement``)."""

    def __init__(self, check: "PolicyCheck") -> None:
        super().__init__(check.message)
        self.check = check


@dataclass(frozen=True)
class PolicyCheck:
    """What the Enforce policies said this reconcile: ``allowed`` None when they were not asked (a running job
    already checked against the same policies and the same TrainJob generation)."""

    allowed: bool | None = None
    message: str | None = None
    audit: tuple[AuditFinding, ...] = ()  # what the Audit policies found, for ``PolicyViolation`` events
    results: tuple[PolicyResult, ...] = ()  # each matching policy's result, for the TrainJobPolicy status counts


class PolicyResults(Protocol):
    """Where each evaluated job's per-policy results go (``policy_status.PolicyStatusReconciler``)."""

    def record(self, uid: str, results: tuple[PolicyResult, ...]) -> None: ...

    def forget(self, uid: str) -> None: ...


class TrainJobReconciler:
    def __init__(
        self,
        kube: KubeClient,
        caches: TrainJobCaches,
        events: EventRecorder,
        *,
        snapshot_namespace: str,
        scope: str | None = None,
        now: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
        policy_results: PolicyResults | None = None,
    ) -> None:
        self._kube = kube
        self._caches = caches
        self._events = events
        self._policy_results = policy_results
        self._snapshot_namespace = snapshot_namespace
        # The namespace this controller reconciles (None: all): snapshots of TrainJobs elsewhere are not its own.
        self._scope = scope
        self._now = now
        # TrainJob UID -> names of the key Secrets known to exist (created, or AlreadyExists). The controller may
        # not read Secrets, so this memory is what spares a key generation and a create per reconcile.
        self._secrets_ensured: dict[str, set[str]] = {}
        # TrainJob UID -> the PolicyDenied event last recorded for it: one event per denial, not per reconcile.
        self._denial_noted: dict[str, str] = {}
        # TrainJob UID -> the ControllerMisconfigured event last recorded for it: once per job per distinct fix,
        # not once per retry; a reconcile that gets past it forgets it.
        self._misconfigured_noted: dict[str, str] = {}
        # TrainJob UID -> the Audit findings already recorded as PolicyViolation events: each once per job.
        self._audit_noted: dict[str, set[AuditFinding]] = {}
        # Running jobs: TrainJob UID -> (policy view generation, TrainJob generation) last checked.
        self._running_checked: dict[str, tuple[int, int | None]] = {}
        self._policy_view: object | None = None
        self._policy_generation = 0

    def forget(self, trainjob_uid: str) -> None:
        """The TrainJob is gone: drop what was remembered about it."""
        self._secrets_ensured.pop(trainjob_uid, None)
        self._denial_noted.pop(trainjob_uid, None)
        self._misconfigured_noted.pop(trainjob_uid, None)
        self._audit_noted.pop(trainjob_uid, None)
        self._running_checked.pop(trainjob_uid, None)
        if self._policy_results is not None:
            self._policy_results.forget(trainjob_uid)

    def _note_results(self, trainjob: Object, check: PolicyCheck) -> None:
        """This job's per-policy results, when the policies were asked (a running job not asked again keeps the
        last ones); only while the cache still holds this very job, so a deletion seen meanwhile is not undone."""
        if self._policy_results is None or check.allowed is None:
            return
        meta = TrainJob(trainjob).metadata
        cached = self._caches.trainjobs.get(meta.name, meta.namespace)
        if cached is not None and TrainJob(cached).metadata.uid == meta.uid:
            self._policy_results.record(meta.uid, check.results)

    def _forget_results(self, trainjob: Object) -> None:
        if self._policy_results is not None:
            self._policy_results.forget(TrainJob(trainjob).metadata.uid)

    async def reconcile(self, namespace: str, name: str) -> Result:
        trainjob = self._caches.trainjobs.get(name, namespace)
        if trainjob is None or TrainJob(trainjob).metadata.deletion_timestamp:
            return Result()
        if not st.is_managed_by_us(trainjob):
            # MultiKueue runs it on a worker: nothing is built here, the state label follows the copied status.
            self._forget_results(trainjob)
            await self._write_state(trainjob, dispatched_state(trainjob))
            return Result()
        trainjob = _with_type(trainjob)

        # One reading of the runtimeRef for the webhook and here: ``kind: ""`` names no runtime (as upstream).
        ref = TrainJob(trainjob).runtime_ref
        if not (ref.is_training_runtime or ref.is_cluster_training_runtime):
            self._forget_results(trainjob)
            decision = st.unsupported_runtime(trainjob, f"{ref.api_group}/{ref.kind}/{ref.name}", self._now())
            if not await self._write_status(trainjob, decision):
                return Result()
            await self._write_state(trainjob, decision.state)
            await self._emit(trainjob, decision)
            return Result()

        build_error: ReconcileError | None = None
        applied_jobset: Object | None = None
        blocked: str | None = None
        check = PolicyCheck()
        if not st.is_finished(trainjob):
            try:
                applied_jobset, check = await self._apply_objects(trainjob)
            except PolicyBlocked as err:
                blocked = str(err)
                check = err.check
            except ControllerMisconfigured as err:
                await self._note_misconfigured(trainjob, str(err))
                build_error = err
            except (BuildError, InvalidRuntimeSnapshot, RuntimeNotFound, ObjectWriteFailed) as err:
                message = str(err)
                if len(message) > MAX_EVENT_ERROR:
                    message = message[:MAX_EVENT_ERROR] + " ..."
                await self._events.record(trainjob, "Warning", "TrainJobResourcesCreationFailed",
                                          f"TrainJob resources reconciliation failed: {message}")
                build_error = ReconcileError(type(err).__name__, message)
            self._note_results(trainjob, check)
        else:
            self._forget_results(trainjob)  # a finished job is no longer counted

        jobset = applied_jobset or self._caches.jobsets.get(name, namespace)
        decision = st.next_status(trainjob, jobset, self._now(),
                                  blocked=enforcement.event_message(blocked) if blocked is not None else None,
                                  pending=self._pending(trainjob))
        if decision.delete_jobset and jobset is not None:
            try:
                await self._kube.delete(JOBSETS, name, namespace, propagation="Background")
            except NotFound:
                pass
        if not await self._write_status(trainjob, decision):
            # Deleted while we reconciled (our cache was behind): nothing to report on and nothing to retry;
            # whatever was applied above carries its ownerReference and is garbage-collected.
            return Result()
        await self._write_state(trainjob, decision.state, decision.size)
        await self._emit(trainjob, decision)
        # Not retried: a TrainJobPolicy or Namespace change requeues every unfinished job (see ``controller``).
        await self._note_denial(trainjob, check, running=blocked is None)
        await self._note_audit(trainjob, check)
        if blocked is not None or check.allowed:
            await self._sync_workloads(trainjob, blocked=blocked is not None)
        if build_error is not None:
            raise build_error
        return Result(requeue_after=decision.requeue_after)

    async def _note_misconfigured(self, trainjob: Object, message: str) -> None:
        uid = TrainJob(trainjob).metadata.uid
        if self._misconfigured_noted.get(uid) == message:
            return
        await self._events.record(trainjob, "Warning", readiness.REASON_MISCONFIGURED,
                                  _truncate(f"trainguard cannot reconcile this TrainJob: {message}"))
        self._misconfigured_noted[uid] = message

    async def _note_denial(self, trainjob: Object, check: PolicyCheck, *, running: bool) -> None:
        """One Warning ``PolicyDenied`` per denial of this job (a new one when the denial changes); an allowed
        check forgets it."""
        uid = TrainJob(trainjob).metadata.uid
        if check.allowed is None:
            return
        if check.allowed:
            self._denial_noted.pop(uid, None)
            return
        note = _truncate(enforcement.running_event_message(check.message) if running
                         else enforcement.event_message(check.message))
        if self._denial_noted.get(uid) == note:
            return
        await self._events.record(trainjob, "Warning", enforcement.REASON_POLICY_DENIED, note)
        self._denial_noted[uid] = note

    async def _note_audit(self, trainjob: Object, check: PolicyCheck) -> None:
        """One Warning ``PolicyViolation`` per Audit finding (policy, message) per job, never repeated."""
        noted = self._audit_noted.setdefault(TrainJob(trainjob).metadata.uid, set())
        for finding in check.audit:
            if finding in noted:
                continue
            await self._events.record(trainjob, "Warning", enforcement.REASON_POLICY_VIOLATION,
                                      _truncate(enforcement.audit_event_message(finding)))
            noted.add(finding)

    def _pending(self, trainjob: Object) -> str | None:
        """Kueue's reason for holding a suspended job, from its Workloads as cached (None without Kueue)."""
        index = self._caches.workloads
        if index is None or not st.is_suspended(trainjob):
            return None
        return quota.pending_message(index.of(TrainJob(trainjob).metadata.uid))

    async def _sync_workloads(self, trainjob: Object, *, blocked: bool) -> None:
        """Deactivate the Kueue Workloads of a blocked job, reactivate the ones this controller deactivated once
        it is allowed (``quota``)."""
        index = self._caches.workloads
        if index is None:
            return
        meta = TrainJob(trainjob).metadata
        for name, patch in quota.activation_patches(index.of(meta.uid), blocked):
            try:
                await self._kube.merge_patch(WORKLOADS, name, patch, meta.namespace, field_manager=FIELD_MANAGER)
            except NotFound:
                continue
            except ApiError as err:
                raise ReconcileError("WorkloadActivation", f"Workload {meta.namespace}/{name}: {err}") from err
            if blocked:
                await self._events.record(trainjob, "Normal", quota.REASON_DEACTIVATED,
                                          f"Deactivated Kueue Workload {name} (spec.active: false): Kueue evicts it "
                                          "and gives its quota back while a TrainJobPolicy denies the job")
            else:
                await self._events.record(trainjob, "Normal", quota.REASON_REACTIVATED,
                                          f"Reactivated Kueue Workload {name}: the TrainJobPolicies allow the job now")

    # ---- objects ------------------------------------------------------------------------------------------
    async def _apply_objects(self, trainjob: Object) -> tuple[Object | None, PolicyCheck]:
        meta = TrainJob(trainjob).metadata
        name, namespace = meta.name, meta.namespace
        runtime = await self._runtime(trainjob)
        self._misconfigured_noted.pop(meta.uid, None)
        existing_jobset = self._caches.jobsets.get(name, namespace)
        dataset_cache = None
        cache_name = meta.annotations.get(DATASET_CACHE_ANNOTATION)
        if cache_name:
            dataset_cache = self._caches.dataset_caches.get(cache_name, namespace)
            if dataset_cache is None:
                raise BuildError(f"DatasetCache {namespace}/{cache_name} named by annotation "
                                 f"{DATASET_CACHE_ANNOTATION} does not exist")
        check = self._check_policies(trainjob, runtime, existing_jobset)
        if check.allowed is False and enforcement.checked(existing_jobset):
            raise PolicyBlocked(check)
        objects = build_objects(
            trainjob, runtime, keys=generated_keys(), existing=self._existing(trainjob, existing_jobset),
            dataset_cache=dataset_cache,
        )
        applied_jobset: Object | None = None
        ensured = self._secrets_ensured.setdefault(meta.uid, set())
        for obj in apply_order(objects):
            resource = resource_for(obj)
            if resource is SECRETS:
                try:
                    await self._kube.create(SECRETS, obj)
                except AlreadyExists:
                    pass
                except ApiError as err:
                    raise ObjectWriteFailed(obj, err) from err
                ensured.add(KubeObject(obj).metadata.name)
                continue
            try:
                applied = await self._kube.apply(resource, obj, field_manager=FIELD_MANAGER, force=True)
            except ApiError as err:
                raise ObjectWriteFailed(obj, err) from err
            if resource is JOBSETS:
                applied_jobset = applied
                if existing_jobset is None:
                    await self._events.record(trainjob, "Normal", "Created", f"Created JobSet {namespace}/{name}")
        return applied_jobset, check

    def _check_policies(self, trainjob: Object, runtime: Object, jobset: Object | None) -> PolicyCheck:
        """The Enforce verdict. Asked on every reconcile of a job whose JobSet does not run; for a running one
        (which is never touched) only when the policy view or the TrainJob's spec changed since it was last asked."""
        snapshot = self._caches.cluster_snapshot()
        if snapshot is not self._policy_view:
            self._policy_view = snapshot
            self._policy_generation += 1
        meta = TrainJob(trainjob).metadata
        if enforcement.checked(jobset):
            self._running_checked.pop(meta.uid, None)
        else:
            stamp = (self._policy_generation, meta.generation)
            if self._running_checked.get(meta.uid) == stamp:
                return PolicyCheck()
            self._running_checked[meta.uid] = stamp
        result = enforcement.check(trainjob, runtime, snapshot)
        verdict = result.verdict
        if verdict.allowed:
            return PolicyCheck(True, audit=result.audit, results=result.results)
        return PolicyCheck(False, verdict.message or verdict.reason or "denied", audit=result.audit,
                           results=result.results)

    def _existing(self, trainjob: Object, jobset: Object | None) -> ExistingObjects:
        meta = TrainJob(trainjob).metadata
        name, namespace = meta.name, meta.namespace
        ensured = self._secrets_ensured.get(meta.uid, set())

        def has(cache: Cache | None, object_name: str) -> bool:
            return cache is not None and cache.get(object_name, namespace) is not None

        return ExistingObjects(
            jobset=jobset,
            mpi_ssh_secret=f"{name}-mpi-ssh-auth" in ensured,
            flux_curve_secret=f"{name}-flux-curve" in ensured,
            podgroup=has(self._caches.coscheduling_podgroups, name) or has(self._caches.volcano_podgroups, name),
        )

    async def _runtime(self, trainjob: Object) -> Object:
        """The runtime this job was admitted with: from its snapshot, else the live one (then snapshot it)."""
        uid = TrainJob(trainjob).metadata.uid
        where = self._snapshot_namespace
        snap = self._caches.snapshots.get(snapshot_name(uid), where)
        if snap is not None:
            return runtime_from_snapshot(snap, trainjob, where)
        live = self._live_runtime(trainjob)
        try:
            await self._kube.create(CONFIGMAPS, build_runtime_snapshot(trainjob, live, where))
            return live
        except NotFound as err:
            # ConfigMaps are always served: a 404 on create is the namespace itself missing.
            raise ControllerMisconfigured(readiness.snapshot_namespace_missing(where)) from err
        except AlreadyExists:
            # Our cache is behind: a snapshot exists already and is the truth, whatever the runtime says now.
            snap = await self._kube.get(CONFIGMAPS, snapshot_name(uid), where)
            return runtime_from_snapshot(snap, trainjob, where)

    # ---- snapshot garbage collection ------------------------------------------------------------------------
    async def collect_snapshot(self, name: str) -> Result:
        """Delete snapshot ConfigMap ``name`` when the TrainJob it was taken for no longer exists."""
        snap = self._caches.snapshots.get(name, self._snapshot_namespace)
        owner = snapshot_owner(snap) if snap is not None else None
        if owner is None:
            return Result()
        namespace, job_name, uid = owner
        if self._scope is not None and namespace != self._scope:
            return Result()  # another controller's TrainJob (one snapshot namespace, several scoped controllers)
        cached = self._caches.trainjobs.get(job_name, namespace)
        if cached is not None and TrainJob(cached).metadata.uid == uid:
            return Result()
        # The cache may simply not have seen the TrainJob yet (a new leader's watch behind another replica's work):
        # only the apiserver's word deletes.
        try:
            live = await self._kube.get(TRAINJOBS, job_name, namespace)
            if TrainJob(live).metadata.uid == uid:
                return Result()
        except NotFound:
            pass
        self.forget(uid)
        try:
            await self._kube.delete(CONFIGMAPS, name, self._snapshot_namespace)
            log.info("deleted runtime snapshot %s/%s of TrainJob %s/%s (gone)", self._snapshot_namespace, name,
                     namespace, job_name)
        except NotFound:
            pass
        return Result()

    def _live_runtime(self, trainjob: Object) -> Object:
        view = TrainJob(trainjob)
        ref, namespace = view.runtime_ref, view.metadata.namespace
        if ref.is_training_runtime:
            found = self._caches.training_runtimes.get(ref.name, namespace)
            if found is None:
                raise RuntimeNotFound(f"TrainingRuntime specified in TrainJob is not found: {namespace}/{ref.name}")
        else:
            found = self._caches.cluster_training_runtimes.get(ref.name)
            if found is None:
                raise RuntimeNotFound(f"not found ClusterTrainingRuntime specified in TrainJob: {ref.name}")
        return _with_type(found, ref.kind)

    # ---- status -------------------------------------------------------------------------------------------
    async def _write_status(self, trainjob: Object, decision: st.StatusDecision) -> bool:
        """Patch the status if it changed; False when the TrainJob no longer exists."""
        if not decision.changed(trainjob):
            return True
        meta = TrainJob(trainjob).metadata
        patch = {"metadata": {"resourceVersion": meta.resource_version}, "status": decision.merge_patch(trainjob)}
        try:
            await self._kube.merge_patch(TRAINJOBS, meta.name, patch, meta.namespace, subresource="status",
                                         field_manager=FIELD_MANAGER)
        except NotFound:
            log.info("TrainJob %s/%s was deleted during its reconcile", meta.namespace, meta.name)
            return False
        except Conflict as err:
            raise ReconcileError("StaleTrainJob", f"status computed from a stale TrainJob: {err.message}") from err
        return True

    async def _write_state(self, trainjob: Object, state: str, size: Mapping[str, str] | None = None) -> None:
        """The state label, and the Nodes / GPUs labels when known: one patch, only of what differs."""
        meta = TrainJob(trainjob).metadata
        labels = {k: v for k, v in {st.STATE_LABEL: state, **(size or {})}.items() if meta.labels.get(k) != v}
        if not labels:
            return
        try:
            await self._kube.merge_patch(TRAINJOBS, meta.name, {"metadata": {"labels": labels}},
                                         meta.namespace, field_manager=FIELD_MANAGER)
        except NotFound:
            pass

    async def _emit(self, trainjob: Object, decision: st.StatusDecision) -> None:
        for t in decision.transitions:
            await self._events.record(trainjob, t.type, t.reason, t.message)


def _truncate(message: str) -> str:
    return message if len(message) <= MAX_EVENT_ERROR else message[:MAX_EVENT_ERROR] + " ..."


def _with_type(obj: Mapping[str, Any], kind: str = TRAINJOB_KIND) -> Object:
    """Objects from list calls lack apiVersion/kind; the build and the snapshot need them."""
    out = dict(obj)
    out.setdefault("apiVersion", TRAINER_API_VERSION)
    out.setdefault("kind", kind)
    return out


def trainjobs_using_runtime(trainjobs: Any, runtime: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Keys of unfinished TrainJobs that reference ``runtime`` and have no snapshot yet is unknown here, so all
    unfinished referencing jobs: a runtime that appears late unblocks jobs that failed to find it."""
    view = KubeObject(runtime)
    meta = view.metadata
    kind = view.kind or (TRAINING_RUNTIME_KIND if meta.namespace else CLUSTER_TRAINING_RUNTIME_KIND)
    keys: list[tuple[str, str]] = []
    for (namespace, name), job in trainjobs.items():
        ref = TrainJob(job).runtime_ref
        if ref.name != meta.name or ref.kind != kind:
            continue
        if kind == TRAINING_RUNTIME_KIND and namespace != meta.namespace:
            continue
        if not st.is_finished(job):
            keys.append((namespace, name))
    return keys
