"""The DatasetCache reconciler: agent RBAC + DaemonSet applied, status written back.

The builders and the status function are pure code beside it (``cache_daemonset``); this
module only does the I/O: server-side apply under the field manager ``trainguard`` (force), then a merge patch on
``/status`` when the computed status differs. Children carry a controller ownerReference to the DatasetCache,
so deleting the cache garbage-collects them.

Before anything is built, the cache's source is checked against the admin's ``DatasetCacheSources`` (the
controller's ``--dataset-cache-allowed-host-path`` / ``--[no-]dataset-cache-allow-pvc`` flags, the same setting the
webhook enforces at ``kubectl apply``): defence in depth for a cache created while the webhook was down or before
the admin narrowed the setting. A refused cache gets no agent RBAC and no DaemonSet; an agent DaemonSet it already
has is deleted (its pods go with it: a DaemonSet cannot be scaled, and keeping it with a changed template would
still mount the path until rolled). The ServiceAccount/Role/RoleBinding stay (no pod uses them; the cache's
ownerReference collects them). Status says why: ``Ready=False``, reason ``SourceNotAllowed``, the message naming
the field and the allowed roots, and a Warning event with the same reason, once per change. When the admin allows
the source again, the next reconcile builds the agents as usual. What the cache asks for its agents (priority
class, tolerations, node selector, memory budget) is checked the same way against the admin's ``DatasetCacheAgents``
(``--dataset-cache-allowed-priority-classes`` and the other agent flags), reason ``AgentSettingsNotAllowed``; a
source refusal is reported first.

Then, with the status just computed, the trainer pods held for this cache (``holdTrainersUntilWarm``) are released
or kept waiting by ``gates.GateReleaser`` - also when the cache is gone, so no pod stays gated for a cache that
will never warm.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Callable, Mapping

from trainguard.controller.reconcile.cache_daemonset import (
    AgentResources,
    AgentSettingsNotAllowed,
    DatasetCacheSpecError,
    SourceNotAllowed,
    agent_name,
    build_agent_rbac,
    build_daemonset,
    compute_status,
    kept_transition_time,
)
from trainguard.controller.reconcile.events import EventRecorder
from trainguard.controller.reconcile.gates import GateReleaser
from trainguard.controller.reconcile.trainjob import FIELD_MANAGER, Cache, ReconcileError, Result
from trainguard.webhook.api.apimachinery import controller_owner
from trainguard.webhook.api.constants import DATASET_CACHE_KIND, TRAINGUARD_API_VERSION, TRAINGUARD_GROUP
from trainguard.webhook.api.views import CacheStatus, DatasetCache
from trainguard.webhook.field import aggregate
from trainguard.webhook.kube.client import KubeClient
from trainguard.webhook.kube.errors import NotFound
from trainguard.webhook.kube.resources import DAEMONSETS, DATASET_CACHES, resource_for
from trainguard.webhook.policy.dataset_cache import DatasetCacheSources, source_errors
from trainguard.webhook.policy.dataset_cache_agents import DatasetCacheAgents, agent_errors

Object = dict[str, Any]

REASON_SOURCE_NOT_ALLOWED = "SourceNotAllowed"
REASON_AGENT_SETTINGS_NOT_ALLOWED = "AgentSettingsNotAllowed"
# What the refusal's status message starts with, per reason.
_REFUSED_FOR = {REASON_SOURCE_NOT_ALLOWED: "no cache agents run for this source",
                REASON_AGENT_SETTINGS_NOT_ALLOWED: "no cache agents run with these agent settings"}


def refused_status(cache: Mapping[str, Any], message: str, *, now: datetime,
                   previous: Mapping[str, Any] | None = None, reason: str = REASON_SOURCE_NOT_ALLOWED) -> dict:
    """``status`` of a DatasetCache the admin's settings refuse: nothing desired, nothing ready, and a
    Ready=False condition that says why (its ``lastTransitionTime`` kept while Ready stays False)."""
    status: dict[str, Any] = {
        "nodesDesired": 0, "nodesReady": 0, "bytesResident": 0,
        "conditions": [{"type": "Ready", "status": "False", "reason": reason,
                        "message": message, "lastTransitionTime": kept_transition_time(previous, "False", now)}],
    }
    generation = DatasetCache(cache).metadata.generation
    if generation is not None:
        status["observedGeneration"] = generation
    return status


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
        sources: DatasetCacheSources = DatasetCacheSources(),  # the admin's setting; the default refuses hostPath
        agents: DatasetCacheAgents = DatasetCacheAgents(),  # the admin's setting for what caches ask their agents
        resources: AgentResources = AgentResources(),
    ) -> None:
        self._kube = kube
        self._caches = caches
        self._daemonsets = daemonsets
        self._pods = agent_pods
        self._events = events
        self._image = agent_image
        self._now = now
        self._sources = sources
        self._agents = agents
        self._resources = resources
        self._gates = (GateReleaser(kube, gated_pods, trainjobs, events, self._live_cache)
                       if gated_pods is not None else None)

    async def _live_cache(self, namespace: str, name: str) -> Object | None:
        try:
            return await self._kube.get(DATASET_CACHES, name, namespace)
        except NotFound:
            return None

    async def reconcile(self, namespace: str, name: str) -> Result:
        cache = self._caches.get(name, namespace)
        if cache is None or DatasetCache(cache).metadata.deletion_timestamp:
            if self._gates is not None:
                await self._gates.reconcile(namespace, name, cache)
            return Result()
        cache = {"apiVersion": TRAINGUARD_API_VERSION, "kind": DATASET_CACHE_KIND, **cache}
        refused, reason = source_errors(cache, self._sources), REASON_SOURCE_NOT_ALLOWED
        if not refused:
            refused, reason = agent_errors(cache, self._agents), REASON_AGENT_SETTINGS_NOT_ALLOWED
        if refused:
            new_status = await self._refuse(namespace, name, cache, aggregate(refused), reason)
            if self._gates is not None:
                await self._gates.reconcile(namespace, name, {**cache, "status": new_status})
            return Result()
        try:
            objects = [*build_agent_rbac(cache), build_daemonset(cache, image=self._image, sources=self._sources,
                                                                 agents=self._agents, resources=self._resources)]
        except SourceNotAllowed as err:  # the checks above said yes; the builder's own are stricter only by bug
            raise ReconcileError(REASON_SOURCE_NOT_ALLOWED, str(err)) from err
        except AgentSettingsNotAllowed as err:
            raise ReconcileError(REASON_AGENT_SETTINGS_NOT_ALLOWED, str(err)) from err
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
        previous = DatasetCache(cache).status
        new_status = compute_status(cache, daemonset, pods, now=self._now(), previous=previous)
        await self._write_status(cache, previous, new_status)
        if self._gates is not None:
            await self._gates.reconcile(namespace, name, {**cache, "status": new_status})
        return Result()

    async def _write_status(self, cache: Object, previous: Mapping[str, Any], new_status: Object) -> None:
        if new_status != previous:
            meta = DatasetCache(cache).metadata
            # resourceVersion makes the write conditional: a cache changed since it was read gets a conflict.
            await self._kube.merge_patch(
                DATASET_CACHES, meta.name, {"metadata": {"resourceVersion": meta.resource_version or None},
                                            "status": new_status},
                meta.namespace, subresource="status", field_manager=FIELD_MANAGER)

    async def _refuse(self, namespace: str, name: str, cache: Object, message: str, reason: str) -> Object:
        """No agents for what the admin does not allow: delete the DaemonSet this cache owns, say why."""
        deleted = False
        daemonset = self._daemonsets.get(agent_name(name), namespace)
        if daemonset is not None and controller_owner(daemonset, DATASET_CACHE_KIND, TRAINGUARD_GROUP) == name:
            try:
                await self._kube.delete(DAEMONSETS, agent_name(name), namespace)
                deleted = True
            except NotFound:
                pass
        note = f"{_REFUSED_FOR[reason]}: {message}"
        previous = DatasetCache(cache).status
        new_status = refused_status(cache, note, now=self._now(), previous=previous, reason=reason)
        await self._write_status(cache, previous, new_status)
        if deleted or CacheStatus(previous).ready_condition.message != note:
            if deleted:
                note += f"; the agent DaemonSet {agent_name(name)} was deleted"
            await self._events.record(cache, "Warning", reason, note)
        return new_status
