"""apimachinery conventions every object shares: how ``metav1`` times are written, and owner references.

Plain functions on wire dicts (standard library; fields read through ``views``), so the build, the reconciler and
the policy engine write a timestamp or an ownerReference one way. Group, version and kind names come from
``constants``.

* ``format_time(moment)``: ``metav1.Time``, RFC 3339 in UTC with whole seconds (``2026-01-02T03:04:05Z``), what the
  apiserver writes for conditions, ``lastTransitionTime`` and core/v1 Event timestamps; a naive ``datetime`` is UTC.
* ``format_micro_time(moment)``: ``metav1.MicroTime`` (microseconds), for Lease ``renewTime``/``acquireTime``.
* ``parse_time(text)``: the inverse of both; ``ValueError`` on anything that is not an RFC 3339 time.
* ``controller_reference(api_version, kind, owner)``: the single controlling ownerReference of a child object
  (``controller`` and ``blockOwnerDeletion`` set, so garbage collection removes it with its owner and watches map
  it back); ``controller_owner(obj, kind, group)`` reads it back.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Mapping

from trainguard.webhook.api.views import Meta


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=timezone.utc) if moment.tzinfo is None else moment.astimezone(timezone.utc)


def format_time(moment: datetime) -> str:
    return _utc(moment).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_micro_time(moment: datetime) -> str:
    return _utc(moment).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str) -> datetime:
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def controller_reference(api_version: str, kind: str, owner: Mapping[str, Any]) -> dict:
    """The ownerReference that makes ``owner`` (a wire object; only its name and uid are read) the controller.

    ``api_version`` and ``kind`` are the caller's constants, not the owner's fields: objects from a list carry
    neither."""
    meta = Meta.of(owner)
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": meta.name,
        "uid": meta.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def controller_owner(obj: Mapping[str, Any], kind: str, group: str) -> str | None:
    """Name of the controlling owner of ``kind`` in API ``group`` (any version), or None."""
    for ref in Meta.of(obj).owner_references:
        if ref.get("controller") and ref.get("kind") == kind and str(ref.get("apiVersion", "")).split("/")[0] == group:
            return ref.get("name")
    return None
