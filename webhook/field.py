"""Field errors: a field path plus a message, rendered once in the upstream (k8s.io/apimachinery) format.

Validation code collects ``FieldError`` values and never raises them; the caller renders the list with
``aggregate`` into the denial message the user sees, e.g.::

    spec.trainer.env: Invalid value: ["PET_NNODES"]: must not have reserved envs, ...
    [spec.runtimeRef: Invalid value: "x": ..., spec.trainer.numNodes: Forbidden: ...]

Go prints a bad value with ``%#v``; we print JSON (strings quoted, numbers bare, lists and objects compact),
which reads the same for the scalar values upstream's messages carry.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum
from typing import Any, Iterable


class ErrorType(str, Enum):
    """The subset of ``field.ErrorType`` the rules use, spelled as upstream prints it."""

    INVALID = "Invalid value"
    FORBIDDEN = "Forbidden"
    REQUIRED = "Required value"
    NOT_FOUND = "Not found"
    DUPLICATE = "Duplicate value"
    NOT_SUPPORTED = "Unsupported value"
    INTERNAL = "Internal error"
    TOO_MANY = "Too many"
    TOO_LONG = "Too long"


_OMIT = object()


@dataclass(frozen=True)
class FieldError:
    path: str
    type: ErrorType
    detail: str = ""
    value: Any = _OMIT

    def __str__(self) -> str:
        if self.type in (ErrorType.INVALID, ErrorType.NOT_SUPPORTED, ErrorType.DUPLICATE, ErrorType.NOT_FOUND,
                         ErrorType.TOO_MANY):
            shown = _render_value(None if self.value is _OMIT else self.value)
            text = f"{self.path}: {self.type.value}: {shown}"
            return f"{text}: {self.detail}" if self.detail else text
        return f"{self.path}: {self.type.value}: {self.detail}" if self.detail else f"{self.path}: {self.type.value}"


def invalid(path: str, value: Any, detail: str) -> FieldError:
    return FieldError(path, ErrorType.INVALID, detail, value)


def forbidden(path: str, detail: str) -> FieldError:
    return FieldError(path, ErrorType.FORBIDDEN, detail)


def required(path: str, detail: str = "") -> FieldError:
    return FieldError(path, ErrorType.REQUIRED, detail)


def duplicate(path: str, value: Any) -> FieldError:
    return FieldError(path, ErrorType.DUPLICATE, "", value)


def internal(path: str, detail: str) -> FieldError:
    return FieldError(path, ErrorType.INTERNAL, detail)


def too_many(path: str, actual: int, limit: int, what: str = "items") -> FieldError:
    """``field.TooMany``: ``spec.trainer.env: Too many: 60000: must have at most 128 items``."""
    return FieldError(path, ErrorType.TOO_MANY, f"must have at most {limit} {what}", actual)


def too_long(path: str, limit: int) -> FieldError:
    """``field.TooLong`` as the apiserver reports a schema ``maxLength`` (the value itself is not repeated)."""
    return FieldError(path, ErrorType.TOO_LONG, f"may not be more than {limit} characters")


def aggregate(errors: Iterable[FieldError | str]) -> str:
    """One message for many errors, as ``utilerrors.NewAggregate`` prints it: ``e`` alone, else ``[e1, e2]``.

    Duplicate messages are dropped (upstream's aggregate de-duplicates too), order is kept. Linear in the number of
    errors (a dict, not a scan of the messages so far).
    """
    seen = list(dict.fromkeys(str(e) for e in errors))
    if not seen:
        return ""
    return seen[0] if len(seen) == 1 else "[" + ", ".join(seen) + "]"


def _render_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, str):
        return json.dumps(value)
    try:
        return json.dumps(value, separators=(",", ":"), sort_keys=False, default=str)
    except (TypeError, ValueError):
        return repr(value)
