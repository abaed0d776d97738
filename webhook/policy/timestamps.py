"""Stamping ``spec.runtimePatches[].time``: the only thing upstream's TrainJob mutating webhook
(``TrainJobDefaulter`` in ``pkg/webhooks/trainjob_webhook.go``) does.

A patch's time tells Kueue and people when its content last changed, so it must move only when the content moves:

* CREATE: every entry without a time gets ``now``; a client-supplied time is kept.
* UPDATE, per new entry, by ``manager``:
  - an old entry exists and is equal ignoring ``time`` -> the OLD time (whatever the client sent);
  - an old entry exists and differs -> ``now`` (even if the client sent a time), UNLESS the entry already carries
    a time after the old entry's and not after ``now``: that time was stamped for this very change, by an
    earlier invocation of the webhook for the same request, and is kept;
  - no old entry -> the client's time if given, else ``now``.

Pure: the clock is the ``now`` argument. Idempotent, also across reinvocation: the apiserver calls the mutating
webhook again (``reinvocationPolicy: IfNeeded``) with the already-stamped object and the same old object a moment
later; re-stamping a changed entry with the later ``now`` would change the object on every call.

Deliberate difference from upstream v2.3: upstream's defaulter overwrites a changed entry's time with ``now``
whatever it holds (its webhook configuration leaves reinvocationPolicy at Never); trainguard keeps a time in ``(old
time, now]``, so a client that sends such a time for its change keeps it. Times have second precision, so an UPDATE
in the same second as the old entry's stamp cannot be told from a client echoing the old time: it is stamped again
on reinvocation (at most once more, one second later).
"""

from __future__ import annotations

import copy
from datetime import datetime, timezone
from typing import Any

from trainguard.webhook.api.apimachinery import format_time, parse_time
from trainguard.webhook.api.views import TrainJob

Object = dict[str, Any]


def _without_time(entry: Any) -> Any:
    if not isinstance(entry, dict):
        return entry
    return {k: v for k, v in entry.items() if k != "time"}


def _patches(obj: Object | None) -> list[Any]:
    if not obj:
        return []
    return TrainJob(obj).runtime_patches


def stamp_runtime_patches(obj: Object, old_obj: Object | None, now: datetime) -> Object:
    """Return a copy of the TrainJob ``obj`` with runtimePatch times set as upstream's defaulter sets them."""
    patches = _patches(obj)
    if not patches:
        return obj
    stamp = format_time(now)
    old_by_manager = {
        p.get("manager"): p for p in _patches(old_obj) if isinstance(p, dict) and p.get("manager") is not None
    }
    result = copy.deepcopy(obj)
    for entry in TrainJob(result).runtime_patches:
        if not isinstance(entry, dict):
            continue
        old = old_by_manager.get(entry.get("manager")) if old_obj is not None else None
        if old is None:
            if not entry.get("time"):
                entry["time"] = stamp
        elif _without_time(old) == _without_time(entry):
            entry["time"] = old.get("time") or stamp
        elif not _stamped_since(entry.get("time"), old.get("time"), now):
            entry["time"] = stamp
    return result


def _parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return parse_time(value)
    except ValueError:
        return None


def _stamped_since(time: Any, old_time: Any, now: datetime) -> bool:
    """Whether ``time`` is a stamp for a change made after the old entry's time: in ``(old_time, now]``."""
    stamped = _parse_time(time)
    if stamped is None:
        return False
    now = now if now.tzinfo is not None else now.replace(tzinfo=timezone.utc)
    before = _parse_time(old_time)
    return (before is None or stamped > before) and stamped <= now
