"""The typed models never contradict the CRDs they parse: every CRD fact a model field states is the CRD's.

The trainer.kubeflow.org CRDs are upstream's (hack/crdgen/upstream.py), no longer generated from the models, yet
the models' facts drive the door check (webhook/policy/well_formed.py) that runs before the schema: a limit there
that the CRD lacks would deny (403) what upstream stores, and a missing size limit would let policy code see an
oversized list. So, walking each model beside its CRD schema: a typed field exists in the CRD with a compatible
type; a required field is required there; each stated fact (default, enum, lengths, items, bounds, pattern, list
keys, CEL rules) equals the CRD's; and each size limit and bound of the CRD on a trainer.kubeflow.org type of our
own is stated too, except the ones ``LEFT_TO_SCHEMA`` names with their reason.

Not required to be complete: the typed views over schemas that are themselves upstream's (``__openapi__`` core
types, the JobSet spec with ``__crd_source__``, and everything under them): they type only what trainguard reads,
the runtimes that hold them reach the door check after the schema, and a template's ``metadata`` is typed with the
apiserver's ObjectMeta whose extra fields the CRD prunes. Nor the ``status`` subtree: the controller writes it
through the status subresource, which no webhook reviews.
"""

from __future__ import annotations

import functools
import types
import typing
from pathlib import Path
from typing import Any, Literal

import pytest
import yaml
from pydantic import BaseModel

from trainguard.webhook.api import trainer, trainguard
from trainguard.webhook.api.base import IntOrString, QuantityValue
from trainguard.webhook.api.meta import ObjectMeta

REPO = Path(__file__).resolve().parents[3]
ROOTS = (trainer.TrainJob, trainer.TrainingRuntime, trainer.ClusterTrainingRuntime, trainguard.TrainJobPolicy,
         trainguard.DatasetCache)

# Facts a spec_field may state and the CRD key that holds each (``items`` is compared key by key below).
STATED = ("default", "enum", "minLength", "maxLength", "minItems", "maxItems", "minimum", "maximum", "pattern",
          "x-kubernetes-list-type", "x-kubernetes-list-map-keys", "x-kubernetes-map-type", "minProperties",
          "maxProperties", "x-kubernetes-validations")
# CRD facts the door check must know to bound its work or to agree with the schema on a value.
MUST_STATE = ("maxItems", "maxLength", "maxProperties", "minLength", "minItems", "minimum", "maximum")

# (root kind, field path, CRD key) -> why the model leaves that fact to the apiserver's schema.
LEFT_TO_SCHEMA: dict[tuple[str, str, str], str] = {
    ("TrainJob", f"spec.runtimePatches[].trainingRuntimeSpec.template.spec.replicatedJobs[]{rest}", "minLength"):
        "the mutating webhook runs before the schema and an empty name harms no policy code: upstream's 422"
    for rest in (".name", ".template.spec.template.spec.containers[].name",
                 ".template.spec.template.spec.initContainers[].name")
}


@functools.cache
def crd_schema(model: type[BaseModel]) -> dict[str, Any]:
    info = model.__crd__  # type: ignore[attr-defined]
    doc = yaml.load((REPO / "crds" / f"{info['group']}_{info['plural']}.yaml").read_text(),
                    Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    (version,) = [v for v in doc["spec"]["versions"] if v["served"]]
    return version["schema"]["openAPIV3Schema"]


def strip_optional(annotation: Any) -> Any:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(members) == 1:
            return members[0]
    return annotation


def type_problem(annotation: Any, node: dict[str, Any]) -> str | None:
    """Why ``annotation`` cannot hold what the CRD ``node`` admits, or None."""
    if annotation in (IntOrString, QuantityValue):
        return None if node.get("x-kubernetes-int-or-string") else "int-or-string in the model only"
    origin = typing.get_origin(annotation)
    want = {list: "array", dict: "object", str: "string", int: "integer", bool: "boolean", float: "number"}
    if origin is Literal:
        return None
    if origin in want:
        kind = want[origin]
    elif annotation in want:
        kind = want[annotation]
    elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
        kind = "object"
    else:
        return None
    if node.get("x-kubernetes-preserve-unknown-fields") and "type" not in node:
        return None
    got = node.get("type")
    if got == kind or (kind == "number" and got == "integer"):
        return None
    return f"model says {kind}, CRD says {got}"


def walk(kind: str, model: type[BaseModel], node: dict[str, Any], path: str, out: list[str],
         view: bool = False) -> None:
    view = view or bool(getattr(model, "__openapi__", None) or getattr(model, "__crd_source__", None))
    extra = model.model_config.get("json_schema_extra") or {}
    for key, value in extra.items():
        if node.get(key) != value:
            out.append(f"{kind} {path or '<root>'}: model {key}={value!r}, CRD {node.get(key)!r}")
    props = node.get("properties") or {}
    if not props and (node.get("x-kubernetes-preserve-unknown-fields") or getattr(model, "__openapi__", None)):
        return
    for name, field in model.model_fields.items():
        wire = field.alias or name
        sub = f"{path}.{wire}" if path else wire
        if wire not in props:
            if model is ObjectMeta and path:
                continue
            out.append(f"{kind} {sub}: typed by the model, absent from the CRD")
            continue
        schema = props[wire]
        if field.is_required() and wire not in (node.get("required") or []):
            out.append(f"{kind} {sub}: required by the model, optional in the CRD")
        annotation = strip_optional(field.annotation)
        problem = type_problem(annotation, schema)
        if problem:
            out.append(f"{kind} {sub}: {problem}")
        stated = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        for key in STATED:
            if key in stated and schema.get(key) != stated[key]:
                out.append(f"{kind} {sub}: model {key}={stated[key]!r}, CRD {schema.get(key)!r}")
        for key, value in (stated.get("items") or {}).items():
            if (schema.get("items") or {}).get(key) != value:
                out.append(f"{kind} {sub}[]: model {key}={value!r}, CRD {(schema.get('items') or {}).get(key)!r}")
        if not view and sub.split(".")[0] not in ("metadata", "status"):
            for key in MUST_STATE:
                if key in schema and key not in stated and (kind, sub, key) not in LEFT_TO_SCHEMA:
                    out.append(f"{kind} {sub}: CRD {key}={schema[key]!r} not stated by the model")
        for key in STATED:
            if (kind, sub, key) in LEFT_TO_SCHEMA and key in stated:
                out.append(f"{kind} {sub}: {key} is left to the schema ({LEFT_TO_SCHEMA[kind, sub, key]}); the "
                           "model must not state it")
        descend(kind, annotation, schema, sub, out, view)


def descend(kind: str, annotation: Any, schema: dict[str, Any], path: str, out: list[str], view: bool) -> None:
    origin = typing.get_origin(annotation)
    if origin is list:
        item = strip_optional(typing.get_args(annotation)[0])
        descend(kind, item, schema.get("items") or {}, f"{path}[]", out, view)
    elif origin is dict:
        value = strip_optional(typing.get_args(annotation)[1])
        descend(kind, value, schema.get("additionalProperties") or {}, f"{path}[*]", out, view)
    elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
        walk(kind, annotation, schema, path, out, view)


@pytest.mark.parametrize("root", ROOTS, ids=[r.__name__ for r in ROOTS])
def test_model_facts_are_the_crds(root):
    kind = root.__crd__["kind"]  # type: ignore[attr-defined]
    schema = crd_schema(root)
    out: list[str] = []
    walk(kind, root, schema, "", out)
    root_rules = root.__crd__.get("root_rules") or []  # type: ignore[attr-defined]
    if root_rules != (schema.get("x-kubernetes-validations") or []):
        out.append(f"{kind}: root rules {root_rules!r}, CRD {schema.get('x-kubernetes-validations')!r}")
    assert not out, "\n".join(out)


def test_left_to_schema_entries_are_real():
    """Each exemption names a CRD fact that exists and that its model field indeed leaves out."""
    for (kind, path, key), reason in LEFT_TO_SCHEMA.items():
        (root,) = [r for r in ROOTS if r.__crd__["kind"] == kind]  # type: ignore[attr-defined]
        node = crd_schema(root)
        for part in path.replace("[]", ".[]").split("."):
            node = node["items"] if part == "[]" else node["properties"][part]
        assert key in node, (path, key)
        assert reason
