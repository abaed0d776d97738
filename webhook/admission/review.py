"""AdmissionReview ``admission.k8s.io/v1``: parse the request at the door, build the response.

Parsing is strict about what we rely on (envelope apiVersion/kind, a non-empty uid, a known operation, the
kind being addressed) and tolerant of everything else (unknown fields are ignored, as a newer apiserver may send
more). A body that is not a well-formed review gets ``ReviewError`` (HTTP 400, no uid to answer to); a review we
can answer but not serve (wrong kind for the path) gets an AdmissionReview error instead, see ``server``.
"""

from __future__ import annotations

import base64
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

API_VERSION = "admission.k8s.io/v1"


class _Door(BaseModel):
    # strict: no "1" -> 1 or "true" -> True coercion of what the apiserver sent; extra: forward compatible.
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)


class GroupVersionKind(_Door):
    group: str = ""
    version: str
    kind: str


class GroupVersionResource(_Door):
    group: str = ""
    version: str
    resource: str


class AdmissionRequest(_Door):
    uid: str = Field(min_length=1, max_length=256)
    kind: GroupVersionKind
    resource: GroupVersionResource
    sub_resource: str = Field("", alias="subResource")
    name: str = ""
    namespace: str = ""
    operation: Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]
    user_info: dict[str, Any] = Field(default_factory=dict, alias="userInfo")
    # Opaque to the codec: the policy engine parses objects itself.
    object: dict[str, Any] | None = None
    old_object: dict[str, Any] | None = Field(None, alias="oldObject")
    dry_run: bool = Field(False, alias="dryRun")


class AdmissionReview(_Door):
    api_version: Literal["admission.k8s.io/v1"] = Field(alias="apiVersion")
    kind: Literal["AdmissionReview"]
    request: AdmissionRequest


class ReviewError(Exception):
    """The body is not an AdmissionReview we can answer (no uid to echo): the server replies HTTP 400."""


def parse_review(body: bytes) -> AdmissionReview:
    """Decode and validate one review body; every failure is a ``ReviewError`` with a one-line reason."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        raise ReviewError(f"body is not JSON: {type(e).__name__}") from None
    if not isinstance(data, dict):
        raise ReviewError(f"body is a JSON {type(data).__name__}, not an AdmissionReview object")
    try:
        return AdmissionReview.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(root)"
        raise ReviewError(f"not an {API_VERSION} AdmissionReview: {where}: {first['msg']} ({e.error_count()} errors)") from None
    except RecursionError:
        raise ReviewError("body nests too deeply") from None


# The apiserver turns each webhook warning into an HTTP ``Warning: 299`` header (k8s.io/apiserver
# pkg/endpoints/filters/warning.go): a text with a control character (a newline, a tab) is not a valid header and
# is DROPPED silently; once all warnings of a request pass 4096 runes they are cut to 256 runes each and the rest
# discarded. The docs: "Limit warnings to 120 characters if possible. Warnings over 256 characters and large
# numbers of warnings may be truncated." So we send only what arrives intact, and say when we left some out.
WARNING_MAX_RUNES = 256
WARNINGS_TOTAL_RUNES = 4096
_ELLIPSIS = "..."


def _printable(text: str) -> str:
    # Go's unicode.IsControl is the Cc category (C0, DEL, C1); lone surrogates are not valid UTF-8 either.
    return "".join(
        " " if (ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F or 0xD800 <= ord(c) <= 0xDFFF) else c for c in text
    ).strip()


def bound_warnings(warnings: Any) -> list[str]:
    """Warnings as the apiserver will pass them on: printable and unique. Like the apiserver, long warnings are kept
    whole while all of them fit in ``WARNINGS_TOTAL_RUNES`` (Python string length counts code points, as Go counts
    runes); only past that is every warning cut to ``WARNING_MAX_RUNES`` and the rest left out, which we do
    ourselves so the cut ends in "..." and a closing note says how many were left out."""
    texts: list[str] = []
    for w in warnings or ():
        if isinstance(w, str):
            text = _printable(w)
            if text and text not in texts:
                texts.append(text)
    if sum(len(t) for t in texts) <= WARNINGS_TOTAL_RUNES:
        return texts
    out: list[str] = []
    total = 0
    note_room = 64  # kept free for the closing note
    for text in texts:
        if len(text) > WARNING_MAX_RUNES:
            text = text[: WARNING_MAX_RUNES - len(_ELLIPSIS)].rstrip() + _ELLIPSIS
        if total + len(text) > WARNINGS_TOTAL_RUNES - note_room:
            break
        out.append(text)
        total += len(text)
    if omitted := len(texts) - len(out):
        out.append(f"trainguard: {omitted} more warning{'s' if omitted > 1 else ''} omitted (size limit)")
    return out


def _response(uid: str, allowed: bool, **fields: Any) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": {"uid": uid, "allowed": allowed, **fields}}


def allowed_response(uid: str, *, patch: list[dict[str, Any]] | None = None, warnings: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    if patch:
        fields["patchType"] = "JSONPatch"
        fields["patch"] = base64.b64encode(encode_patch(patch)).decode()
    if warnings:
        fields["warnings"] = list(warnings)
    return _response(uid, True, **fields)


def denied_response(uid: str, message: str, *, warnings: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """A policy denial: the apiserver shows it as HTTP 403 'admission webhook "<name>" denied the request: <message>'."""
    fields: dict[str, Any] = {"status": {"code": 403, "reason": "Forbidden", "message": message}}
    if warnings:
        fields["warnings"] = list(warnings)
    return _response(uid, False, **fields)


def error_response(uid: str, code: int, message: str) -> dict[str, Any]:
    """The webhook could not decide (bad request for this path, or an internal failure): allowed=false with a code."""
    reason = {400: "BadRequest", 500: "InternalError"}.get(code, "")
    status: dict[str, Any] = {"code": code, "message": message}
    if reason:
        status["reason"] = reason
    return _response(uid, False, status=status)


def encode_patch(patch: list[dict[str, Any]]) -> bytes:
    return json.dumps(patch, separators=(",", ":")).encode()
