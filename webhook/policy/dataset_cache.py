"""DatasetCache checks: the TrainJob's reference to a cache, and the DatasetCache object itself.

A TrainJob opts into a node-local cache with annotation ``trainguard.io/dataset-cache: <name>``; the reconciler
wires the JobSet to that cache's agent, so a name that does not exist in the TrainJob's namespace would surface
only as a build failure. We refuse it at admission instead (CREATE, and UPDATE when the annotation changes).
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from webhook.field import FieldError, invalid
from webhook.runtime.dataset_cache import DATASET_CACHE_ANNOTATION, referenced_cache_name

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
ANNOTATION_PATH = f"metadata.annotations[{DATASET_CACHE_ANNOTATION}]"


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


def dataset_cache_errors(obj: Mapping[str, Any]) -> list[FieldError]:
    """What the CRD's CEL rules cannot say: the name becomes a host directory and an agent object name."""
    name = (obj.get("metadata") or {}).get("name") or ""
    if not _DNS_LABEL.match(name) or len(name) > 63:
        return [invalid("metadata.name", name,
                        "must be a DNS-1123 label (lowercase letters, digits, '-', at most 63 characters): the "
                        "cache agent's host directory and DaemonSet are named after it")]
    return []
