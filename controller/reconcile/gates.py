"""Releasing trainer pods held until their DatasetCache is warm (DatasetCache ``spec.holdTrainersUntilWarm``).

The build (``trainguard.webhook.runtime.dataset_cache``) gives the trainer pod templates the scheduling gate
``trainguard.io/dataset-cache-warm`` and the label ``trainguard.io/waits-for-dataset-cache: <cache>``. The controller
watches pods carrying that label (metadata and gates only, see ``gated_pod_view``) and maps each to the key of the
DatasetCache it names; the DatasetCache reconcile, right after computing the cache's status, calls
``GateReleaser.reconcile`` with that fresh status. For each pod of the cache still carrying the gate,
``gate_decision`` (pure) says:

==================================================  =========  ==========================================
cache                                               decision   why
==================================================  =========  ==========================================
pod no longer carries the gate                      nothing    ``Ungated`` (already released)
missing (confirmed by a live GET) or being deleted  release    ``CacheMissing``: nothing would ever warm
exists, ``holdTrainersUntilWarm`` now false         release    ``NotRequested``
``nodesReady == nodesDesired > 0``                  release    ``Warm``
otherwise                                           wait       ``Waiting`` ("N of M nodes warm")
==================================================  =========  ==========================================

A gated pod has no node yet, so "warm on its nodes" means "warm on every node the cache selects".

Release = a JSON patch that tests the gate's name at its index and removes exactly that entry of
``spec.schedulingGates`` (the API allows removing gates, never adding them); other gates, e.g. Kueue's
``kueue.x-k8s.io/topology``, stay. A pod whose gates changed under us fails the test and the reconcile is retried.

Why a job waits is said with a Normal Event on its TrainJob (reason ``WaitingForDatasetCache``, note "... N of M
nodes warm"), deduplicated by the ``EventRecorder`` (an identical note at most once per 10 minutes, a new count at
once). No condition is added (the kubeflow SDK reads any extra condition as "Created", see README's state label),
and the state label stays ``Created`` because no trainer pod runs. No annotation is written either: it would be an
UPDATE of the TrainJob through the admission webhook and a TrainJob reconcile for every count change, to say what
the event says. ``kubectl describe trainjob`` shows the event.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Iterable, Mapping

from trainguard.webhook.api.constants import TRAINER_API_VERSION, TRAINJOB_KIND
from trainguard.webhook.api.views import DatasetCache, Pod
from trainguard.webhook.kube.client import KubeClient
from trainguard.webhook.kube.errors import ApiError, NotFound
from trainguard.webhook.kube.informer import strip_managed_fields
from trainguard.webhook.kube.resources import PODS
from trainguard.webhook.runtime.dataset_cache import WAITS_FOR_LABEL, WARM_GATE, holds_trainers

from trainguard.controller.reconcile.events import EventRecorder
from trainguard.controller.reconcile.trainjob import ReconcileError

log = logging.getLogger(__name__)

Object = dict[str, Any]

JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"  # set on every pod by the JobSet controller; = TrainJob name

WAITING = "Waiting"
WARM = "Warm"
CACHE_MISSING = "CacheMissing"
NOT_REQUESTED = "NotRequested"
UNGATED = "Ungated"

REASON_WAITING = "WaitingForDatasetCache"
REASON_RELEASED = "DatasetCacheGateRemoved"


@dataclass(frozen=True)
class GateDecision:
    release: bool
    why: str  # Waiting | Warm | CacheMissing | NotRequested | Ungated
    nodes_ready: int = 0
    nodes_desired: int = 0


def gate_index(pod: Mapping[str, Any]) -> int | None:
    """Index of ``WARM_GATE`` in the pod's ``spec.schedulingGates``, or None when the pod does not carry it."""
    for i, gate in enumerate(Pod(pod).scheduling_gates):
        if gate.get("name") == WARM_GATE:
            return i
    return None


def cache_counts(cache: Mapping[str, Any]) -> tuple[int, int]:
    status = DatasetCache(cache).cache_status
    return int(status.nodes_ready or 0), int(status.nodes_desired or 0)


def is_warm(cache: Mapping[str, Any]) -> bool:
    """Warm on every node the cache selects: ``nodesReady == nodesDesired > 0`` (>= tolerates a node that left)."""
    ready, desired = cache_counts(cache)
    return desired > 0 and ready >= desired


def gate_decision(pod: Mapping[str, Any], cache: Mapping[str, Any] | None) -> GateDecision:
    """What to do with one labelled pod, given its DatasetCache (None: it does not exist). Pure."""
    if gate_index(pod) is None:
        return GateDecision(False, UNGATED)
    if cache is None or DatasetCache(cache).metadata.deletion_timestamp:
        return GateDecision(True, CACHE_MISSING)
    ready, desired = cache_counts(cache)
    if not holds_trainers(cache):
        return GateDecision(True, NOT_REQUESTED, ready, desired)
    if is_warm(cache):
        return GateDecision(True, WARM, ready, desired)
    return GateDecision(False, WAITING, ready, desired)


def remove_gate_patch(pod: Mapping[str, Any]) -> list[Object]:
    """JSON patch removing exactly ``WARM_GATE``; the ``test`` op makes it fail if the gates moved meanwhile."""
    index = gate_index(pod)
    if index is None:
        return []
    path = f"/spec/schedulingGates/{index}"
    return [{"op": "test", "path": f"{path}/name", "value": WARM_GATE}, {"op": "remove", "path": path}]


def gated_pod_view(pod: Object) -> Object:
    """What the controller caches of a labelled trainer pod: identity, labels, owners and the scheduling gates."""
    view = Pod(strip_managed_fields(pod))
    kept = view.metadata.only(("name", "namespace", "uid", "resourceVersion", "labels", "ownerReferences",
                               "deletionTimestamp"))
    return {"metadata": kept, "spec": {"schedulingGates": list(view.scheduling_gates)}}


def waiting_note(cache_name: str, cache: Mapping[str, Any]) -> str:
    ready, desired = cache_counts(cache)
    reason = DatasetCache(cache).cache_status.ready_condition.reason
    why = f" ({reason})" if reason else ""
    return (f"trainer pods are held by scheduling gate {WARM_GATE} until DatasetCache {cache_name} is warm on every "
            f"node it selects: {ready} of {desired} nodes warm{why}")


def released_note(cache_name: str, decision: GateDecision) -> str:
    if decision.why == WARM:
        return (f"DatasetCache {cache_name} is warm ({decision.nodes_ready} of {decision.nodes_desired} nodes warm): "
                f"removed scheduling gate {WARM_GATE} from the trainer pods")
    if decision.why == CACHE_MISSING:
        return (f"DatasetCache {cache_name} does not exist: removed scheduling gate {WARM_GATE} from the trainer "
                f"pods, which read the files directly")
    return (f"DatasetCache {cache_name} no longer sets holdTrainersUntilWarm: removed scheduling gate {WARM_GATE} "
            f"from the trainer pods")


class GateReleaser:
    """The I/O around ``gate_decision``: patch pods, record events on their TrainJobs."""

    def __init__(
        self,
        kube: KubeClient,
        gated_pods: Any,  # Informer over pods labelled WAITS_FOR_LABEL (items())
        trainjobs: Any,  # Informer over TrainJobs (get())
        events: EventRecorder,
        confirm_missing: Callable[[str, str], Awaitable[Object | None]],
    ) -> None:
        self._kube = kube
        self._pods = gated_pods
        self._trainjobs = trainjobs
        self._events = events
        self._confirm_missing = confirm_missing

    def pods_waiting_for(self, namespace: str, cache_name: str) -> list[Object]:
        if self._pods is None:
            return []
        return [pod for (ns, _), pod in self._pods.items()
                if ns == namespace and Pod(pod).metadata.labels.get(WAITS_FOR_LABEL) == cache_name
                and gate_index(pod) is not None]

    async def reconcile(self, namespace: str, cache_name: str, cache: Mapping[str, Any] | None) -> None:
        """Release or keep holding every gated pod of ``namespace/cache_name``; ``cache`` carries the status just
        computed (None: not in the watch cache, then confirmed with a live GET before anything is released)."""
        pods = self.pods_waiting_for(namespace, cache_name)
        if not pods:
            return
        if cache is None:
            cache = await self._confirm_missing(namespace, cache_name)
        stale = False
        released: dict[str, GateDecision] = {}
        waiting: set[str] = set()
        for pod in pods:
            decision = gate_decision(pod, cache)
            meta = Pod(pod).metadata
            job = meta.labels.get(JOBSET_NAME_LABEL) or ""
            if not decision.release:
                log.debug("pod %s/%s keeps %s (%s, %d of %d nodes warm)", namespace, meta.name,
                          WARM_GATE, decision.why, decision.nodes_ready, decision.nodes_desired)
                if decision.why == WAITING:
                    waiting.add(job)
                continue
            try:
                await self._kube.json_patch(PODS, meta.name, remove_gate_patch(pod), namespace)
            except NotFound:
                continue
            except ApiError as err:
                if err.code not in (409, 422):
                    raise
                stale = True  # the gates changed since our cache saw them: retry from a fresher cache
                continue
            log.info("released pod %s/%s from %s (%s)", namespace, meta.name, WARM_GATE, decision.why)
            released[job] = decision
        for job, decision in released.items():
            await self._record(namespace, job, "Normal", REASON_RELEASED, released_note(cache_name, decision))
        if cache is not None:
            for job in waiting:
                await self._record(namespace, job, "Normal", REASON_WAITING, waiting_note(cache_name, cache))
        if stale:
            raise ReconcileError("StaleSchedulingGates", f"scheduling gates of pods waiting for DatasetCache "
                                 f"{namespace}/{cache_name} changed during the reconcile")

    async def _record(self, namespace: str, job: str, type_: str, reason: str, note: str) -> None:
        trainjob = self._trainjobs.get(job, namespace) if job else None
        if trainjob is None:
            return
        regarding = {"apiVersion": TRAINER_API_VERSION, "kind": TRAINJOB_KIND, **trainjob}
        await self._events.record(regarding, type_, reason, note)


def pods_to_cache_keys(pods: Iterable[Mapping[str, Any]]) -> set[tuple[str, str]]:
    """(namespace, cache) of every labelled pod still carrying the gate."""
    out: set[tuple[str, str]] = set()
    for pod in pods:
        meta = Pod(pod).metadata
        cache = meta.labels.get(WAITS_FOR_LABEL)
        if cache and gate_index(pod) is not None:
            out.add((meta.namespace, cache))
    return out
