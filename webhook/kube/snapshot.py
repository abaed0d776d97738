"""The admission server's view of the cluster: one informer per type a policy may read, and a snapshot of them.

``ClusterCaches.snapshot()`` is what a request handler calls: it costs nothing when no cache changed since the last
call, and otherwise rebuilds only the fields whose informer changed (copying into plain dicts, so the snapshot is
a real, immutable-by-convention value that stays consistent even if handed to another thread).

The snapshot's type is the caller's (the policy engine's ``ClusterSnapshot``), passed in as ``make``: this I/O
package sits below the policy engine and never imports it. ``SNAPSHOT_FIELDS`` names the keyword arguments ``make``
receives; a caller that wants a field shaped differently (parsed, say) replaces that field's ``build``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable, Generic, Iterable, Mapping, TypeVar

from trainguard.webhook.api.views import AdmissionCheck, ClusterQueue, JobSet, LocalQueue, Meta, object_labels
from trainguard.webhook.kube import resources as r
from trainguard.webhook.kube.informer import Backoff, Informer, ListWatcher, strip_managed_fields
from trainguard.webhook.kube.resources import Resource

Object = dict[str, Any]
Snapshot = TypeVar("Snapshot")


def _by_key(inf: Informer) -> Mapping[tuple[str, str], Object]:
    return MappingProxyType(dict(inf.items()))


def _by_name(inf: Informer) -> Mapping[str, Object]:
    return MappingProxyType({name: obj for (_, name), obj in inf.items()})


def _labels_by_name(inf: Informer) -> Mapping[str, Mapping[str, str]]:
    return MappingProxyType(
        {name: MappingProxyType(dict(object_labels(obj))) for (_, name), obj in inf.items()}
    )


def _names(inf: Informer) -> frozenset[str]:
    return frozenset(name for (_, name) in inf.keys())


def _namespace_metadata_only(obj: Object) -> Object:
    # Only labels are read (policy namespace selectors); dropping the rest keeps big clusters cheap.
    return {"metadata": Meta.of(obj).only(("name", "labels", "resourceVersion"))}


def _name_only(obj: Object) -> Object:
    return {"metadata": Meta.of(obj).only(("name", "resourceVersion"))}


# JobSets: only what admission reads of them, the TrainJob UPDATE rule "runtimePatches cannot change while a
# replicated job is active" (``trainguard.webhook.runtime.jobset``): each replicatedJobsStatus entry's name and active
# count. A cluster holds one JobSet per TrainJob and a whole one is kilobytes of pod templates: kept whole, they were
# most of the webhook's memory at 10,000 TrainJobs. A replicatedJobsStatus that is not a list is kept as it is (the
# rule reports it).
def jobset_admission_view(obj: Object) -> Object:
    out: Object = {"metadata": Meta.of(obj).only(("name", "namespace", "resourceVersion"))}
    statuses = JobSet(obj).replicated_jobs_status
    if statuses is not None:
        if isinstance(statuses, list):
            statuses = [{k: s[k] for k in ("name", "active") if k in s} if isinstance(s, dict) else s
                        for s in statuses]
        out["status"] = {"replicatedJobsStatus": statuses}
    return out


# Kueue's queueing objects: only what MultiKueue's managedBy defaulting reads (trainguard.webhook.policy.multikueue)
# and, of a ClusterQueue, its cohort and quotas (trainguard.webhook.policy.capacity).
def _local_queue_target(obj: Object) -> Object:
    return {"metadata": Meta.of(obj).only(("name", "namespace", "resourceVersion")),
            "spec": {"clusterQueue": LocalQueue(obj).cluster_queue}}


def _quota_entry(resource: Any) -> Any:
    if not isinstance(resource, dict):
        return None
    return {k: resource[k] for k in ("name", "nominalQuota", "borrowingLimit") if k in resource}


def _flavor_quotas(flavor: Any) -> Any:
    if not isinstance(flavor, dict):
        return None
    resources = flavor.get("resources")
    return {"name": flavor.get("name"),
            "resources": [_quota_entry(q) for q in resources] if isinstance(resources, list) else []}


def _cluster_queue_view(obj: Object) -> Object:
    view = ClusterQueue(obj)
    groups = [{"flavors": [_flavor_quotas(f) for f in g["flavors"]] if isinstance(g.get("flavors"), list) else []}
              for g in view.resource_groups if isinstance(g, dict)]
    return {"metadata": Meta.of(obj).only(("name", "resourceVersion")),
            "spec": {"admissionChecksStrategy": {"admissionChecks": view.admission_checks},
                     "cohortName": view.cohort_name, "resourceGroups": groups}}


def _admission_check_controller(obj: Object) -> Object:
    return {"metadata": Meta.of(obj).only(("name", "resourceVersion")),
            "spec": {"controllerName": AdmissionCheck(obj).controller_name}}


def _cluster_queues_by_local_queue(inf: Informer) -> Mapping[tuple[str, str], str]:
    return MappingProxyType({key: str(q) for key, obj in inf.items() if (q := LocalQueue(obj).cluster_queue)})


def _checks_by_cluster_queue(inf: Informer) -> Mapping[str, tuple[str, ...]]:
    return MappingProxyType({
        name: tuple(str(c.get("name")) for c in ClusterQueue(obj).admission_checks
                    if isinstance(c, dict) and c.get("name"))
        for (_, name), obj in inf.items()})


def _quotas_by_cluster_queue(inf: Informer) -> Mapping[str, Object]:
    """ClusterQueue name -> ``{"cohort": name or None, "flavors": {flavor: {resource: (nominalQuota, borrowingLimit
    or None)}}}``, the quantities as written (``trainguard.webhook.policy.capacity`` reads them)."""
    out: dict[str, Object] = {}
    for (_, name), obj in inf.items():
        view = ClusterQueue(obj)
        flavors: dict[str, dict[str, tuple[Any, Any]]] = {}
        for group in view.resource_groups:
            for flavor in (group.get("flavors") or []) if isinstance(group, dict) else []:
                if not isinstance(flavor, dict) or not isinstance(flavor.get("name"), str):
                    continue
                quotas = flavors.setdefault(flavor["name"], {})
                for q in flavor.get("resources") or []:
                    if isinstance(q, dict) and isinstance(q.get("name"), str):
                        quotas[q["name"]] = (q.get("nominalQuota"), q.get("borrowingLimit"))
        cohort = view.cohort_name
        out[name] = MappingProxyType({"cohort": cohort if isinstance(cohort, str) and cohort else None,
                                      "flavors": MappingProxyType(flavors)})
    return MappingProxyType(out)


def _controllers_by_admission_check(inf: Informer) -> Mapping[str, str]:
    return MappingProxyType({name: str(AdmissionCheck(obj).controller_name or "") for (_, name), obj in inf.items()})


@dataclass(frozen=True)
class SnapshotField:
    """How one snapshot field is fed: from which resource, trimmed how, and shaped how."""

    name: str  # the snapshot's attribute (a keyword argument of ``make``)
    resource: Resource
    build: Callable[[Informer], Any]
    transform: Callable[[Object], Object] = strip_managed_fields
    # The kind's CRD may be missing (Kueue not installed): an empty field, never a readiness blocker.
    optional: bool = False
    # Read the informer of the field so named (one watch per resource); that field's transform keeps what this
    # field's build reads.
    reads: str | None = None


SNAPSHOT_FIELDS: tuple[SnapshotField, ...] = (
    SnapshotField("training_runtimes", r.TRAINING_RUNTIMES, _by_key),
    SnapshotField("cluster_training_runtimes", r.CLUSTER_TRAINING_RUNTIMES, _by_name),
    SnapshotField("policies", r.TRAINJOB_POLICIES, _by_name),
    SnapshotField("namespace_labels", r.NAMESPACES, _labels_by_name, _namespace_metadata_only),
    SnapshotField("dataset_caches", r.DATASET_CACHES, _by_key),
    SnapshotField("jobsets", r.JOBSETS, _by_key, jobset_admission_view),
    SnapshotField("priority_classes", r.PRIORITY_CLASSES, _names, _name_only),
    SnapshotField("kueue_local_queues", r.LOCAL_QUEUES, _cluster_queues_by_local_queue, _local_queue_target, True),
    SnapshotField("kueue_cluster_queues", r.CLUSTER_QUEUES, _checks_by_cluster_queue, _cluster_queue_view, True),
    SnapshotField("kueue_quotas", r.CLUSTER_QUEUES, _quotas_by_cluster_queue, optional=True,
                  reads="kueue_cluster_queues"),
    SnapshotField("kueue_admission_checks", r.ADMISSION_CHECKS, _controllers_by_admission_check,
                  _admission_check_controller, True),
)


class ClusterCaches(Generic[Snapshot]):
    """The informers behind a snapshot (``make(**fields)``); ``synced`` once every one of them has listed.

    ``shared``: informers the caller already runs for some fields (the controller watches runtimes, DatasetCaches and
    JobSets for its own reasons); they are read, not started or stopped here, so nothing is watched twice.
    """

    def __init__(
        self,
        source: ListWatcher,
        make: Callable[..., Snapshot],
        *,
        fields: Iterable[SnapshotField] = SNAPSHOT_FIELDS,
        backoff: Callable[[], Backoff] = Backoff,
        watch_timeout_seconds: int = 300,
        shared: Mapping[str, Informer] | None = None,
    ) -> None:
        self.fields = tuple(fields)
        self._make = make
        shared = dict(shared or {})
        unknown = set(shared) - {f.name for f in self.fields}
        if unknown:
            raise ValueError(f"shared informers for fields that are not snapshotted: {sorted(unknown)}")
        names = {f.name for f in self.fields}
        dangling = [f.name for f in self.fields if f.reads is not None and f.reads not in names]
        if dangling:
            raise ValueError(f"fields reading the informer of a field that is not snapshotted: {dangling}")
        self._owned: dict[str, Informer] = {
            f.name: Informer(
                source, f.resource, transform=f.transform, backoff=backoff(), watch_timeout_seconds=watch_timeout_seconds,
                absent_ok=f.optional,
            )
            for f in self.fields
            if f.name not in shared and f.reads is None
        }
        own = {f.name: shared[f.name] if f.name in shared else self._owned[f.name]
               for f in self.fields if f.reads is None}
        self.informers: dict[str, Informer] = {f.name: own[f.reads] if f.reads is not None else own[f.name]
                                               for f in self.fields}
        self._built: dict[str, tuple[int, Any]] = {}
        self._snapshot: Snapshot | None = None
        self._snapshot_versions: tuple[int, ...] = ()

    @property
    def owned(self) -> dict[str, Informer]:
        """The informers this object created (and starts and stops)."""
        return dict(self._owned)

    def start(self) -> None:
        for inf in self._owned.values():
            inf.start()

    async def stop(self) -> None:
        await asyncio.gather(*(inf.stop() for inf in self._owned.values()))

    @property
    def synced(self) -> bool:
        return all(inf.synced.is_set() for inf in self.informers.values())

    def sync_state(self) -> dict[str, bool]:
        """Per snapshot field: has its informer listed at least once (for /readyz and the metrics gauge)."""
        return {name: inf.synced.is_set() for name, inf in self.informers.items()}

    async def wait_synced(self) -> None:
        await asyncio.gather(*(inf.synced.wait() for inf in self.informers.values()))

    def snapshot(self) -> Snapshot:
        versions = tuple(self.informers[f.name].version for f in self.fields)
        if self._snapshot is not None and versions == self._snapshot_versions:
            return self._snapshot
        values: dict[str, Any] = {}
        for f in self.fields:
            inf = self.informers[f.name]
            cached = self._built.get(f.name)
            if cached is None or cached[0] != inf.version:
                cached = (inf.version, f.build(inf))
                self._built[f.name] = cached
            values[f.name] = cached[1]
        self._snapshot = self._make(**values)
        self._snapshot_versions = versions
        return self._snapshot
