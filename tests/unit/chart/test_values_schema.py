"""values.schema.json covers every value of values.yaml, and rejects what it does not know.

The schema is what turns a typo (``webhook.failurPolicy``) or a wrong type into a ``helm lint``/``install`` error
instead of a silently ignored value; tests/integration/chart/test_chart_values.py shows helm's messages. Here, without
helm: every key in values.yaml has a schema entry, and every object the schema spells out refuses unknown keys.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

CHART = Path(__file__).resolve().parents[3] / "charts" / "trainguard"
SCHEMA = json.loads((CHART / "values.schema.json").read_text())
VALUES = yaml.safe_load((CHART / "values.yaml").read_text())
# Objects whose keys belong to someone else: the JobSet chart's values (passed through to the sub-chart, which has
# its own defaults).
OPEN_OBJECTS = {"jobset"}


def resolve(node: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if ref is None:
        return node
    assert ref.startswith("#/$defs/"), ref
    return resolve(SCHEMA["$defs"][ref.removeprefix("#/$defs/")])


def schema_for(path: list[str]) -> dict[str, Any] | None:
    """The schema node of a values path; None when the path is not described. Below a pass-through object (a
    Kubernetes type the apiserver checks, e.g. affinity) every path is described by that object."""
    node = resolve(SCHEMA)
    for key in path:
        props = node.get("properties")
        if props is None:
            return node if node.get("type") == "object" and node.get("additionalProperties") is not False else None
        if key not in props:
            return None
        node = resolve(props[key])
    return node


def exact_schema_for(path: list[str]) -> dict[str, Any] | None:
    """The schema node of exactly this path (None below a pass-through object)."""
    parent = schema_for(path[:-1]) if len(path) > 1 else resolve(SCHEMA)
    if parent is None or path[-1] not in parent.get("properties", {}):
        return None
    return resolve(parent["properties"][path[-1]])


def value_paths(value: Any, prefix: list[str]) -> Iterator[list[str]]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield prefix + [k]
            yield from value_paths(v, prefix + [k])


def described_objects(node: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    node = resolve(node)
    if "properties" in node:
        yield path, node
        for k, v in node["properties"].items():
            yield from described_objects(v, f"{path}.{k}" if path else k)
    if isinstance(node.get("items"), dict):
        yield from described_objects(node["items"], f"{path}[]")


@pytest.mark.parametrize("path", [".".join(p) for p in value_paths(VALUES, [])])
def test_every_value_has_a_schema_entry(path: str) -> None:
    assert schema_for(path.split(".")) is not None, f"values.yaml key {path} is missing from values.schema.json"


def test_every_spelled_out_object_refuses_unknown_keys() -> None:
    open_ones = [p for p, node in described_objects(SCHEMA, "") if node.get("additionalProperties") is not False]
    assert sorted(open_ones) == sorted(OPEN_OBJECTS)


def test_schema_entries_match_the_default_types() -> None:
    """A default whose type the schema refuses would make the chart fail with its own values.yaml."""
    names = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "object"}
    for path in value_paths(VALUES, []):
        node = exact_schema_for(path)
        want = node.get("type") if node is not None else None
        if want is None:
            continue
        default = VALUES
        for k in path:
            default = default[k]
        got = names[type(default)]
        allowed = want if isinstance(want, list) else [want]
        assert got in allowed or (got == "integer" and "number" in allowed), (".".join(path), got, want)
        if "enum" in node:
            assert default in node["enum"], (".".join(path), default, node["enum"])


def test_the_walk_finds_a_key_the_schema_lacks() -> None:
    """The check above can fail: a key under a spelled-out object is reported, one under a pass-through is not."""
    assert schema_for(["webhook", "failurPolicy"]) is None
    assert schema_for(["runtimes", "torchDistributed", "imag"]) is None
    assert schema_for(["webhook", "affinity", "nodeAffinity", "anything"]) is not None
