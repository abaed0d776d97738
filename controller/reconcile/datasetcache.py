"""The DatasetCache reconciler: agent RBAC + DaemonSet applied, status written back.

The builders and the status function are the cache engineer's pure code (``controller.cache.daemonset``); this
module only does the I/O: server-side apply under the field manager ``trainguard`` (force), then a merge patch on
``/status`` when the computed status differs. Children carry a controller ownerReference to the DatasetCache,
so deleting the cache garbage-collects them.

Then, with the status just computed, the trainer pods held for this cache (``holdTrainersUntilWarm``) are released
or kept waiting by ``gates.GateReleaser`` - also when the cache is gone, so no pod stays gated for a cache that
will never warm.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Callable

from controller.cache.daemonset import (
    DatasetCacheSpecError,
    agent_name,
    build_agent_rbac,
    build_daemonset,
    compute_status,
)
from controller.reconcile.events import EventRecorder
from controller.reconcile.gates import GateReleaser
from controller.reconcile.kinds import DAEMONSETS, resource_for
from controller.reconcile.trainjob import FIELD_MANAGER, Cache, ReconcileError, Result
from webhook.kube.client import KubeClient
from webhook.kube.errors import NotFound
from webhook.kube.resources import DATASET_CACHES

Object = dict[str, Any]


class DatasetCacheReconciler:
    def __init__(
        self,
        kube: KubeClient,
        caches: Cache,
        daemonsets: Cache,
        agent_pods: Any,  # an Informer over agent pods (items())
        events: EventRecorder,
        *,
        agent_image: str,
        now: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
        gated_pods: Any = None,  # an Informer over trainer pods labelled trainguard.io/waits-for-dataset-cache
        trainjobs: Any = None,  # an Informer over TrainJobs (events about held pods go to their TrainJob)
    ) -> None:
        self._kube = kube
        self._caches = caches
        self._daemonsets = daemonsets
        self._pods = agent_pods
        self._events = events
        self._image = agent_image
        self._now = now
        self._gates = (GateReleaser(kube, gated_pods, trainjobs, events, self._live_cache)
                       if gated_pods is not None else None)

    async def _live_cache(self, namespace: str, name: str) -> Object | None:
        try:
            return await self._kube.get(DATASET_CACHES, name, namespace)
        except NotFound:
            return None

    async def reconcile(self, namespace: str, name: str) -> Result:
        cache = self._caches.get(name, namespace)
        if cache is None or (cache.get("metadata") or {}).get("deletionTimestamp"):
            if self._gates is not None:
                await self._gates.reconcile(namespace, name, cache)
            return Result()
        cache = {"apiVersion": "trainguard.io/v1alpha1", "kind": "DatasetCache", **cache}
        try:
            objects = [*build_agent_rbac(cache), build_daemonset(cache, image=self._image)]
        except DatasetCacheSpecError as err:
            await self._events.record(cache, "Warning", "DatasetCacheBuildFailed", str(err))
            raise ReconcileError("DatasetCacheSpecError", str(err)) from err
        daemonset: Object | None = None
        for obj in objects:
            resource = resource_for(obj)
            applied = await self._kube.apply(resource, obj, field_manager=FIELD_MANAGER, force=True)
            if resource is DAEMONSETS:
                daemonset = applied
        # The cache's status reflects the DaemonSet's status as the cache last saw it (fresher than the apply
        # response only if the DaemonSet controller wrote since; either converges on the next event).
        daemonset = self._daemonsets.get(agent_name(name), namespace) or daemonset
        pods = [pod for (ns, _), pod in self._pods.items() if ns == namespace]
        previous = cache.get("status") or {}
        new_status = compute_status(cache, daemonset, pods, now=self._now(), previous=previous)
        if new_status != previous:
            meta = cache["metadata"]
            await self._kube.merge_patch(
                DATASET_CACHES, name, {"metadata": {"resourceVersion": meta.get("resourceVersion")},
                                       "status": new_status},
                namespace, subresource="status", field_manager=FIELD_MANAGER)
        if self._gates is not None:
            await self._gates.reconcile(namespace, name, {**cache, "status": new_status})
        return Result()
