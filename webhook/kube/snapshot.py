"""The admission server's view of the cluster: one informer per type a policy may read, and a ``ClusterSnapshot``.

``ClusterCaches.snapshot()`` is what a request handler calls: it costs nothing when no cache changed since the last
call, and otherwise rebuilds only the fields whose informer changed (copying into plain dicts, so the snapshot is
a real, immutable-by-convention value that stays consistent even if handed to another thread).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable, Iterable, Mapping

from webhook.kube import resources as r
from webhook.kube.informer import Backoff, Informer, ListWatcher, strip_managed_fields
from webhook.kube.resources import Resource
from webhook.policy.verdict import ClusterSnapshot

Object = dict[str, Any]


def _by_key(inf: Informer) -> Mapping[tuple[str, str], Object]:
    return MappingProxyType(dict(inf.items()))


def _by_name(inf: Informer) -> Mapping[str, Object]:
    return MappingProxyType({name: obj for (_, name), obj in inf.items()})


def _labels_by_name(inf: Informer) -> Mapping[str, Mapping[str, str]]:
    return MappingProxyType(
        {name: MappingProxyType(dict((obj.get("metadata") or {}).get("labels") or {})) for (_, name), obj in inf.items()}
    )


def _names(inf: Informer) -> frozenset[str]:
    return frozenset(name for (_, name) in inf.keys())


def _namespace_metadata_only(obj: Object) -> Object:
    # Only labels are read (policy namespace selectors); dropping the rest keeps big clusters cheap.
    meta = obj.get("metadata") or {}
    return {"metadata": {k: meta[k] for k in ("name", "labels", "resourceVersion") if k in meta}}


def _name_only(obj: Object) -> Object:
    meta = obj.get("metadata") or {}
    return {"metadata": {k: meta[k] for k in ("name", "resourceVersion") if k in meta}}


@dataclass(frozen=True)
class SnapshotField:
    """How one ``ClusterSnapshot`` field is fed: from which resource, trimmed how, and shaped how."""

    name: str  # the ClusterSnapshot attribute
    resource: Resource
    build: Callable[[Informer], Any]
    transform: Callable[[Object], Object] = strip_managed_fields


SNAPSHOT_FIELDS: tuple[SnapshotField, ...] = (
    SnapshotField("training_runtimes", r.TRAINING_RUNTIMES, _by_key),
    SnapshotField("cluster_training_runtimes", r.CLUSTER_TRAINING_RUNTIMES, _by_name),
    SnapshotField("policies", r.TRAINJOB_POLICIES, _by_name),
    SnapshotField("namespace_labels", r.NAMESPACES, _labels_by_name, _namespace_metadata_only),
    SnapshotField("dataset_caches", r.DATASET_CACHES, _by_key),
    SnapshotField("jobsets", r.JOBSETS, _by_key),
    SnapshotField("priority_classes", r.PRIORITY_CLASSES, _names, _name_only),
)


class ClusterCaches:
    """The informers behind ``ClusterSnapshot``; ``synced`` once every one of them has listed.

    ``shared``: informers the caller already runs for some fields (the controller watches runtimes, DatasetCaches and
    JobSets for its own reasons); they are read, not started or stopped here, so nothing is watched twice.
    """

    def __init__(
        self,
        source: ListWatcher,
        *,
        fields: Iterable[SnapshotField] = SNAPSHOT_FIELDS,
        backoff: Callable[[], Backoff] = Backoff,
        watch_timeout_seconds: int = 300,
        shared: Mapping[str, Informer] | None = None,
    ) -> None:
        self.fields = tuple(fields)
        shared = dict(shared or {})
        unknown = set(shared) - {f.name for f in self.fields}
        if unknown:
            raise ValueError(f"shared informers for fields that are not snapshotted: {sorted(unknown)}")
        self._owned: dict[str, Informer] = {
            f.name: Informer(
                source, f.resource, transform=f.transform, backoff=backoff(), watch_timeout_seconds=watch_timeout_seconds
            )
            for f in self.fields
            if f.name not in shared
        }
        self.informers: dict[str, Informer] = {
            f.name: shared[f.name] if f.name in shared else self._owned[f.name] for f in self.fields
        }
        self._built: dict[str, tuple[int, Any]] = {}
        self._snapshot: ClusterSnapshot | None = None
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

    def snapshot(self) -> ClusterSnapshot:
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
        self._snapshot = ClusterSnapshot(**values)
        self._snapshot_versions = versions
        return self._snapshot
