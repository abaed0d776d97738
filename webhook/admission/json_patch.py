"""The JSON Patch (RFC 6902) a mutating review answers with: from the object the apiserver sent to the object the
policy returned.

``jsonpatch.make_patch`` looks for moves and list rearrangements by comparing every element pair; on a TrainJob it
was a sixth of the two reviews' CPU. The policy only adds or changes fields and prepends or appends list entries
(its ``trainguard.io/policy`` runtimePatch), so this walks both objects once: a key only in the new object is an
``add``, only in the old a ``remove``, a changed scalar a ``replace``; a list of the same length is compared entry by
entry, a list that grew at its start or end gets ``add``s at those indexes, any other list change replaces the whole
list. Applying the result to the original always gives the policy's object (tested against ``jsonpatch.apply_patch``);
values are compared with their JSON types (``1``, ``1.0`` and ``true`` differ).
"""

from __future__ import annotations

from typing import Any

Patch = list[dict[str, Any]]


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if type(a) is dict:
        return a.keys() == b.keys() and all(_same(v, b[k]) for k, v in a.items())
    if type(a) is list:
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def make_patch(old: Any, new: Any) -> Patch:
    ops: Patch = []
    _diff(old, new, "", ops)
    return ops


def _diff(old: Any, new: Any, path: str, ops: Patch) -> None:
    if type(old) is dict and type(new) is dict:
        for key in old:
            if key not in new:
                ops.append({"op": "remove", "path": f"{path}/{_escape(key)}"})
        for key, value in new.items():
            where = f"{path}/{_escape(key)}"
            if key not in old:
                ops.append({"op": "add", "path": where, "value": value})
            else:
                _diff(old[key], value, where, ops)
        return
    if type(old) is list and type(new) is list:
        n, m = len(old), len(new)
        if n == m:
            for i, (a, b) in enumerate(zip(old, new)):
                _diff(a, b, f"{path}/{i}", ops)
            return
        if m > n and all(_same(a, b) for a, b in zip(old, new[m - n:])):  # entries added in front
            ops.extend({"op": "add", "path": f"{path}/{i}", "value": new[i]} for i in range(m - n))
            return
        if m > n and all(_same(a, b) for a, b in zip(old, new)):  # entries appended
            ops.extend({"op": "add", "path": f"{path}/{i}", "value": new[i]} for i in range(n, m))
            return
        ops.append({"op": "replace", "path": path, "value": new})
        return
    if not _same(old, new):
        ops.append({"op": "replace", "path": path, "value": new})
