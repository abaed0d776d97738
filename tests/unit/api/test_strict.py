"""The strict decoder (``trainguard.webhook.api.strict``) on small schemas: what a structural schema allows, what
it calls unknown or mistyped, the nulls it drops, and that it walks only where the schema goes."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from trainguard.webhook.api.strict import decode_errors, schemas_from_crds, summary

STR, INT = {"type": "string"}, {"type": "integer"}
SCHEMA = {"type": "object", "properties": {
    "apiVersion": STR, "kind": STR, "metadata": {"type": "object"},
    "spec": {"type": "object", "properties": {
        "count": INT, "ratio": {"type": "number"}, "on": {"type": "boolean"}, "name": STR,
        "size": {"x-kubernetes-int-or-string": True, "anyOf": [INT, STR]},
        "items": {"type": "array", "items": {"type": "object", "properties": {"name": STR}}},
        "labels": {"type": "object", "additionalProperties": STR},
        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True, "properties": {"known": INT}},
        "any": {"type": "object", "additionalProperties": True},
        "template": {"type": "object", "x-kubernetes-embedded-resource": True, "properties": {"spec": {
            "type": "object", "properties": {"replicas": INT}}}},
        "maybe": {"type": "string", "nullable": True},
    }},
}}


def obj(**spec):
    return {"apiVersion": "x.io/v1", "kind": "K", "metadata": {"name": "a"}, "spec": spec}


def test_a_well_formed_object_has_no_errors():
    o = obj(count=3, ratio=0.5, on=True, name="n", size="10Gi", items=[{"name": "i"}], labels={"a": "b"},
            free={"known": 1, "whatever": {"deep": [1]}}, any={"x": {"y": 1}},
            template={"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"a": "b"}},
                      "spec": {"replicas": 1}},
            maybe=None)
    assert decode_errors(o, SCHEMA) == []


def test_unknown_fields_are_named_by_their_path_everywhere():
    o = obj(cont=1, items=[{"name": "i"}, {"nmae": "j"}], free={"known": 1, "extra": 2},
            template={"metadata": {"labelz": {}}, "spec": {"replica": 1}})
    o["metadata"]["namespce"] = "x"
    o["extra"] = True
    assert sorted(decode_errors(o, SCHEMA)) == sorted([
        "metadata.namespce: unknown field", "extra: unknown field", "spec.cont: unknown field",
        "spec.items[1].nmae: unknown field", "spec.template.metadata.labelz: unknown field",
        "spec.template.spec.replica: unknown field"])


@pytest.mark.parametrize("spec, error", [
    ({"count": "3"}, "spec.count: Invalid value: string: must be of type integer"),
    ({"count": True}, "spec.count: Invalid value: boolean: must be of type integer"),
    ({"count": 2.5}, "spec.count: Invalid value: number: must be of type integer"),
    ({"ratio": "x"}, "spec.ratio: Invalid value: string: must be of type number"),
    ({"on": "yes please"}, "spec.on: Invalid value: string: must be of type boolean"),
    ({"name": 7}, "spec.name: Invalid value: integer: must be of type string"),
    ({"size": [1]}, "spec.size: Invalid value: array: must be of type integer or string"),
    ({"items": {"name": "i"}}, "spec.items: Invalid value: object: must be of type array"),
    ({"items": ["i"]}, "spec.items[0]: Invalid value: string: must be of type object"),
    ({"labels": {"team": 1}}, "spec.labels[team]: Invalid value: integer: must be of type string"),
    ({"free": {"known": "one"}}, "spec.free.known: Invalid value: string: must be of type integer"),
])
def test_wrong_types_name_the_field_and_the_type(spec, error):
    assert decode_errors(obj(**spec), SCHEMA) == [error]


def test_metadata_is_read_as_object_meta():
    o = obj()
    o["metadata"].update(labels={"a": 1}, generation="1", creationTimestamp=None)
    assert decode_errors(o, SCHEMA) == ["metadata.labels[a]: Invalid value: integer: must be of type string",
                                        "metadata.generation: Invalid value: string: must be of type integer"]


def test_nulls_of_non_nullable_fields_are_dropped_and_nullable_ones_kept():
    o = obj(count=None, maybe=None)
    o["metadata"]["namespace"] = None
    assert decode_errors(o, SCHEMA) == []
    assert o["spec"] == {"maybe": None} and o["metadata"] == {"name": "a"}


def test_an_unquoted_timestamp_is_a_string_as_kubectl_sends_it():
    assert decode_errors(obj(name=datetime(2026, 9, 1, tzinfo=timezone.utc)), SCHEMA) == []


def test_the_walk_stops_where_the_schema_does():
    # 10,000 levels under a preserve-unknown-fields object: nothing is visited, nothing recurses.
    deep: dict = {}
    for _ in range(10_000):
        deep = {"d": deep}
    assert decode_errors(obj(free={"x": deep}, any=deep), SCHEMA) == []


def test_summary_caps_the_list():
    errors = [f"e{i}" for i in range(25)]
    assert summary(errors, 20) == errors[:20] + ["and 5 more"]
    assert summary(errors[:3], 20) == errors[:3]


def test_schemas_come_from_served_versions_only():
    crd = {"spec": {"group": "x.io", "names": {"kind": "K"}, "versions": [
        {"name": "v1", "served": True, "schema": {"openAPIV3Schema": SCHEMA}},
        {"name": "v0", "served": False, "schema": {"openAPIV3Schema": SCHEMA}}]}}
    assert list(schemas_from_crds([crd])) == [("x.io/v1", "K")]
