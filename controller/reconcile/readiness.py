"""What the controller's ``/readyz`` checks, decided from what its watch caches already know (pure: no API call per
probe, so a kubelet probing every few seconds costs the apiserver nothing).

Not ready, each problem one line naming the reason and the fix:

* a kind the controller needs is not served: its list or watch answers 404, which is what the apiserver says both
  for a CRD that is not installed and for one that does not serve the version the controller uses (TrainJob and
  runtimes ``trainer.kubeflow.org/v1alpha1``, JobSet ``jobset.x-k8s.io/v1alpha2``, trainguard.io's CRDs);
* the snapshot namespace (``--snapshot-namespace``) does not exist: every new TrainJob's runtime snapshot is
  created there, so nothing could be built (judged from the Namespace cache, once it has listed);
* a cache has not listed yet (with its last list/watch error, e.g. a 403 from missing RBAC).

Optional kinds (PodGroups, Kueue Workloads) are not passed in: their absence is a supported setup.
The same texts are what a TrainJob's ``ControllerMisconfigured`` event says (``trainjob``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from trainguard.webhook.kube.resources import NAMESPACES, Resource
from trainguard.webhook.kube.served import crd_name, not_served
from trainguard.process.probes import Probe

REASON_MISCONFIGURED = "ControllerMisconfigured"


@dataclass(frozen=True)
class CacheState:
    """One required watch cache as /readyz sees it (``Informer.synced``, ``not_served``, ``last_error``)."""

    resource: Resource
    synced: bool
    not_served: bool = False
    error: str = ""


@dataclass(frozen=True)
class Problem:
    check: str  # "crd", "snapshot-namespace" or "caches"
    message: str  # the reason and the fix, one line


def snapshot_namespace_missing(namespace: str) -> str:
    return (f'snapshot namespace "{namespace}" does not exist: create it (kubectl create namespace {namespace}) '
            f"or start the controller with --snapshot-namespace naming an existing namespace users cannot write")


def problems(caches: Iterable[CacheState], *, snapshot_namespace: str,
             snapshot_namespace_exists: bool) -> list[Problem]:
    """Every reason the controller cannot do its work, most specific first; empty when ready."""
    caches = list(caches)
    # Several caches may watch one kind (ConfigMaps, Pods): each unserved kind once.
    found = [Problem("crd", not_served(r)) for r in dict.fromkeys(c.resource for c in caches if c.not_served)]
    namespaces_listed = any(c.resource == NAMESPACES and c.synced for c in caches)
    if namespaces_listed and not snapshot_namespace_exists:
        found.append(Problem("snapshot-namespace", snapshot_namespace_missing(snapshot_namespace)))
    listing = [c for c in caches if not c.synced and not c.not_served]
    if listing:
        names = ", ".join(crd_name(c.resource) + (f" ({c.error})" if c.error else "") for c in listing)
        found.append(Problem("caches", f"caches not synced: {names}; the controller log has each list/watch error"))
    return found


def probe(found: Sequence[Problem]) -> Probe:
    if not found:
        return Probe(True)
    return Probe(False, "".join(f"{p.message}\n" for p in found))
