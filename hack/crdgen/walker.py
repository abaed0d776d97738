"""Walk ``trainguard.webhook.api`` model classes into CRD schemas.

A field's schema comes from its Python type (str/int/bool, lists, string maps, Literal enums, nested models,
the int-or-string and quantity unions) plus the CRD facts in its ``json_schema_extra`` (descriptions, defaults,
limits, list-map keys, CEL rules), so the models stay the single source of truth. A model that names an OpenAPI
definition (``__openapi__``) or an upstream CRD path (``__crd_source__``) is emitted from there instead.
Every field of our own models must have a description: ``kubectl explain`` is the user's documentation.
"""

from __future__ import annotations

import copy
import types
import typing
from typing import Any, Callable, Literal

from pydantic import BaseModel

from trainguard.webhook.api.base import KubeModel

from crdgen.structural import OpenAPIConverter, int_or_string_schema, quantity_schema

UpstreamLookup = Callable[[tuple[str, str]], dict[str, Any]]


class SchemaWalker:
    """Builds schemas for model classes, with OpenAPI and upstream-CRD lookups for embedded types."""

    def __init__(self, openapi: OpenAPIConverter, upstream: UpstreamLookup) -> None:
        self._openapi = openapi
        self._upstream = upstream

    def model_schema(self, cls: type[KubeModel], *, _stack: tuple[type, ...] = ()) -> dict[str, Any]:
        if cls in _stack:
            raise ValueError(f"recursive model {cls.__name__} cannot be a CRD schema")
        if cls.__dict__.get("__crd_source__") or getattr(cls, "__crd_source__", None):
            return copy.deepcopy(self._upstream(cls.__crd_source__))  # type: ignore[arg-type]
        if getattr(cls, "__openapi__", None):
            return self._openapi.definition(cls.__openapi__)  # type: ignore[arg-type]
        properties: dict[str, Any] = {}
        required: list[str] = []
        for name, field in cls.model_fields.items():
            wire = field.alias or name
            if not field.description:
                raise ValueError(f"{cls.__name__}.{name} has no description (kubectl explain needs one)")
            schema = self.annotation_schema(field.annotation, _stack + (cls,))
            _merge_extra(schema, field.json_schema_extra)
            schema["description"] = field.description
            properties[wire] = schema
            if field.is_required():
                required.append(wire)
        out: dict[str, Any] = {"type": "object", "properties": properties}
        if required:
            out["required"] = sorted(required)
        _merge_extra(out, cls.model_config.get("json_schema_extra"))
        return out

    def annotation_schema(self, annotation: Any, stack: tuple[type, ...]) -> dict[str, Any]:
        annotation = _strip_optional(annotation)
        origin = typing.get_origin(annotation)
        args = typing.get_args(annotation)
        if origin in (typing.Union, types.UnionType):
            members = set(args)
            if members == {int, str}:
                return int_or_string_schema()
            if members == {int, float, str}:
                return quantity_schema()
            raise TypeError(f"unsupported union {annotation!r} in a CRD model")
        if origin is Literal:
            values = list(args)
            kind = {str: "string", int: "integer", bool: "boolean"}[type(values[0])]
            return {"type": kind, "enum": values}
        if origin is list:
            return {"type": "array", "items": self.annotation_schema(args[0], stack)}
        if origin is dict:
            value = _strip_optional(args[1])
            if value is Any:
                return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
            return {"type": "object", "additionalProperties": self.annotation_schema(value, stack)}
        if annotation is Any:
            return {"x-kubernetes-preserve-unknown-fields": True}
        if annotation is str:
            return {"type": "string"}
        if annotation is bool:
            return {"type": "boolean"}
        if annotation is int:
            return {"type": "integer", "format": "int32"}
        if annotation is float:
            return {"type": "number"}
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            return self.model_schema(annotation, _stack=stack)  # type: ignore[arg-type]
        raise TypeError(f"unsupported type {annotation!r} in a CRD model")


def _strip_optional(annotation: Any) -> Any:
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
        return typing.Union[tuple(args)]  # type: ignore[return-value]
    return annotation


def _merge_extra(schema: dict[str, Any], extra: Any) -> None:
    """Overlay CRD facts from ``json_schema_extra``; ``items`` merges into the item schema."""
    if not extra:
        return
    if callable(extra):
        raise TypeError("callable json_schema_extra is not supported for CRD generation")
    for key, value in extra.items():
        if key == "items":
            schema.setdefault("items", {}).update(copy.deepcopy(value))
        elif key == "x-kubernetes-validations":
            schema.setdefault(key, []).extend(copy.deepcopy(value))
        else:
            schema[key] = copy.deepcopy(value)
