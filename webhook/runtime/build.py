"""``build_objects``: every object the reconciler server-side-applies for one TrainJob, in apply order.

Pure: what already exists in the cluster comes in as ``ExistingObjects`` and key material through a
``KeySource``. Skip rules (upstream's JobSet and pod-group builders):
a running JobSet (it exists, and neither it nor the TrainJob
is suspended) is never re-applied, and an existing PodGroup is frozen unless the TrainJob is suspended; Secrets
holding keys are created once. Building twice from the same inputs gives the same objects.

``apply_order`` is the order the reconciler writes them in: every object the JobSet's pods depend on (MPI Secret
and hostfile, PodGroup, Flux ConfigMap and Secret) first, the JobSet last, so a dependant that cannot be created
(its CRD is not installed) stops the reconcile before any pod exists: no JobSet runs without its gang PodGroup or
its MPI keys. (Upstream applies in its plugins' map order, which Go randomises per process.)
"""

from __future__ import annotations

from typing import Any, Mapping

from trainguard.webhook.api.views import KubeObject, TrainJob
from trainguard.webhook.runtime import jobset, registry
from trainguard.webhook.runtime.draft import BuildError, as_object
from trainguard.webhook.runtime.effective import compute
from trainguard.webhook.runtime.keys import KeySource
from trainguard.webhook.runtime.names import DATASET_CACHE_ANNOTATION
from trainguard.webhook.runtime.plugin import BuildContext, BuildsObjects, ExistingObjects


def build_objects(
    trainjob: Any,
    runtime: Any,
    *,
    keys: KeySource,
    existing: ExistingObjects = ExistingObjects(),
    dataset_cache: Any = None,
) -> list[dict]:
    tj = as_object(trainjob)
    job, draft = compute(tj, runtime)
    objects: list[dict] = []
    if not jobset.is_running(tj, existing.jobset):
        built = jobset.build_jobset(tj, job.labels, job.annotations, job.spec)
        objects.append(_wire_dataset_cache(built, tj, dataset_cache))
    ctx = BuildContext(trainjob=tj, pod_sets=job.pod_sets, keys=keys, existing=existing)
    for plugin in registry.active(draft.runtime_view):
        if registry.offers(plugin, BuildsObjects):
            objects += plugin.build(draft, ctx)
    return objects


def apply_order(objects: list[dict]) -> list[dict]:
    """``objects`` with the JobSet moved last, the others in build order."""
    return [o for o in objects if o.get("kind") != "JobSet"] + [o for o in objects if o.get("kind") == "JobSet"]


def _wire_dataset_cache(built: dict, trainjob: Mapping[str, Any], dataset_cache: Any) -> dict:
    wanted = TrainJob(trainjob).metadata.annotations.get(DATASET_CACHE_ANNOTATION)
    if not wanted:
        return built
    if dataset_cache is None:
        raise BuildError(f"DatasetCache {wanted!r} named by annotation {DATASET_CACHE_ANNOTATION} was not provided")
    cache = as_object(dataset_cache)
    got = KubeObject(cache).metadata.get("name")
    if got != wanted:
        raise BuildError(f"DatasetCache {got!r} was provided but annotation {DATASET_CACHE_ANNOTATION} names {wanted!r}")
    # Imported here: only jobs that name a DatasetCache need the wiring code, so other builds never load it.
    from trainguard.webhook.runtime.dataset_cache import DatasetCacheWiringError, wire_dataset_cache

    try:
        return wire_dataset_cache(built, trainjob, cache)
    except DatasetCacheWiringError as e:
        # One error type for the reconciler to report: every "cannot build" is a BuildError.
        raise BuildError(f"cannot wire DatasetCache {wanted!r}: {e}") from e
