"""A deep copy for JSON-shaped data (dicts, lists, str, int, float, bool, None), the shape of every Kubernetes object
the build merges.

``copy.deepcopy`` keeps a memo of every object it visits (to preserve aliasing and cycles, which JSON cannot have)
and dispatches through a table per value; building one TrainJob copies the runtime's template and containers several
times, so that bookkeeping was a sixth of the controller's reconcile CPU. Dicts and lists are rebuilt here and the
immutable scalars shared; anything else (a tuple, a model) falls back to ``copy.deepcopy``, so the result is always
as independent of the input as ``deepcopy``'s.
"""

from __future__ import annotations

import copy
from typing import Any, TypeVar

T = TypeVar("T")

_SCALARS = (str, int, float, bool, type(None))


def deep_copy(value: T) -> T:
    kind = type(value)
    if kind is dict:
        return {k: v if type(v) in _SCALARS else deep_copy(v) for k, v in value.items()}  # type: ignore[attr-defined, return-value]
    if kind is list:
        return [v if type(v) in _SCALARS else deep_copy(v) for v in value]  # type: ignore[attr-defined, return-value]
    if kind in _SCALARS:
        return value
    return copy.deepcopy(value)
