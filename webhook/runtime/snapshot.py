"""The runtime snapshot (v2.3, ``pkg/runtime/core/snapshot.go``): a TrainJob keeps the runtime it started with.

On first reconcile the reconciler stores the whole runtime object in a ConfigMap; later reconciles read the runtime
back from it, so editing or deleting the runtime never changes a running job.

Deliberately different from upstream v2.3, which keeps the snapshot as ``<job>-runtime-snapshot`` in the TrainJob's
own namespace, owned by the TrainJob, and trusts whatever it holds: anyone who may edit ConfigMaps there (every
team member, typically) could replace it after admission and the controller would build a JobSet nobody admitted
(``privileged``, ``hostNetwork``, extra replicated jobs), and a YAML alias bomb in it would exhaust the controller's
memory. Here the snapshot lives where users cannot write:

* in the controller's own namespace (``--snapshot-namespace``; users get no rights there), named from the
  TrainJob's UID (``runtime-snapshot-<uid>``: a same-named successor never inherits it), labelled with the
  TrainJob's namespace, name and UID (cross-namespace ownerReferences do not exist, so the controller garbage-collects
  it itself when the TrainJob is gone), ``immutable``, created once;
* serialized as JSON (no aliases, no tags), at most ``MAX_SNAPSHOT_BYTES``, checked before parsing;
* read back only when namespace, name and labels all name this very TrainJob and it holds the runtime the
  TrainJob's runtimeRef names. A ``<job>-runtime-snapshot`` in the user's namespace (older versions) is never read.
"""

from __future__ import annotations

import json
import re
from typing import Any, Mapping

from trainguard.webhook.api.views import Meta, TrainJob
from trainguard.webhook.runtime.draft import as_object

DATA_KEY = "runtime.json"
# A ConfigMap holds at most 1 MiB; the bound is checked on write and, before any parsing, on read.
MAX_SNAPSHOT_BYTES = 768 * 1024
# JSON nesting deeper than this is refused before parsing (a runtime object is a few dozen levels deep at most).
MAX_SNAPSHOT_DEPTH = 100

LABEL_OF_NAMESPACE = "trainguard.io/runtime-snapshot-of-namespace"
LABEL_OF_NAME = "trainguard.io/runtime-snapshot-of-name"
LABEL_OF_UID = "trainguard.io/runtime-snapshot-of-uid"
MANAGED_BY = {"app.kubernetes.io/managed-by": "trainguard"}
# Used by ``trainguard render``, whose TrainJobs have no UID yet.
PLACEHOLDER_UID = "00000000-0000-0000-0000-000000000000"


class InvalidRuntimeSnapshot(ValueError):
    """The snapshot ConfigMap cannot be used for this TrainJob (message starts with "invalid runtime snapshot")."""


def snapshot_name(trainjob_uid: str) -> str:
    return f"runtime-snapshot-{trainjob_uid}"


def snapshot_owner(configmap: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """(namespace, name, uid) of the TrainJob a snapshot ConfigMap belongs to, from its labels; None if unlabelled."""
    labels = Meta.of(configmap).labels
    owner = (labels.get(LABEL_OF_NAMESPACE), labels.get(LABEL_OF_NAME), labels.get(LABEL_OF_UID))
    return owner if all(isinstance(v, str) and v for v in owner) else None  # type: ignore[return-value]


def build_runtime_snapshot(trainjob: Any, runtime: Any, namespace: str) -> dict:
    """The snapshot ConfigMap of ``trainjob`` in ``namespace`` (the controller's); raises ``InvalidRuntimeSnapshot``
    when the runtime is too large to be stored."""
    tj, rt = as_object(trainjob), as_object(runtime)
    # managedFields is apiserver bookkeeping, not part of the runtime's meaning (``rt`` is our copy).
    if "managedFields" in Meta.of(rt).raw:
        rt["metadata"].pop("managedFields")
    meta = Meta.of(tj)
    uid = meta.uid or ""
    if not uid:
        raise InvalidRuntimeSnapshot("invalid runtime snapshot: the TrainJob has no UID")
    text = json.dumps(rt, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    if len(text.encode()) > MAX_SNAPSHOT_BYTES:
        raise InvalidRuntimeSnapshot(
            f"invalid runtime snapshot: the runtime is {len(text.encode())} bytes as JSON, more than {MAX_SNAPSHOT_BYTES}")
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": snapshot_name(uid),
            "namespace": namespace,
            "labels": {**MANAGED_BY, LABEL_OF_NAMESPACE: meta.namespace, LABEL_OF_NAME: meta.name, LABEL_OF_UID: uid},
        },
        "immutable": True,
        "data": {DATA_KEY: text},
    }


def runtime_ref(trainjob: Mapping[str, Any]) -> tuple[str, str, str]:
    """(kind, apiGroup, name) with the CRD defaults applied."""
    ref = TrainJob(trainjob).runtime_ref
    return ref.kind, ref.api_group, ref.name


def runtime_from_snapshot(configmap: Any, trainjob: Any, namespace: str) -> dict:
    """The runtime stored in ``configmap``, when it is the snapshot of this TrainJob kept in ``namespace``."""
    cm, tj = as_object(configmap), as_object(trainjob)
    meta = Meta.of(tj)
    uid = meta.uid or ""
    cm_meta = Meta.of(cm)
    where = (cm_meta.namespace, cm_meta.name)
    if not uid or where != (namespace, snapshot_name(uid)):
        raise InvalidRuntimeSnapshot(
            f"invalid runtime snapshot: ConfigMap {where[0]}/{where[1]} is not {namespace}/{snapshot_name(uid)}")
    if snapshot_owner(cm) != (meta.namespace, meta.name, uid):
        raise InvalidRuntimeSnapshot(
            f"invalid runtime snapshot: ConfigMap {namespace}/{where[1]} is not labelled for TrainJob "
            f"{meta.namespace}/{meta.name} with UID {uid}")
    text = (cm.get("data") or {}).get(DATA_KEY)
    if not isinstance(text, str) or not text:
        raise InvalidRuntimeSnapshot(f"invalid runtime snapshot: data key {DATA_KEY!r} is missing")
    runtime = parse_bounded_json(text)
    if not isinstance(runtime, dict):
        raise InvalidRuntimeSnapshot("invalid runtime snapshot: not an object")
    kind, group, name = runtime_ref(tj)
    got_group = str(runtime.get("apiVersion", "")).split("/")[0]
    got = (runtime.get("kind"), got_group, Meta.of(runtime).get("name"))
    if got != (kind, group, name):
        raise InvalidRuntimeSnapshot(
            f"invalid runtime snapshot: holds {got[0]}.{got[1]} {got[2]!r}, runtimeRef names {kind}.{group} {name!r}"
        )
    return runtime


def parse_bounded_json(text: str) -> Any:
    """``json.loads`` with the size and nesting bounds checked first, so parsing cost is bounded by the cap."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_SNAPSHOT_BYTES:
        raise InvalidRuntimeSnapshot(f"invalid runtime snapshot: {size} bytes, more than {MAX_SNAPSHOT_BYTES}")
    if _max_depth(text) > MAX_SNAPSHOT_DEPTH:
        raise InvalidRuntimeSnapshot(f"invalid runtime snapshot: nested deeper than {MAX_SNAPSHOT_DEPTH}")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as e:
        raise InvalidRuntimeSnapshot(f"invalid runtime snapshot: not JSON: {e}") from e


# A JSON string, unrolled (no alternation per character: linear and fast on long strings).
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_BRACKET = re.compile(r"[\[\]{}]")


def _max_depth(text: str) -> int:
    """Bracket nesting outside strings (json.loads recurses per level; a deep document must not reach it)."""
    depth = deepest = 0
    for m in _BRACKET.finditer(_JSON_STRING.sub('""', text)):
        if m.group() in "[{":
            depth += 1
            deepest = max(deepest, depth)
            if deepest > MAX_SNAPSHOT_DEPTH:
                break  # enough to refuse it
        else:
            depth -= 1
    return deepest
