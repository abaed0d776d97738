#!/usr/bin/env python3
"""Generate the values reference in ``charts/trainguard/README.md`` from the comments in ``values.yaml``.

``values.yaml`` is the admin's first read, so its comments are the one place each value is explained; the README's
table is derived from them and replaced between the markers ``<!-- values:begin -->`` and ``<!-- values:end -->``.
A key's description is the block of ``#`` lines directly above it (a blank line ends a block, so a file or section
preamble separated by one is not attached to the next key). Every key gets a row, in file order: a mapping with
keys of its own is a section (type ``object``, no default: its keys follow); anything else shows its type and its
default as JSON. tests/unit/chart/test_chart_docs.py fails when the README is stale.

usage: python hack/gen_chart_docs.py [--check]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
CHART = REPO / "charts" / "trainguard"
VALUES = CHART / "values.yaml"
README = CHART / "README.md"
BEGIN = "<!-- values:begin -->"
END = "<!-- values:end -->"
_KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_.-]+):(?:\s|$)")


@dataclass(frozen=True)
class Row:
    path: str
    type: str
    default: str
    description: str


class ValuesFormatError(ValueError):
    """A values.yaml this generator cannot attribute comments in (e.g. a block list of mappings)."""


def _type_of(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "object"
    return "null"


def _lookup(data: Any, path: list[str]) -> Any:
    for part in path:
        data = data[part]
    return data


def rows(text: str) -> list[Row]:
    """One row per key of ``text`` (a values.yaml), in file order."""
    data = yaml.safe_load(text) or {}
    out: list[Row] = []
    comment: list[str] = []
    stack: list[tuple[int, str]] = []  # (indent, key) of the enclosing mappings
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped:
            comment = []
            continue
        if stripped.startswith("#"):
            comment.append(stripped[1:].strip())
            continue
        if stripped.startswith("- "):
            comment = []
            continue  # an item of a block list: part of its key's default
        m = _KEY.match(line)
        if m is None:
            comment = []
            continue  # a continuation of a multi-line scalar or flow collection
        indent = len(m.group("indent"))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = [k for _, k in stack] + [m.group("key")]
        try:
            value = _lookup(data, path)
        except (KeyError, TypeError) as e:
            raise ValuesFormatError(f"values.yaml:{number}: key {'.'.join(path)} not found in the parsed file") from e
        description = " ".join(comment)
        comment = []
        if isinstance(value, dict) and value:
            out.append(Row(".".join(path), "object", "", description))
            stack.append((indent, m.group("key")))
        else:
            out.append(Row(".".join(path), _type_of(value), json.dumps(value, separators=(", ", ": ")), description))
    return out


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def table(text: str) -> str:
    lines = ["| key | type | default | description |", "|---|---|---|---|"]
    for r in rows(text):
        default = f"`{_cell(r.default)}`" if r.default else ""
        lines.append(f"| `{r.path}` | {r.type} | {default} | {_cell(r.description)} |")
    return "\n".join(lines)


def render_readme(readme: str, values: str) -> str:
    """``readme`` with the text between the markers replaced by the table of ``values``."""
    start, end = readme.find(BEGIN), readme.find(END)
    if start < 0 or end < start:
        raise ValuesFormatError(f"{README.relative_to(REPO)} lacks the markers {BEGIN} ... {END}")
    return readme[: start + len(BEGIN)] + "\n" + table(values) + "\n" + readme[end:]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the README's values table is stale")
    args = parser.parse_args()
    try:
        current = README.read_text()
        wanted = render_readme(current, VALUES.read_text())
    except ValuesFormatError as e:
        print(f"gen_chart_docs: {e}", file=sys.stderr)
        return 2
    if args.check:
        if current != wanted:
            print(f"{README.relative_to(REPO)} is stale: run python hack/gen_chart_docs.py", file=sys.stderr)
            return 1
        return 0
    README.write_text(wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main())
