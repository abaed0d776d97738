"""The shared base of every API model: camelCase on the wire, lossless round trips, schema metadata.

Why a base of our own: objects pass *through* trainguard (admission patches, the reconciler's server-side
applies). A field we do not model - a newer Kubernetes pod field, another controller's annotation-like
extension - must come out exactly as it went in, or we would silently strip it. So every model keeps unknown
keys (``extra="allow"``) and ``dump()`` emits only what was present in the input (``exclude_unset``), under the
wire names (``by_alias``). For any object the API server accepts, ``Model.parse(obj).dump() == obj``.

The trainguard.io classes are the single source of truth for their CRDs: ``hack/gen_crds.py`` walks the fields and
reads the CRD-only facts (defaults, list-map keys, CEL rules, printer columns) from ``json_schema_extra`` on a field
(via :func:`spec_field`) or from the class's ``model_config["json_schema_extra"]`` (object-level rules). The
trainer.kubeflow.org CRDs are upstream's (``hack/crdgen/upstream.py``); the same facts on those models must equal
the CRD's (``tests/unit/api/test_models_match_crds.py``), since the door check enforces them. Python
defaults are never used for CRD defaults: a parsed object must say what the user sent, not what the API server
would have filled in, so defaults live only in the schema metadata (``crd_default``) and in the
``default_*`` constants that code reading an object falls back to.
"""

from __future__ import annotations

from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

# Wire values that can be either a JSON number or a string. Kubernetes quantities and IntOrString both arrive
# as ints from YAML (``nvidia.com/gpu: 8``) and as strings from the API server (``"8"``); keeping the union (and
# pydantic's smart-union exact-type match) preserves whichever one the input used.
IntOrString = int | str
QuantityValue = int | float | str


class KubeModel(BaseModel):
    """Base of all API models: camelCase aliases, unknown fields kept, ``dump()`` returns the input shape.

    Class attributes read by the CRD generator (never by runtime code):

    * ``__openapi__``: name of the Kubernetes OpenAPI v3 schema (e.g. ``io.k8s.api.core.v1.PodSpec``) that
      describes this type. The generator emits that schema instead of walking the (partial) Python fields,
      because we type only the fields we read and keep the rest via ``extra``.
    * ``__crd_source__``: ``(crd_dir, json_path)`` to take the schema from an upstream CRD instead (the JobSet
      spec comes from the JobSet CRD, as upstream Trainer does).
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="allow",
        # Assignment goes through validation so a mutation cannot store a value the schema would reject.
        validate_assignment=True,
        protected_namespaces=(),
        # Strict: a wrong JSON type is an error, never silently coerced ("true" -> True would change the
        # object on dump). The API server rejects such objects anyway; files given to `render` get a clear error.
        strict=True,
    )

    __openapi__: ClassVar[str | None] = None
    __crd_source__: ClassVar[tuple[str, str] | None] = None

    @classmethod
    def parse(cls, obj: Any) -> Self:
        """Parse a wire object (a dict decoded from JSON/YAML). Raises ``pydantic.ValidationError`` on bad input."""
        return cls.model_validate(obj)

    def dump(self) -> dict[str, Any]:
        """The wire form: camelCase keys, only the fields that were set (so unknown and absent stay so)."""
        return self.model_dump(by_alias=True, exclude_unset=True, mode="json")

    def unknown_fields(self) -> dict[str, Any]:
        """Keys of the input this model does not type (kept verbatim and dumped back)."""
        return dict(self.__pydantic_extra__ or {})


def spec_field(
    description: str,
    *,
    alias: str | None = None,
    required: bool = False,
    crd_default: Any = None,
    enum: list[Any] | None = None,
    min_length: int | None = None,
    max_length: int | None = None,
    min_items: int | None = None,
    max_items: int | None = None,
    minimum: int | None = None,
    maximum: int | None = None,
    pattern: str | None = None,
    fmt: str | None = None,
    list_type: str | None = None,
    list_map_keys: list[str] | None = None,
    map_type: str | None = None,
    rules: list[dict[str, str]] | None = None,
    min_properties: int | None = None,
    preserve_unknown: bool = False,
    items: dict[str, Any] | None = None,
) -> Any:
    """A model field plus the CRD facts about it.

    Every API field goes through here so the description (shown by ``kubectl explain``) is never forgotten and
    so the constraints the API server enforces sit next to the field they constrain. Only ``required`` affects
    parsing (a missing required field is a validation error, as it would be in the API server); all other
    constraints are enforced by the API server from the generated CRD, and re-checking them in Python would
    only add a second, possibly diverging implementation.
    """
    extra: dict[str, Any] = {}
    if crd_default is not None:
        extra["default"] = crd_default
    if enum is not None:
        extra["enum"] = enum
    for key, value in (
        ("minLength", min_length),
        ("maxLength", max_length),
        ("minItems", min_items),
        ("maxItems", max_items),
        ("minimum", minimum),
        ("maximum", maximum),
        ("pattern", pattern),
        ("format", fmt),
        ("x-kubernetes-list-type", list_type),
        ("x-kubernetes-list-map-keys", list_map_keys),
        ("x-kubernetes-map-type", map_type),
        ("minProperties", min_properties),
    ):
        if value is not None:
            extra[key] = value
    if rules:
        extra["x-kubernetes-validations"] = rules
    if preserve_unknown:
        extra["x-kubernetes-preserve-unknown-fields"] = True
    if items:
        # Constraints on each list item (e.g. maxLength of each command string); merged into ``items``.
        extra["items"] = items
    if list_map_keys is not None and list_type is None:
        extra["x-kubernetes-list-type"] = "map"
    kwargs: dict[str, Any] = {"description": description, "json_schema_extra": extra or None}
    if alias is not None:
        kwargs["alias"] = alias
    if required:
        return Field(..., **kwargs)
    return Field(None, **kwargs)


def rule(expression: str, message: str, *, field_path: str | None = None, reason: str | None = None) -> dict[str, str]:
    """One CEL rule as the CRD's ``x-kubernetes-validations`` entry."""
    out = {"rule": expression, "message": message}
    if field_path is not None:
        out["fieldPath"] = field_path
    if reason is not None:
        out["reason"] = reason
    return out


IMMUTABLE = rule("self == oldSelf", "field is immutable")
"""The transition rule upstream puts on immutable fields (only checked when the field exists in old and new)."""
