"""The runtime snapshot (v2.3, reference §3.2 step 1): a TrainJob keeps the runtime it started with.

On first reconcile the reconciler stores the whole runtime object as YAML in ConfigMap
``<job>-runtime-snapshot`` (key ``runtime``), controller-owned by the TrainJob; later reconciles read the runtime
back from it, so editing or deleting the runtime never changes a running job. A snapshot is only trusted when
it is controller-owned by this very TrainJob (same UID: a same-named successor must not inherit it) and holds
the kind, group and name the TrainJob's runtimeRef names.
"""

from __future__ import annotations

from typing import Any, Mapping

import yaml

from webhook.runtime.draft import as_object
from webhook.runtime.names import CLUSTER_TRAINING_RUNTIME_KIND, TRAINER_GROUP, TRAINJOB_KIND
from webhook.runtime.objects import owned_object

DATA_KEY = "runtime"


class InvalidRuntimeSnapshot(ValueError):
    """The snapshot ConfigMap cannot be used for this TrainJob (message starts with "invalid runtime snapshot")."""


def snapshot_name(job: str) -> str:
    return f"{job}-runtime-snapshot"


def build_runtime_snapshot(trainjob: Any, runtime: Any) -> dict:
    tj, rt = as_object(trainjob), as_object(runtime)
    # managedFields is apiserver bookkeeping, not part of the runtime's meaning.
    (rt.get("metadata") or {}).pop("managedFields", None)
    name = (tj.get("metadata") or {}).get("name", "")
    configmap = owned_object("v1", "ConfigMap", snapshot_name(name), tj)
    configmap["data"] = {DATA_KEY: yaml.safe_dump(rt, sort_keys=False)}
    return configmap


def runtime_ref(trainjob: Mapping[str, Any]) -> tuple[str, str, str]:
    """(kind, apiGroup, name) with the CRD defaults applied."""
    ref = (trainjob.get("spec") or {}).get("runtimeRef") or {}
    return ref.get("kind") or CLUSTER_TRAINING_RUNTIME_KIND, ref.get("apiGroup") or TRAINER_GROUP, ref.get("name", "")


def runtime_from_snapshot(configmap: Any, trainjob: Any) -> dict:
    cm, tj = as_object(configmap), as_object(trainjob)
    uid = (tj.get("metadata") or {}).get("uid")
    owner = next((r for r in (cm.get("metadata") or {}).get("ownerReferences") or [] if r.get("controller")), None)
    if owner is None or owner.get("kind") != TRAINJOB_KIND or owner.get("uid") != uid:
        raise InvalidRuntimeSnapshot(f"invalid runtime snapshot: ConfigMap {snapshot_name((tj.get('metadata') or {}).get('name', ''))} is not controlled by TrainJob with UID {uid}")
    text = (cm.get("data") or {}).get(DATA_KEY)
    if not text:
        raise InvalidRuntimeSnapshot(f"invalid runtime snapshot: data key {DATA_KEY!r} is missing")
    try:
        runtime = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise InvalidRuntimeSnapshot(f"invalid runtime snapshot: {e}") from e
    if not isinstance(runtime, dict):
        raise InvalidRuntimeSnapshot("invalid runtime snapshot: not an object")
    kind, group, name = runtime_ref(tj)
    got_group = str(runtime.get("apiVersion", "")).split("/")[0]
    got = (runtime.get("kind"), got_group, (runtime.get("metadata") or {}).get("name"))
    if got != (kind, group, name):
        raise InvalidRuntimeSnapshot(
            f"invalid runtime snapshot: holds {got[0]}.{got[1]} {got[2]!r}, runtimeRef names {kind}.{group} {name!r}"
        )
    return runtime
