"""Strict decoding of a manifest against its CRD's structural schema, as ``kubectl apply --validate=strict`` and the
apiserver do it: unknown fields and wrong types are errors naming the field's path; a null in a field that is not
``nullable`` is dropped, as the apiserver prunes it.

Pure: the CRD documents come in parsed (``trainguard render`` reads ``crds/``). The walk follows the schema, so it
visits each value of the object at most once and never descends deeper than the schema does (CRD schemas have no
references): linear in the object, bounded by the schema. CEL rules, enums, patterns and bounds stay with the
webhook's own door check and the apiserver.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date
from typing import Any

from trainguard.webhook.api.views.base import resolve

Schema = dict[str, Any]
# Errors shown per document; the rest are counted ("and N more").
MAX_ERRORS = 20

_STRING: Schema = {"type": "string"}
_STRING_MAP: Schema = {"type": "object", "additionalProperties": _STRING}
# metav1.ObjectMeta: a CRD's schema says only `metadata: {type: object}`; the apiserver decodes it as this type.
OBJECT_META: Schema = {"type": "object", "properties": {
    **{name: _STRING for name in ("name", "generateName", "namespace", "selfLink", "uid", "resourceVersion")},
    "creationTimestamp": {"type": "string", "nullable": True},
    "deletionTimestamp": {"type": "string", "nullable": True},
    "generation": {"type": "integer"},
    "deletionGracePeriodSeconds": {"type": "integer"},
    "labels": _STRING_MAP,
    "annotations": _STRING_MAP,
    "finalizers": {"type": "array", "items": _STRING},
    "ownerReferences": {"type": "array", "items": {"type": "object", "properties": {
        **{name: _STRING for name in ("apiVersion", "kind", "name", "uid")},
        "controller": {"type": "boolean"}, "blockOwnerDeletion": {"type": "boolean"}}}},
    "managedFields": {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
}}
# A built-in kind with no CRD here (Namespace, JobSet, PriorityClass): its metadata is checked, the rest is not.
METADATA_ONLY: Schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
                         "properties": {"apiVersion": _STRING, "kind": _STRING, "metadata": OBJECT_META}}


def schemas_from_crds(crds: Iterable[dict[str, Any]]) -> dict[tuple[str, str], Schema]:
    """``(apiVersion, kind)`` -> the openAPIV3Schema of every served version of every CRD given."""
    found: dict[tuple[str, str], Schema] = {}
    for crd in crds:
        kind = resolve(crd, "spec.names.kind")
        for version in resolve(crd, "spec.versions") or ():
            schema = resolve(version, "schema.openAPIV3Schema")
            if kind and version.get("served") and isinstance(schema, dict):
                found[(f"{resolve(crd, 'spec.group')}/{version.get('name')}", kind)] = schema
    return found


def decode_errors(obj: dict[str, Any], schema: Schema) -> list[str]:
    """Every unknown field and wrong type in ``obj`` (a whole object: its ``metadata`` is read as ObjectMeta), each
    as ``path: message``. Drops nulls of non-nullable fields from ``obj`` in place."""
    errors: list[str] = []
    root = {**schema, "properties": {**(schema.get("properties") or {}), "metadata": OBJECT_META}}
    _walk(obj, root, "", errors)
    return errors


def summary(errors: list[str], limit: int = MAX_ERRORS) -> list[str]:
    """The first ``limit`` errors, then one line counting the rest."""
    return errors[:limit] + ([f"and {len(errors) - limit} more"] if len(errors) > limit else [])


def _walk(value: Any, schema: Schema, path: str, errors: list[str]) -> None:
    if schema.get("x-kubernetes-int-or-string"):
        if not _is_int(value) and not isinstance(value, str):
            errors.append(_type_error(path, value, "integer or string"))
        return
    kind = schema.get("type")
    if kind == "object" or (kind is None and ("properties" in schema or "additionalProperties" in schema)):
        if not isinstance(value, dict):
            errors.append(_type_error(path, value, "object"))
            return
        _walk_object(value, schema, path, errors)
    elif kind == "array":
        if not isinstance(value, list):
            errors.append(_type_error(path, value, "array"))
            return
        items = schema.get("items")
        if isinstance(items, dict):
            for i, item in enumerate(value):
                if item is None and not items.get("nullable"):
                    errors.append(f"{path}[{i}]: Invalid value: null: must be of type {items.get('type') or 'value'}")
                else:
                    _walk(item, items, f"{path}[{i}]", errors)
    elif kind == "string":
        # YAML reads an unquoted timestamp as a date; kubectl sends it as the string it was written as.
        if not isinstance(value, (str, date)):
            errors.append(_type_error(path, value, "string"))
    elif kind == "integer":
        if not (_is_int(value) or (isinstance(value, float) and value.is_integer())):
            errors.append(_type_error(path, value, "integer"))
    elif kind == "number":
        if not (_is_int(value) or isinstance(value, float)):
            errors.append(_type_error(path, value, "number"))
    elif kind == "boolean":
        if not isinstance(value, bool):
            errors.append(_type_error(path, value, "boolean"))


def _walk_object(value: dict[str, Any], schema: Schema, path: str, errors: list[str]) -> None:
    properties = schema.get("properties") or {}
    additional = schema.get("additionalProperties")
    keep_unknown = schema.get("x-kubernetes-preserve-unknown-fields") is True or additional is True
    embedded = schema.get("x-kubernetes-embedded-resource") is True
    for key in list(value):
        child = value[key]
        sub = f"{path}.{key}" if path else str(key)
        if key in properties:
            child_schema = properties[key]
        elif embedded and key in ("apiVersion", "kind"):
            child_schema = _STRING
        elif embedded and key == "metadata":
            child_schema = OBJECT_META
        elif isinstance(additional, dict):
            child_schema, sub = additional, f"{path}[{key}]"
        elif keep_unknown:
            continue
        else:
            errors.append(f"{sub}: unknown field")
            continue
        if child is None and not child_schema.get("nullable"):
            del value[key]  # as the apiserver prunes it
            continue
        if child is not None:
            _walk(child, child_schema, sub, errors)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _type_error(path: str, value: Any, expected: str) -> str:
    got = "null" if value is None else {bool: "boolean", int: "integer", float: "number", str: "string",
                                        list: "array", dict: "object"}.get(type(value), type(value).__name__)
    return f"{path}: Invalid value: {got}: must be of type {expected}"
