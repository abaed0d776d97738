"""Strategic merge for the JobSet spec and PodSpec subset, and the three layers of the effective job.

A runtime template is refined in three layers, in this order (upstream's ``mergeRuntimePatches``
and ``newRuntimeInfo`` in ``pkg/runtime/core/trainingruntime.go``, then the JobSet builder):

1. ``runtimePatches`` in list order, each a JSON strategic-merge patch of the JobSet spec (later wins; the
   original replicatedJobs order is restored afterwards so a patch cannot reorder jobs);
2. ``trainer.resourcesPerNode`` strategic-merged per resource into the ``node`` container (v2.3; before 2.3 it
   replaced the whole ``resources`` and silently dropped runtime GPUs, issue #3602);
3. the trainer's ``image``/``command``/``args`` replaced wholesale and ``env`` upserted by name.

Merge keys follow the Go types' ``patchMergeKey`` tags (JobSet v0.12 and core/v1). Lists without one (tolerations,
command, args, envFrom, nodeSelectorTerms, ...) are replaced; maps are merged. ``strategic_merge`` itself honours
apimachinery's directives (a ``null`` deletes the key, ``{"$patch": "delete", <key>: v}`` deletes a list item,
``$patch: replace`` replaces a map). The two TrainJob layers never reach it with directives, though: upstream
marshals ``runtimePatches`` and ``resourcesPerNode`` from typed Go structs (and the API server prunes unknown
fields and nulls), so a ``null`` or a ``$``-key there is inert, not a deletion; ``typed_patch`` drops them first.
All functions return new values and never modify their arguments.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from trainguard.webhook.api import views
from trainguard.webhook.runtime.json_copy import deep_copy

# Field name -> merge key of the list under it. Field names are unambiguous inside a JobSet spec.
MERGE_KEYS: Mapping[str, str] = {
    "replicatedJobs": "name",
    "dependsOn": "name",
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "imagePullSecrets": "name",
    "schedulingGates": "name",
    "resourceClaims": "name",
    "claims": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "ports": "containerPort",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
}

_DIRECTIVE = "$patch"


class MergeError(ValueError):
    """A patch that cannot be merged (e.g. a list item without its merge key)."""


def strategic_merge(base: Any, patch: Any, field: str = "") -> Any:
    """Merge ``patch`` onto ``base`` with strategic-merge-patch semantics; ``field`` names the list being merged."""
    return _merge_owned(deep_copy(dict(base) if isinstance(base, Mapping) else base), patch, field)


def _merge_owned(base: Any, patch: Any, field: str = "") -> Any:
    """``strategic_merge`` onto a ``base`` the caller owns: it is modified and reused, so nothing is copied twice.

    Only the patch's values are copied (``_strip_directives``); a pipeline that deep-copied its input once can merge
    any number of patches without copying the (much larger) base again at every level.
    """
    if isinstance(base, Mapping) and isinstance(patch, Mapping):
        if patch.get(_DIRECTIVE) == "replace":
            return _strip_directives({k: v for k, v in patch.items() if k != _DIRECTIVE})
        out = base if isinstance(base, dict) else dict(base)
        for key, value in patch.items():
            if key == _DIRECTIVE:
                continue
            if value is None:
                out.pop(key, None)
            elif key in out:
                out[key] = _merge_owned(out[key], value, key)
            else:
                out[key] = _strip_directives(value)
        return out
    if isinstance(base, list) and isinstance(patch, list) and field in MERGE_KEYS:
        return _merge_keyed_list(base, patch, MERGE_KEYS[field], field)
    return _strip_directives(patch)


def _merge_keyed_list(out: list, patch: list, key: str, field: str) -> list:
    """Merge ``patch`` items into the owned list ``out`` by ``key`` (modified in place and returned).

    Linear in ``len(out) + len(patch)``: items are found through an index of key -> positions instead of a scan per
    patch item (a 60,000-item patch against its own growing result was quadratic and held the event loop for
    minutes). Same result as the scan: an item merges into the FIRST live item with its key, a deletion removes
    that one, and a later duplicate of the key (lists from files need not be unique) is found next.
    """
    positions: dict[Any, list[int]] = {}
    for i, cur in enumerate(out):
        if isinstance(cur, Mapping):
            positions.setdefault(_token(cur.get(key)), []).append(i)
    deleted: set[int] = set()
    for item in patch:
        if not isinstance(item, Mapping) or key not in item:
            raise MergeError(f"{field}: every patch item must be an object with {key!r}")
        live = positions.get(_token(item[key]))
        index = live[0] if live else None
        if item.get(_DIRECTIVE) == "delete":
            if index is not None:
                live.pop(0)
                deleted.add(index)
            continue
        if index is None:
            positions.setdefault(_token(item[key]), []).append(len(out))
            out.append(_strip_directives(item))
        else:
            out[index] = _merge_owned(out[index], item, field)
    if deleted:
        out[:] = [cur for i, cur in enumerate(out) if i not in deleted]
    return out


def _token(value: Any) -> Any:
    """A dict key that is equal exactly when the merge-key values are ``==`` (unhashable values by their JSON)."""
    try:
        hash(value)
        return value
    except TypeError:
        return (_token, json.dumps(value, sort_keys=True, default=repr))


def _strip_directives(value: Any) -> Any:
    """A patch value copied into the result: directives and nulls have no meaning outside a merge."""
    if isinstance(value, Mapping):
        return {k: _strip_directives(v) for k, v in value.items() if k != _DIRECTIVE and v is not None}
    if isinstance(value, list):
        return [_strip_directives(v) for v in value if not (isinstance(v, Mapping) and v.get(_DIRECTIVE) == "delete")]
    return deep_copy(value)


def typed_patch(value: Any) -> Any:
    """A patch as upstream's typed structs serialise it: ``null`` values and ``$``-directive keys dropped.

    ``runtimePatches[].trainingRuntimeSpec`` and ``trainer.resourcesPerNode`` are Go structs upstream: a
    ``{"$patch": "delete"}`` has no field to land in and a nil pointer/map is omitted, so neither can delete what
    the runtime declares (a list item keeps its merge key and merges as an empty change).
    """
    if isinstance(value, Mapping):
        return {k: typed_patch(v) for k, v in value.items() if v is not None and not (isinstance(k, str) and k.startswith("$"))}
    if isinstance(value, list):
        return [typed_patch(v) for v in value if v is not None]
    return value


# -- layer 1: runtimePatches --------------------------------------------------------------------------------


def merge_runtime_patches(jobset_spec: Mapping[str, Any], patches: Sequence[Mapping[str, Any]]) -> dict:
    """The runtime's JobSet spec with every patch's ``template.spec`` merged in list order."""
    merged: dict = deep_copy(dict(jobset_spec))  # the one copy of the runtime's spec; patches merge into it
    original_order = [rj.get("name") for rj in jobset_spec.get("replicatedJobs") or []]
    for patch in patches:
        spec_patch = typed_patch(views.patch_template(patch).spec)
        if spec_patch:
            merged = _merge_owned(merged, spec_patch)
    if "replicatedJobs" in merged:
        position = {name: i for i, name in enumerate(original_order)}
        # sorted() is stable: jobs a patch added (validation rejects them) keep their relative order at the end.
        merged["replicatedJobs"] = sorted(
            merged["replicatedJobs"], key=lambda rj: position.get(rj.get("name"), len(position))
        )
    return merged


def merge_template_metadata(
    template_metadata: Mapping[str, Any] | None, patches: Sequence[Mapping[str, Any]]
) -> tuple[dict[str, str], dict[str, str]]:
    """JobSet labels and annotations: the runtime template's metadata, then each patch's (later wins)."""
    template = views.Meta(template_metadata)
    labels, annotations = dict(template.labels), dict(template.annotations)
    for patch in patches:
        meta = views.patch_template(patch).metadata
        labels.update(meta.labels)
        annotations.update(meta.annotations)
    return labels, annotations


# -- layers 2 and 3: trainer overrides on one container --------------------------------------------------------


def merge_resources(container: Mapping[str, Any], resources_per_node: Mapping[str, Any] | None) -> dict:
    """``resourcesPerNode`` merged per resource name into the container's resources (claims by name)."""
    out = deep_copy(dict(container))
    if resources_per_node:
        out["resources"] = _merge_owned(out.get("resources") or {}, typed_patch(resources_per_node))
    return out


def upsert(items: Iterable[Mapping[str, Any]] | None, new_items: Iterable[Mapping[str, Any]], key: str) -> list[dict]:
    """Replace the item with the same ``key`` in place, else append (upstream ``apply.Upsert*``).

    Linear: the first position of each key is indexed once (a scan per new item was quadratic in the env list).
    """
    out = [deep_copy(dict(i)) for i in items or []]
    first: dict[Any, int] = {}
    for i, cur in enumerate(out):
        first.setdefault(_token(cur.get(key)), i)
    for new in new_items:
        token = _token(new.get(key))
        index = first.get(token)
        if index is None:
            first[token] = len(out)
            out.append(deep_copy(dict(new)))
        else:
            out[index] = deep_copy(dict(new))
    return out


def upsert_ports(items: Iterable[Mapping[str, Any]] | None, new_items: Iterable[Mapping[str, Any]]) -> list[dict]:
    """Ports are the same port when their containerPort or (non-empty) name matches."""
    out = [deep_copy(dict(i)) for i in items or []]
    for new in new_items:
        index = next(
            (
                i
                for i, cur in enumerate(out)
                if cur.get("containerPort") == new.get("containerPort") or (new.get("name") and cur.get("name") == new.get("name"))
            ),
            None,
        )
        if index is None:
            out.append(deep_copy(dict(new)))
        else:
            out[index] = deep_copy(dict(new))
    return out


def override_container(
    container: Mapping[str, Any],
    *,
    image: str | None = None,
    command: Sequence[str] | None = None,
    args: Sequence[str] | None = None,
    env: Sequence[Mapping[str, Any]] | None = None,
) -> dict:
    """The trainer layer: image/command/args replaced when given, env upserted by name."""
    out = deep_copy(dict(container))
    if image:
        out["image"] = image
    if command is not None:
        out["command"] = list(command)
    if args is not None:
        out["args"] = list(args)
    if env:
        out["env"] = upsert(out.get("env"), env, "name")
    return out
