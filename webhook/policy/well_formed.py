"""The door check: is the object the shape its CRD declares, within the CRD's size limits? Before any policy runs.

Why here and not in the CRD alone: the apiserver calls MUTATING webhooks before it validates the object against
the CRD's schema, so the mutating webhook sees whatever a client sent: a 60,000-entry ``spec.trainer.env`` (the
CRD's ``maxItems`` is 128), ``runtimeRef: torch-distributed`` as a string, a GPU quantity ``"8 "``. The policy code
reads plain dicts and trusts their shape; fed such input it raised (an AdmissionReview code 500, or an admission
with ``--on-policy-error allow``) or, for huge lists, did minutes of work. ``trainguard render`` and a direct
POST to the webhook skip the schema entirely. So every entry point of ``trainguard.webhook.policy.pipeline`` first checks the
object under review here and denies with the field path, in the apiserver's words:

    spec.trainer.env: Too many: 60000: must have at most 128 items
    spec.runtimeRef: Invalid value: "torch-distributed": must be of type object
    spec.trainer.resourcesPerNode.limits[nvidia.com/gpu]: Invalid value: "8 ": quantities must match ...

What is checked is derived from the typed models in ``trainguard.webhook.api``, whose CRD facts are the CRDs' own
(``tests/unit/api/test_models_match_crds.py``: the trainer.kubeflow.org CRDs are upstream's, the trainguard.io ones
are generated from these models), field by field: the JSON type of every typed field, required fields,
``maxItems``/``minItems``, ``maxLength``/``minLength``, ``maxProperties``, ``enum`` and ``Literal`` values,
``minimum``/``maximum``, ``pattern``, item ``maxLength``/``enum``, int64 range, and quantities. A ``null`` is
refused wherever a type is declared except in ``metadata``: no field of these CRDs is ``nullable``, so the apiserver
drops nulls while decoding, before any webhook, and only a file or a direct client sends one (``metadata`` it
rebuilds from the typed ObjectMeta, which writes ``creationTimestamp: null``). Nothing stricter than the CRD, except
``TRAINGUARD_CAPS``: runtimes' replicatedJobs and (init) containers, which upstream's CRDs leave unbounded, are
capped far above real use and named as trainguard's limit in the denial, and so is nesting past ``MAX_DEPTH``
levels (known fields or not: the copies and merges recurse); the rules that read stored runtimes are
linear, so a runtime stored without the webhook (or before the caps) costs its size, not its square.
Not checked: CEL rules (the apiserver's, after the mutating webhooks), the ``minLength`` of names in a runtimePatch
(left to the schema, so an empty name gets upstream's 422 rather than a 403: it harms no policy code), unique keys
of list-type map/set lists (the rules that care report them in their own words, and the merges are linear with
duplicates too) and fields the models do not type (kept verbatim; the policy code does not read them).

Cost is bounded by the input: one pass over the typed fields, a list or string over its limit is reported from its
length without looking inside, and the walk stops after ``MAX_ERRORS`` errors. Pure: no I/O, no clock.

Deliberate difference from upstream v2.3: upstream's mutating TrainJob webhook decodes the object into its Go type
and answers a type error with a code-400 denial of its own wording, and leaves limits to the schema; trainguard's
mutating webhook denies malformed or oversized objects itself (HTTP 403) with the field path and limit, because it
is the webhook the apiserver calls with unvalidated input and it must not spend policy work on it.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import types
from dataclasses import dataclass
from typing import Any, Callable, Literal, Mapping, Union, get_args, get_origin

from pydantic import BaseModel

from trainguard.webhook.api import core, jobset, meta, trainer, trainguard
from trainguard.webhook.api.base import IntOrString, QuantityValue
from trainguard.webhook.api.constants import (
    CLUSTER_TRAINING_RUNTIME_KIND,
    DATASET_CACHE_KIND,
    TRAINING_RUNTIME_KIND,
    TRAINJOB_KIND,
    TRAINJOB_POLICY_KIND,
)
from trainguard.webhook.api.quantity import Quantity, QuantityError
from trainguard.webhook.field import ErrorType, FieldError, aggregate, invalid, required, too_long, too_many
from trainguard.webhook.policy.verdict import AdmissionInput, ClusterSnapshot, Verdict

# Enough to name what is wrong; an object with thousands of bad fields must not cost thousands of messages.
MAX_ERRORS = 16
# Integers the apiserver can decode at all (JSON numbers into int64).
INT64 = (-(1 << 63), (1 << 63) - 1)
REASON = "MalformedObject"

# The apiserver round-trips ``metadata`` through the typed ObjectMeta, which writes an unset time as null: a CREATE
# review carries ``metadata.creationTimestamp: null``. Everywhere else it prunes nulls (no field is ``nullable``).
NULL_AS_ABSENT: frozenset[type[BaseModel]] = frozenset({meta.ObjectMeta, meta.OwnerReference})

# Sizes trainguard caps where the CRDs set no limit (upstream's runtime CRDs embed JobSet's schema, which caps only
# ``dependsOn``; a namespace user writes TrainingRuntimes): far above real runtimes (upstream's have fewer than 10
# replicatedJobs and a few containers each), so that every rule's work on a runtime is bounded. The numbers are the
# TrainJob CRD's own for what a runtimePatch may address: 100 replicatedJobs, 64 (init) containers per pod.
TRAINGUARD_CAPS: Mapping[tuple[type[BaseModel], str], int] = {
    (jobset.JobSetSpec, "replicatedJobs"): 100,
    (core.PodSpec, "containers"): 64,
    (core.PodSpec, "initContainers"): 64,
}
TRAINGUARD_CAP = "trainguard's limit for runtimes"
TRAINGUARD_LIMIT = "trainguard's limit"

ROOT_MODELS: Mapping[str, type[BaseModel]] = {
    TRAINJOB_KIND: trainer.TrainJob,
    TRAINING_RUNTIME_KIND: trainer.TrainingRuntime,
    CLUSTER_TRAINING_RUNTIME_KIND: trainer.ClusterTrainingRuntime,
    TRAINJOB_POLICY_KIND: trainguard.TrainJobPolicy,
    DATASET_CACHE_KIND: trainguard.DatasetCache,
}


# --- compiled shapes ------------------------------------------------------------------------------------------
# A model's annotations are turned once into a small tree of shapes; the walk then only reads that tree.


@dataclass(frozen=True)
class Limits:
    """The CRD facts of one field (from ``spec_field``'s ``json_schema_extra``)."""

    max_items: int | None = None
    min_items: int | None = None
    max_length: int | None = None
    min_length: int | None = None
    max_properties: int | None = None
    enum: tuple[Any, ...] | None = None
    minimum: int | None = None
    maximum: int | None = None
    pattern: re.Pattern[str] | None = None
    item_max_length: int | None = None
    item_enum: tuple[Any, ...] | None = None
    capped_by_trainguard: bool = False  # max_items is TRAINGUARD_CAPS', not the CRD's

    @staticmethod
    def of(extra: Mapping[str, Any] | None) -> "Limits":
        extra = extra or {}
        items = extra.get("items") or {}
        enum = extra.get("enum")
        item_enum = items.get("enum")
        pattern = extra.get("pattern")
        return Limits(
            max_items=extra.get("maxItems"), min_items=extra.get("minItems"),
            max_length=extra.get("maxLength"), min_length=extra.get("minLength"),
            max_properties=extra.get("maxProperties"),
            enum=tuple(enum) if enum is not None else None,
            minimum=extra.get("minimum"), maximum=extra.get("maximum"),
            pattern=re.compile(pattern) if pattern else None,
            item_max_length=items.get("maxLength"),
            item_enum=tuple(item_enum) if item_enum is not None else None,
        )


NO_LIMITS = Limits()


@dataclass(frozen=True)
class Scalar:
    """A JSON leaf: the Python types allowed, or a quantity (number or quantity string)."""

    types: tuple[type, ...]
    literals: tuple[Any, ...] | None = None
    quantity: bool = False


@dataclass(frozen=True)
class ListOf:
    item: Any


@dataclass(frozen=True)
class MapOf:
    value: Any


@dataclass(frozen=True)
class Field:
    wire: str
    shape: Any
    required: bool
    limits: Limits


@dataclass(frozen=True)
class ModelShape:
    cls: type[BaseModel]

    @functools.cached_property
    def fields(self) -> tuple[Field, ...]:
        return _model_fields(self.cls)


ANY = object()
_JSON_TYPE = {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer", float: "number"}


def _shape(annotation: Any) -> Any:
    """The shape of one annotation (``X | None`` is ``X``: an optional field may be absent, not null)."""
    if annotation is Any or annotation is object:
        return ANY
    if annotation == QuantityValue:
        return Scalar((int, float, str), quantity=True)
    if annotation == IntOrString:
        return Scalar((int, str))
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        members = [a for a in get_args(annotation) if a is not type(None)]
        if len(members) == 1:
            return _shape(members[0])
        if all(isinstance(a, type) and a in _JSON_TYPE for a in members):
            return Scalar(tuple(members))
        return ANY  # a union of structured types: not used by the models; leave it to the models' own parse
    if origin is Literal:
        values = get_args(annotation)
        return Scalar(tuple({type(v) for v in values}), literals=values)
    if origin is list:
        (item,) = get_args(annotation) or (Any,)
        return ListOf(_shape(item))
    if origin is dict:
        args = get_args(annotation)
        return MapOf(_shape(args[1]) if len(args) == 2 else ANY)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return _model_shape(annotation)
    if isinstance(annotation, type) and annotation in _JSON_TYPE:
        return Scalar((annotation,))
    return ANY


@functools.cache
def _model_shape(cls: type[BaseModel]) -> ModelShape:
    return ModelShape(cls)  # fields resolve lazily: models refer to themselves through other models


def _model_fields(cls: type[BaseModel]) -> tuple[Field, ...]:
    out = []
    for name, info in cls.model_fields.items():
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, Mapping) else None
        limits = Limits.of(extra)
        cap = TRAINGUARD_CAPS.get((cls, info.alias or name))
        if cap is not None and limits.max_items is None:
            limits = dataclasses.replace(limits, max_items=cap, capped_by_trainguard=True)
        out.append(Field(info.alias or name, _shape(info.annotation), info.is_required(), limits))
    return tuple(out)


# --- the walk -----------------------------------------------------------------------------------------------


class _Full(Exception):
    """Enough errors collected: stop walking."""


class _Walk:
    def __init__(self) -> None:
        self.errors: list[FieldError] = []

    def add(self, error: FieldError) -> None:
        self.errors.append(error)
        if len(self.errors) >= MAX_ERRORS:
            raise _Full

    def value(self, path: str, value: Any, shape: Any, limits: Limits) -> None:
        if shape is ANY:
            return
        if value is None and not isinstance(shape, Scalar):
            return self.add(_wrong_type(path, value, "array" if isinstance(shape, ListOf) else "object"))
        if isinstance(shape, ModelShape):
            if not isinstance(value, dict):
                return self.add(_wrong_type(path, value, "object"))
            self.properties(path, value, limits)
            self.model(path, value, shape)
        elif isinstance(shape, ListOf):
            if not isinstance(value, list):
                return self.add(_wrong_type(path, value, "array"))
            self.list(path, value, shape, limits)
        elif isinstance(shape, MapOf):
            if not isinstance(value, dict):
                return self.add(_wrong_type(path, value, "object"))
            if not self.properties(path, value, limits):
                return
            for key, item in value.items():
                self.value(f"{path}[{key}]", item, shape.value, NO_LIMITS)
        elif value is None:
            self.add(_wrong_type(path, value, " or ".join(dict.fromkeys(_JSON_TYPE[t] for t in shape.types))))
        else:
            self.scalar(path, value, shape, limits)

    def model(self, path: str, obj: dict, shape: ModelShape) -> None:
        for f in shape.fields:
            sub = f"{path}.{f.wire}" if path else f.wire
            if f.wire not in obj:
                if f.required:
                    self.add(required(sub))
                continue
            value = obj[f.wire]
            if value is None and (f.required or shape.cls in NULL_AS_ABSENT):
                if f.required:
                    self.add(required(sub))
                continue
            self.value(sub, value, f.shape, f.limits)

    def properties(self, path: str, obj: dict, limits: Limits) -> bool:
        if limits.max_properties is not None and len(obj) > limits.max_properties:
            self.add(too_many(path, len(obj), limits.max_properties, "properties"))
            return False
        return True

    def list(self, path: str, items: list, shape: ListOf, limits: Limits) -> None:
        if limits.max_items is not None and len(items) > limits.max_items:  # nothing inside is looked at
            what = f"items ({TRAINGUARD_CAP})" if limits.capped_by_trainguard else "items"
            return self.add(too_many(path, len(items), limits.max_items, what))
        if limits.min_items is not None and len(items) < limits.min_items:
            self.add(invalid(path, len(items), f"must have at least {limits.min_items} items"))
        item_limits = Limits(max_length=limits.item_max_length, enum=limits.item_enum)
        for i, item in enumerate(items):
            self.value(f"{path}[{i}]", item, shape.item, item_limits)

    def scalar(self, path: str, value: Any, shape: Scalar, limits: Limits) -> None:
        if not _is_a(value, shape.types):
            expected = " or ".join(dict.fromkeys(_JSON_TYPE[t] for t in shape.types))
            return self.add(_wrong_type(path, value, expected))
        if isinstance(value, int) and not isinstance(value, bool) and not INT64[0] <= value <= INT64[1]:
            return self.add(invalid(path, value, "must fit in a 64-bit integer"))
        if shape.quantity:
            try:
                Quantity.parse(value)
            except QuantityError as e:
                return self.add(invalid(path, _shown(value), str(e)))
            return None
        allowed = shape.literals if shape.literals is not None else limits.enum
        if allowed is not None and value not in allowed:
            return self.add(FieldError(path, ErrorType.NOT_SUPPORTED, _supported(allowed), _shown(value)))
        if isinstance(value, str):
            if limits.max_length is not None and len(value) > limits.max_length:
                return self.add(too_long(path, limits.max_length))
            if limits.min_length is not None and len(value) < limits.min_length:
                return self.add(invalid(path, value, f"should be at least {limits.min_length} chars long"))
            if limits.pattern is not None and not limits.pattern.search(value):
                return self.add(invalid(path, _shown(value), f"should match '{limits.pattern.pattern}'"))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            if limits.minimum is not None and value < limits.minimum:
                self.add(invalid(path, value, f"should be greater than or equal to {limits.minimum}"))
            elif limits.maximum is not None and value > limits.maximum:
                self.add(invalid(path, value, f"should be less than or equal to {limits.maximum}"))
        return None


def _is_a(value: Any, allowed: tuple[type, ...]) -> bool:
    if isinstance(value, bool):
        return bool in allowed
    if isinstance(value, int):
        return int in allowed or float in allowed  # a JSON integer is a valid JSON number
    return isinstance(value, tuple(t for t in allowed if t not in (int, bool)))


def _shown(value: Any) -> Any:
    """A bad value as the message shows it: scalars themselves (long strings cut), containers by their type."""
    if isinstance(value, str):
        return value if len(value) <= 64 else value[:64] + "..."
    if isinstance(value, (dict, list)):
        return _JSON_TYPE[type(value)]
    return value


def _wrong_type(path: str, value: Any, expected: str) -> FieldError:
    return invalid(path or "<root>", _shown(value), f"must be of type {expected}")


def _supported(values: tuple[Any, ...]) -> str:
    return "supported values: " + ", ".join(f'"{v}"' if isinstance(v, str) else str(v) for v in values)


# --- the API ------------------------------------------------------------------------------------------------


# Nesting trainguard admits (the apiserver decodes up to 10,000 levels; unknown fields reach the mutating webhook
# before pruning, and the merges and copies recurse): the runtime snapshot's cap, far above any real object (~20).
MAX_DEPTH = 100
_NAMED_LEVELS = 4  # a denial names the deep branch by its first levels


def depth_error(obj: Any) -> FieldError | None:
    """The first branch nested deeper than ``MAX_DEPTH``, known fields or not; one pass, no recursion."""
    stack: list[tuple[Any, int, str]] = [(obj, 0, "")]
    while stack:
        value, depth, path = stack.pop()
        if depth > MAX_DEPTH:
            return invalid(path or "<root>", "object",
                           f"must not nest deeper than {MAX_DEPTH} levels ({TRAINGUARD_LIMIT})")
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        for key, item in items:
            if isinstance(item, (dict, list)):
                if depth < _NAMED_LEVELS:
                    sub = f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}" if path else str(key)
                else:
                    sub = path
                stack.append((item, depth + 1, sub))
    return None


def shape_errors(kind: str, obj: Any) -> list[FieldError]:
    """Every way (up to ``MAX_ERRORS``) ``obj`` departs from the ``kind``'s CRD shape and limits; [] when it fits."""
    walk = _Walk()
    try:
        # the typed walk first: it recurses no deeper than the models and denies an oversized list from its length
        walk.value("", obj, _model_shape(ROOT_MODELS[kind]), NO_LIMITS)
    except _Full:
        pass
    if walk.errors:
        return walk.errors
    too_deep = depth_error(obj)
    return [too_deep] if too_deep is not None else []


Entry = Callable[[AdmissionInput, ClusterSnapshot], Verdict]


def checked(kind: str) -> Callable[[Entry], Entry]:
    """Decorate a pipeline entry point: a CREATE or UPDATE whose object is malformed is denied before it runs.

    The old object of an UPDATE comes from storage, where the apiserver validated it; it is checked too, so that
    ``render --old`` with a hand-written file cannot crash a rule, and named as ``oldObject`` if it fails.
    """

    def wrap(entry: Entry) -> Entry:
        @functools.wraps(entry)
        def gated(review: AdmissionInput, snapshot: ClusterSnapshot) -> Verdict:
            if review.operation in ("CREATE", "UPDATE"):
                errors = shape_errors(kind, review.obj)
                if not errors and review.old_obj is not None:
                    errors = [FieldError(f"oldObject.{e.path}" if e.path else "oldObject", e.type, e.detail, e.value)
                              for e in shape_errors(kind, review.old_obj)]
                if errors:
                    return Verdict.deny(aggregate(errors), REASON)
            return entry(review, snapshot)

        return gated

    return wrap
