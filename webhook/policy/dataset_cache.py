"""DatasetCache checks: the TrainJob's reference to a cache, the DatasetCache object itself, and where it may read.

A TrainJob opts into a node-local cache with annotation ``trainguard.io/dataset-cache: <name>``; the reconciler
wires the JobSet to that cache's agent, so a name that does not exist in the TrainJob's namespace would surface
only as a build failure. We refuse it at admission instead (CREATE, and UPDATE when the annotation changes).

Where a DatasetCache may read from is the cluster admin's decision, not the namespace user's: the agent DaemonSet
is created by the controller, so a hostPath in a DatasetCache would otherwise let anyone who may create one in
their namespace mount any directory of every node (``/``, ``/etc``, the kubelet's credentials) past Pod Security,
and have the agent serve its files to their pods. ``DatasetCacheSources`` is that decision: the hostPath roots a
source must lie below, and whether PersistentVolumeClaims are allowed. It comes from flags of ``trainguard
webhook``, ``trainguard controller`` and ``trainguard render`` (Helm values ``datasetCache.*``), never from an
object a namespace user can write, and both enforce it with ``source_errors``: the webhook at ``kubectl apply``,
the controller before it builds the agent DaemonSet (a cache created while the webhook was down, or before the
admin narrowed the setting). With nothing configured, hostPath sources are refused; PVC sources are allowed,
because a PVC of the cache's own namespace is already governed by that namespace's storage RBAC and quota.

Paths are compared after cleaning (repeated ``/`` and ``.`` components dropped), component by component: root
``/data`` admits ``/data`` and ``/data/x``, never ``/database``. A path with a ``..`` component is refused outright
rather than resolved, and the controller mounts the cleaned path, so what is checked is exactly what is mounted.
What this cannot see is the node itself: a symlink below an allowed root is followed by the kubelet when it mounts,
so allowed roots must be directories that workloads cannot write to.

Unlike upstream Kubeflow Trainer (which has no DatasetCache), none of this has an upstream counterpart.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from trainguard.webhook.api.trainguard import MAX_SHARD_GLOB_LENGTH, MAX_SHARD_GLOB_WILDCARDS
from trainguard.webhook.api.views import DatasetCache
from trainguard.webhook.field import FieldError, aggregate, forbidden, invalid, too_long
from trainguard.webhook.runtime.dataset_cache import DATASET_CACHE_ANNOTATION, referenced_cache_name

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
ANNOTATION_PATH = f"metadata.annotations[{DATASET_CACHE_ANNOTATION}]"
HOST_PATH_FIELD = "spec.source.hostPath.path"
PVC_FIELD = "spec.source.persistentVolumeClaim"
SHARDS_FIELD = "spec.source.shards"
# Where an admin changes the setting, named in every refusal so a user knows whom to ask and what for.
HOST_PATH_SETTING = "--dataset-cache-allowed-host-path (Helm value datasetCache.allowedHostPathRoots)"
PVC_SETTING = "--dataset-cache-allow-pvc (Helm value datasetCache.allowPersistentVolumeClaims)"


class UncleanPath(ValueError):
    """A host path that is not absolute, contains a ``..`` component or a NUL byte."""


def clean_host_path(path: str) -> str:
    """``path`` absolute and cleaned (``//`` and ``.`` components dropped, no trailing ``/``); raises
    ``UncleanPath`` for a relative path or one with a ``..`` component, which is refused, never resolved."""
    if not isinstance(path, str) or not path.startswith("/"):
        raise UncleanPath("must be an absolute path")
    if "\x00" in path:
        raise UncleanPath("must not contain a NUL byte")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise UncleanPath("must not contain '..' components")
    return "/" + "/".join(parts)


def is_below(path: str, root: str) -> bool:
    """Whether cleaned ``path`` is ``root`` or lies below it, component by component (``/data`` covers
    ``/data/x``, not ``/database``)."""
    root_parts = [p for p in root.split("/") if p]
    return [p for p in path.split("/") if p][: len(root_parts)] == root_parts


@dataclass(frozen=True)
class DatasetCacheSources:
    """The admin's setting: where DatasetCaches may read from. The default refuses every hostPath."""

    # Cleaned absolute directories; a hostPath source must be one of them or lie below one.
    allowed_host_path_roots: tuple[str, ...] = ()
    allow_persistent_volume_claims: bool = True

    @staticmethod
    def of(roots: Iterable[str] = (), allow_persistent_volume_claims: bool = True) -> "DatasetCacheSources":
        """Clean and de-duplicate ``roots``; raises ``UncleanPath`` (naming the root) for one that is not clean."""
        cleaned: list[str] = []
        for root in roots:
            try:
                cleaned.append(clean_host_path(root))
            except UncleanPath as e:
                raise UncleanPath(f"allowed hostPath root {root!r} {e}") from e
        return DatasetCacheSources(tuple(dict.fromkeys(cleaned)), allow_persistent_volume_claims)

    def describe(self) -> str:
        """One line for logs and --help: what this setting allows."""
        roots = ", ".join(self.allowed_host_path_roots) or "none"
        return f"hostPath roots: {roots}; PersistentVolumeClaims: {'allowed' if self.allow_persistent_volume_claims else 'refused'}"


def source_errors(obj: Mapping[str, Any], sources: DatasetCacheSources) -> list[FieldError]:
    """Why the source of DatasetCache ``obj`` is not allowed by ``sources`` (empty: allowed)."""
    source = DatasetCache(obj).source
    errors: list[FieldError] = []
    if source.has_host_path:  # a hostPath without a path is refused below, not passed over
        path = source.host_path
        try:
            cleaned = clean_host_path(path)  # type: ignore[arg-type]
        except UncleanPath as e:
            errors.append(invalid(HOST_PATH_FIELD, path, str(e)))
        else:
            roots = sources.allowed_host_path_roots
            if not roots:
                errors.append(invalid(
                    HOST_PATH_FIELD, path,
                    "hostPath sources are not allowed on this cluster: the cluster admin has allowed no hostPath "
                    f"roots ({HOST_PATH_SETTING}); use a persistentVolumeClaim source or ask for a root"))
            elif not any(is_below(cleaned, root) for root in roots):
                errors.append(invalid(
                    HOST_PATH_FIELD, path,
                    f"must be one of, or lie below one of, the hostPath roots the cluster admin allows: "
                    f"{', '.join(roots)} ({HOST_PATH_SETTING})"))
    if source.has_claim and not sources.allow_persistent_volume_claims:
        errors.append(forbidden(
            PVC_FIELD, f"PersistentVolumeClaim sources are not allowed on this cluster ({PVC_SETTING})"))
    return errors


def source_findings(
    obj: Mapping[str, Any], old: Mapping[str, Any] | None, sources: DatasetCacheSources,
) -> tuple[list[FieldError], list[str]]:
    """The admission side of ``source_errors``: (errors to deny with, warnings).

    An UPDATE that keeps a source the admin has since disallowed is admitted with a warning: the controller
    already refuses to run agents for it, and denying would block every label edit and the garbage collector's
    removal of finalizers on an object that is only being cleaned up. Changing the source is checked as a CREATE.
    """
    errors = source_errors(obj, sources)
    if errors and old is not None and DatasetCache(old).source.raw == DatasetCache(obj).source.raw:
        name = DatasetCache(obj).metadata.name or ""
        return [], [f'DatasetCache "{name}": its source is no longer allowed, so no cache agents run for it: '
                    f"{aggregate(errors)}"]
    return errors, []


def reference_errors(
    trainjob: Mapping[str, Any], old: Mapping[str, Any] | None, namespace: str,
    caches: Mapping[tuple[str, str], Any],
) -> list[FieldError]:
    name = referenced_cache_name(trainjob)
    if name is None or (old is not None and referenced_cache_name(old) == name):
        return []
    if (namespace, name) in caches:
        return []
    known = sorted(n for ns, n in caches if ns == namespace)
    return [invalid(
        ANNOTATION_PATH, name,
        f'no DatasetCache "{name}" in namespace "{namespace}"; create it first or name one of: '
        f'{", ".join(known) if known else "(none exist in this namespace)"}',
    )]


def shard_glob_errors(obj: Mapping[str, Any]) -> list[FieldError]:
    """The glob within its bounds (the CRD's too; the webhook and the controller check it before the apiserver's CEL
    has, or without it): at most ``MAX_SHARD_GLOB_LENGTH`` characters and ``MAX_SHARD_GLOB_WILDCARDS`` ``*``."""
    shards = DatasetCache(obj).source.shards
    if not isinstance(shards, str):
        return []  # the door check names the type
    if len(shards) > MAX_SHARD_GLOB_LENGTH:
        return [too_long(SHARDS_FIELD, MAX_SHARD_GLOB_LENGTH)]
    stars = shards.count("*")
    if stars > MAX_SHARD_GLOB_WILDCARDS:
        return [invalid(SHARDS_FIELD, shards, f"must contain at most {MAX_SHARD_GLOB_WILDCARDS} '*' characters "
                                              f"(it has {stars}): each one multiplies the work of matching a name")]
    return []


def dataset_cache_errors(obj: Mapping[str, Any]) -> list[FieldError]:
    """What the CRD's CEL rules say about the glob, and what they cannot say: the name becomes a host directory
    and an agent object name."""
    errors = shard_glob_errors(obj)
    name = DatasetCache(obj).metadata.name or ""
    if not _DNS_LABEL.match(name) or len(name) > 63:
        errors.append(invalid("metadata.name", name,
                              "must be a DNS-1123 label (lowercase letters, digits, '-', at most 63 characters): the "
                              "cache agent's host directory and DaemonSet are named after it"))
    return errors
