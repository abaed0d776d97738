"""Field errors: a field path plus a message, rendered once in the upstream (k8s.io/apimachinery) format.

Validation code collects ``FieldError`` values and never raises them; the caller renders the list with
``aggregate`` into the denial message the user sees, e.g.::

    spec.trainer.env: Invalid value: ["PET_NNODES"]: must not have reserved envs, ...
    [spec.runtimeRef: Invalid value: "x": ..., spec.trainer.numNodes: Forbidden: ...]

Go prints a bad value with ``%#v``; we print JSON (strings quoted, numbers bare, lists and objects compact),
which reads the same for the scalar values upstream's messages carry.

Bounded (a deliberate difference, only past sizes no ordinary object reaches): upstream renders every error with its
whole bad value, so a 70 KB ``runtimePatches`` quoted by 1,600 errors was 112 MB of text and seconds of CPU. Here
errors are de-duplicated BEFORE rendering (same path, type, detail and value), a quoted value past
``MAX_VALUE_CHARS`` is cut with ``...(truncated, <n> bytes)``, each value is rendered once per message, and the
message holds at most ``MAX_SHOWN_ERRORS`` errors and ``MAX_MESSAGE_CHARS`` characters, then says
``and <n> more errors``.
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

# Far above any ordinary message (a whole runtime's containers quoted by upstream's rule is a few KB), far below
# what a crafted object makes of them.
MAX_VALUE_CHARS = 8192
MAX_SHOWN_ERRORS = 32
MAX_MESSAGE_CHARS = 32768
_SCALARS = (str, int, float, bool, type(None))


@dataclass(frozen=True)
class FieldError:
    path: str
    type: ErrorType
    detail: str = ""
    value: Any = _OMIT

    def __str__(self) -> str:
        return self.render({})

    def render(self, rendered: dict[int, str]) -> str:
        """The upstream text; ``rendered`` maps ``id(value)`` to its text, shared by the errors of one message."""
        if self.type in (ErrorType.INVALID, ErrorType.NOT_SUPPORTED, ErrorType.DUPLICATE, ErrorType.NOT_FOUND,
                         ErrorType.TOO_MANY):
            value = None if self.value is _OMIT else self.value
            shown = rendered.get(id(value))
            if shown is None:
                shown = rendered[id(value)] = _cut(_render_value(value), MAX_VALUE_CHARS)
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

    Duplicate messages are dropped (upstream's aggregate de-duplicates too), order is kept. Work is bounded: the
    errors are de-duplicated by their parts (a value by identity, not by its text) before any is rendered, and
    rendering stops at ``MAX_SHOWN_ERRORS`` messages or ``MAX_MESSAGE_CHARS``; the rest are counted, not rendered.
    """
    distinct: dict[Any, FieldError | str] = {}
    for e in errors:
        distinct.setdefault(_key(e), e)
    rendered: dict[int, str] = {}
    shown: dict[str, None] = {}
    size = consumed = 0
    for e in distinct.values():
        if len(shown) == MAX_SHOWN_ERRORS or size >= MAX_MESSAGE_CHARS:
            break
        consumed += 1
        text = _cut(e if isinstance(e, str) else e.render(rendered), MAX_MESSAGE_CHARS - size)
        if text not in shown:
            shown[text] = None
            size += len(text) + 2
    texts = list(shown)
    if more := len(distinct) - consumed:
        texts.append(f"and {more} more error{'s' if more > 1 else ''}")
    if not texts:
        return ""
    return texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"


def _key(error: FieldError | str) -> Any:
    """What makes two errors the same message, cheaply: a container value by identity (rendering it is the cost)."""
    if isinstance(error, str):
        return error
    value = error.value
    same = (type(value), value) if isinstance(value, _SCALARS) else id(value)
    return (error.path, error.type, error.detail, same)


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:max(limit, 0)]}...(truncated, {len(text.encode())} bytes)"


def _render_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, str):
        return json.dumps(value)
    try:
        return json.dumps(value, separators=(",", ":"), sort_keys=False, default=str)
    except (TypeError, ValueError):
        return repr(value)
