"""Errors raised by the Kubernetes client, one class per status the callers branch on.

Callers want to write ``except NotFound`` or ``except Conflict`` rather than compare numbers, and they want the
apiserver's own words (the ``Status.message``) in logs and events, so every error carries the decoded Status.
"""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """A non-2xx answer from the apiserver (or an ERROR event in a watch stream)."""

    def __init__(self, code: int, reason: str, message: str, status: dict[str, Any] | None = None) -> None:
        super().__init__(f"{code} {reason}: {message}")
        self.code = code
        self.reason = reason
        self.message = message
        # The decoded metav1.Status when the apiserver sent one; details (causes) live in status["details"].
        self.status = status or {}


class NotFound(ApiError):
    """404: the object (or the resource type, e.g. a CRD that is not installed) does not exist."""


class Conflict(ApiError):
    """409: optimistic-concurrency conflict (stale resourceVersion) or, as ``AlreadyExists``, a name taken."""


class AlreadyExists(Conflict):
    """409 with reason AlreadyExists: a create lost the race for a name."""


class Gone(ApiError):
    """410: the resourceVersion asked for is older than etcd keeps; relist and watch again."""


class Invalid(ApiError):
    """422: schema, CEL or field validation rejected the object."""


_BY_CODE: dict[int, type[ApiError]] = {404: NotFound, 409: Conflict, 410: Gone, 422: Invalid}


def error_from_status(code: int, body: Any) -> ApiError:
    """Build the matching exception from an HTTP code and whatever body came back (Status dict, text, None)."""
    status = body if isinstance(body, dict) else {}
    try:  # a Status from something that is not an apiserver (a proxy) may carry anything here
        code = int(status.get("code") or code)
    except (TypeError, ValueError):
        pass
    reason = str(status.get("reason") or "")
    message = str(status.get("message") or (body if isinstance(body, str) else "") or f"HTTP {code}")
    cls = _BY_CODE.get(code, ApiError)
    if code == 409 and reason == "AlreadyExists":
        cls = AlreadyExists
    return cls(code, reason or cls.__name__, message, status)
