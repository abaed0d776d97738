"""What is noise in a comparison of two clusters, and how two readings are compared.

Removed everywhere: server-assigned metadata (uid, resourceVersion, generation, creationTimestamp, managedFields,
selfLink), kubectl's last-applied annotation, ownerReference uids, timestamps (any RFC 3339 string becomes
``<time>``), the session's namespace and test-scope label value, and trainguard's own documented bookkeeping labels
and annotations (``trainguard.io/state``, ``trainguard.io/nodes``, ``trainguard.io/gpus``,
``trainguard.io/policy-effects``, ``trainguard.io/scheduler-name``), which upstream has no equivalent of. Secrets are compared by type and key set (their values are random key material on
both sides). A zero Go struct that upstream stores as ``{}`` (pod template ``metadata``, container ``resources``,
a claim template's ``status``) equals an absent one. Container env is compared by name (upstream's own order varies
from one manager start to the next, see ``_env_by_name``). Nothing else is touched: other lists' order, defaults and
volumes are compared as stored.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any, Iterator

_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")
METADATA_NOISE = ("uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "selfLink")
ANNOTATION_NOISE = ("kubectl.kubernetes.io/last-applied-configuration",)
# trainguard's documented bookkeeping (README "running signal" and policy-effects rows; the test registration's scope)
TRAINGUARD_KEYS = ("trainguard.io/state", "trainguard.io/nodes", "trainguard.io/gpus", "trainguard.io/policy-effects",
                   "trainguard.io/scheduler-name", "trainguard.io/test-scope")


# Go marshals a zero non-pointer struct as {} where trainguard omits the key; a client decodes both to the same
# value. Only these struct-typed keys: an empty map elsewhere (emptyDir: {}, torch: {}) means something.
ZERO_STRUCTS = ("metadata", "resources", "status")


def _drop_zero_structs(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_zero_structs(v) for k, v in value.items() if not (k in ZERO_STRUCTS and v == {})}
    if isinstance(value, list):
        return [_drop_zero_structs(v) for v in value]
    return value


def _env_by_name(value: Any) -> Any:
    """Container env sorted by name. Upstream's framework builds its plugin lists by ranging over a Go map
    (pkg/runtime/framework/core/framework.go), so whether an ML plugin's env (DMLC_*, JAX_*, OMPI_*) lands before or
    after the trainer's env changes from one manager start to the next: the order is not upstream behaviour."""
    if isinstance(value, dict):
        out = {k: _env_by_name(v) for k, v in value.items()}
        env = out.get("env")
        if isinstance(env, list) and all(isinstance(e, dict) and "name" in e for e in env):
            out["env"] = sorted(env, key=lambda e: str(e["name"]))
        return out
    if isinstance(value, list):
        return [_env_by_name(v) for v in value]
    return value


def _strip_meta(meta: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in meta.items() if k not in METADATA_NOISE}
    for key, noise in (("annotations", ANNOTATION_NOISE + TRAINGUARD_KEYS), ("labels", TRAINGUARD_KEYS)):
        if key in meta:
            kept = {k: v for k, v in (meta[key] or {}).items() if k not in noise}
            if kept:
                meta[key] = kept
            else:
                del meta[key]
    if "ownerReferences" in meta:
        meta["ownerReferences"] = [{k: v for k, v in ref.items() if k != "uid"} for ref in meta["ownerReferences"]]
    return meta


def _times(value: Any, namespace: str) -> Any:
    if isinstance(value, dict):
        return {k: _times(v, namespace) for k, v in value.items()}
    if isinstance(value, list):
        return [_times(v, namespace) for v in value]
    if isinstance(value, str):
        if _TIME.match(value):
            return "<time>"
        if namespace and namespace in value:
            return value.replace(namespace, "<ns>")
    return value


def normalize_object(obj: dict[str, Any], namespace: str) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    obj["metadata"] = _strip_meta(obj.get("metadata") or {})
    if obj.get("kind") == "Secret":
        obj = {"kind": "Secret", "metadata": obj["metadata"], "type": obj.get("type"),
               "keys": sorted((obj.get("data") or {}).keys())}
    return _env_by_name(_drop_zero_structs(_times(obj, namespace)))


_TIME_IN_TEXT = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})")


def normalize_message(message: str, namespace: str) -> str:
    message = _TIME_IN_TEXT.sub("<time>", message)
    return message.replace(namespace, "<ns>") if namespace else message


def normalize_record(admission: dict[str, dict[str, Any]], objects: dict[str, dict[str, Any]],
                     namespace: str) -> dict[str, Any]:
    return {
        "admission": {k: {**v, "message": normalize_message(v["message"], namespace),
                          "warnings": [normalize_message(w, namespace) for w in v["warnings"]]}
                      for k, v in admission.items()},
        "objects": {k: normalize_object(v, namespace) for k, v in objects.items()},
    }


def diff(a: Any, b: Any, path: str = "") -> Iterator[tuple[str, Any, Any]]:
    """(path, upstream value, trainguard value) for every leaf that differs; a missing side is ``<absent>``."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            sub = f"{path}.{k}" if path else str(k)
            if k not in a:
                yield sub, "<absent>", b[k]
            elif k not in b:
                yield sub, a[k], "<absent>"
            else:
                yield from diff(a[k], b[k], sub)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            yield from diff(x, y, f"{path}[{i}]")
    elif a != b:
        yield path, a, b


def render_diff(lines: list[tuple[str, Any, Any]], limit: int = 40) -> str:
    def short(v: Any) -> str:
        text = v if isinstance(v, str) else json.dumps(v, sort_keys=True)
        return text if len(text) <= 400 else text[:400] + "..."

    out = [f"  {p}\n    upstream:   {short(a)}\n    trainguard: {short(b)}" for p, a, b in lines[:limit]]
    if len(lines) > limit:
        out.append(f"  ... and {len(lines) - limit} more")
    return "\n".join(out)
