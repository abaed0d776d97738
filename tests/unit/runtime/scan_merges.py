"""The keyed merges as they were before issue 10 (webhook/runtime/merge.py at 1e7203f): a nested scan per item.

Kept in one place for two users: ``test_merge_cost.py`` checks the linear merges give exactly what these gave, and
``bench/admission_cost_bench.py`` puts them back in place to measure the old cost beside the new one.
"""

from __future__ import annotations

import copy
from typing import Any, Mapping

from trainguard.webhook.runtime import merge


def scan_upsert(items, new_items, key):
    out = [copy.deepcopy(dict(i)) for i in items or []]
    for new in new_items:
        index = next((i for i, cur in enumerate(out) if cur.get(key) == new.get(key)), None)
        if index is None:
            out.append(copy.deepcopy(dict(new)))
        else:
            out[index] = copy.deepcopy(dict(new))
    return out


def scan_keyed_list(out: list[Any], patch: list[Any], key: str, field: str) -> list[Any]:
    for item in patch:
        if not isinstance(item, Mapping) or key not in item:
            raise merge.MergeError(f"{field}: every patch item must be an object with {key!r}")
        index = next((i for i, cur in enumerate(out) if isinstance(cur, Mapping) and cur.get(key) == item[key]), None)
        if item.get("$patch") == "delete":
            if index is not None:
                del out[index]
            continue
        if index is None:
            out.append(merge._strip_directives(item))
        else:
            out[index] = merge._merge_owned(out[index], item, field)
    return out
