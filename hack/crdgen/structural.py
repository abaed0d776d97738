"""Turn the API server's OpenAPI v3 definitions into structural CRD schemas.

Why not hand-write PodSpec & co.: the API server is the authority on what a pod looks like, and its schema
changes every release. We take ``api__v1_openapi.json`` of the exact apiserver version we run and convert it
the way controller-gen converts Go types:

* ``$ref`` / ``allOf: [{$ref}]`` resolved inline (a field's own description wins over its type's);
* ``Quantity`` -> int-or-string with the quantity pattern, ``IntOrString`` -> int-or-string, ``Time`` ->
  date-time string, ``RawExtension``/``FieldsV1`` -> preserved unknown fields, embedded ``ObjectMeta`` -> the
  five fields a template's metadata may carry (name, namespace, labels, annotations, finalizers), as
  controller-gen's ``generateEmbeddedObjectMeta`` does - anything else would be pruned or rejected;
* kept: type, format, description, properties, required, items, additionalProperties, list/map markers,
  scalar defaults of optional fields (these are exactly the ``+default`` markers, e.g. ports' protocol TCP,
  which list-map keys rely on); dropped: enums (a newer value must not be rejected by an older CRD), patch
  strategies, unions, ``default: {}`` and zero defaults of required fields (OpenAPI-gen artefacts that a CRD
  would turn into real, surprising defaults).
"""

from __future__ import annotations

import copy
from typing import Any

from trainguard.webhook.api.quantity import QUANTITY_PATTERN

REF_PREFIX = "#/components/schemas/"
QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
TIME_TYPES = {"io.k8s.apimachinery.pkg.apis.meta.v1.Time", "io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime"}
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
OPAQUE_TYPES = {"io.k8s.apimachinery.pkg.runtime.RawExtension", "io.k8s.apimachinery.pkg.apis.meta.v1.FieldsV1"}

_KEEP_MARKERS = ("x-kubernetes-list-type", "x-kubernetes-list-map-keys", "x-kubernetes-map-type")
_KEEP_SCALARS = ("type", "format", "minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems",
                 "pattern", "nullable")


def quantity_schema() -> dict[str, Any]:
    """Schema of a resource quantity: an integer or a string matching the quantity grammar."""
    return {"anyOf": [{"type": "integer"}, {"type": "string"}], "pattern": QUANTITY_PATTERN,
            "x-kubernetes-int-or-string": True}


def int_or_string_schema() -> dict[str, Any]:
    return {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True}


def embedded_object_meta_schema() -> dict[str, Any]:
    """The metadata a CRD may keep for an embedded object template (what generateEmbeddedObjectMeta emits)."""
    def string_map(what: str) -> dict[str, Any]:
        return {"type": "object", "additionalProperties": {"type": "string"}, "description": what}

    return {
        "type": "object",
        "properties": {
            "annotations": string_map("Annotations of the objects created from this template."),
            "finalizers": {"type": "array", "items": {"type": "string"},
                           "description": "Finalizers of the objects created from this template."},
            "labels": string_map("Labels of the objects created from this template."),
            "name": {"type": "string", "description": "Name of the object (usually left to the controller)."},
            "namespace": {"type": "string", "description": "Namespace (usually left to the controller)."},
        },
    }


class OpenAPIConverter:
    """Converts named definitions of one OpenAPI v3 document; results are cached per definition."""

    def __init__(self, document: dict[str, Any]) -> None:
        self._defs: dict[str, Any] = document["components"]["schemas"]
        self._cache: dict[str, dict[str, Any]] = {}

    def definition(self, name: str) -> dict[str, Any]:
        """Structural schema of definition ``name`` (a fresh copy the caller may modify)."""
        return copy.deepcopy(self._convert_ref(name, stack=()))

    # -- internals ---------------------------------------------------------------------------------------
    def _convert_ref(self, name: str, stack: tuple[str, ...]) -> dict[str, Any]:
        if name in stack:
            raise ValueError(f"recursive OpenAPI type {name} (via {' -> '.join(stack)}) cannot be a CRD schema")
        if name not in self._cache:
            if name == QUANTITY:
                out = quantity_schema()
            elif name == INT_OR_STRING:
                out = int_or_string_schema()
            elif name in TIME_TYPES:
                out = {"type": "string", "format": "date-time"}
            elif name in OPAQUE_TYPES:
                out = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
            elif name == OBJECT_META:
                out = embedded_object_meta_schema()
            else:
                if name not in self._defs:
                    raise KeyError(f"OpenAPI definition {name} not found")
                out = self._convert(self._defs[name], stack + (name,))
            self._cache[name] = out
        return self._cache[name]

    def _convert(self, node: dict[str, Any], stack: tuple[str, ...]) -> dict[str, Any]:
        ref = _ref_of(node)
        if ref is not None:
            out = copy.deepcopy(self._convert_ref(ref, stack))
            if "description" in node:
                out["description"] = node["description"]
            for key in _KEEP_MARKERS:
                if key in node:
                    out[key] = copy.deepcopy(node[key])
            return out
        out: dict[str, Any] = {}
        if "description" in node:
            out["description"] = node["description"]
        for key in _KEEP_SCALARS + _KEEP_MARKERS:
            if key in node:
                out[key] = copy.deepcopy(node[key])
        if "properties" in node:
            required = set(node.get("required", []))
            props: dict[str, Any] = {}
            for prop, sub in node["properties"].items():
                converted = self._convert(sub, stack)
                if prop not in required and _is_marker_default(sub.get("default")):
                    converted["default"] = sub["default"]
                props[prop] = converted
            out["properties"] = props
            out.setdefault("type", "object")
        if node.get("required"):
            out["required"] = sorted(node["required"])
        if "items" in node:
            out["items"] = self._convert(node["items"], stack)
        if "additionalProperties" in node:
            ap = node["additionalProperties"]
            if isinstance(ap, dict):
                out["additionalProperties"] = self._convert(ap, stack)
            elif ap is True:
                out["x-kubernetes-preserve-unknown-fields"] = True
        if "format" in out and out["format"] == "int-or-string":
            del out["format"]
        if "type" not in out and not out.get("x-kubernetes-int-or-string") and \
                not out.get("x-kubernetes-preserve-unknown-fields"):
            # Untyped leaf (e.g. an opaque JSON value): keep whatever is sent.
            out["x-kubernetes-preserve-unknown-fields"] = True
            out["type"] = "object"
        return out


def _ref_of(node: dict[str, Any]) -> str | None:
    if "$ref" in node:
        return node["$ref"].removeprefix(REF_PREFIX)
    all_of = node.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1 and "$ref" in all_of[0]:
        return all_of[0]["$ref"].removeprefix(REF_PREFIX)
    return None


def _is_marker_default(value: Any) -> bool:
    """Scalar defaults on optional properties are ``+default`` markers; object/array defaults never are."""
    return value is not None and not isinstance(value, (dict, list))
