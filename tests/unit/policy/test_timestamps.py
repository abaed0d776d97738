"""runtimePatches[].time stamping, one case per branch of upstream's defaulter (TrainJobDefaulter.Default)."""

from __future__ import annotations

import pytest

from policy_helpers import NOW, trainjob
from trainguard.webhook.policy.timestamps import format_time, stamp_runtime_patches

STAMP = format_time(NOW)
EARLIER = "2026-01-01T00:00:00Z"
CLIENT = "2025-05-05T05:05:05Z"


def patch(manager: str, selector: dict | None = None, time: str | None = None) -> dict:
    entry = {"manager": manager, "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"spec": {"template": {"spec": {"nodeSelector": selector or {"pool": "a"}}}}}}]}}}}
    if time:
        entry["time"] = time
    return entry


def times(obj: dict) -> list[str | None]:
    return [p.get("time") for p in obj["spec"]["runtimePatches"]]


@pytest.mark.parametrize(
    ("case", "new", "old", "expected"),
    [
        ("create stamps a missing time", [patch("acme.io/a")], None, [STAMP]),
        ("create keeps a client time", [patch("acme.io/a", time=CLIENT)], None, [CLIENT]),
        ("update, unchanged content keeps the old time over the client's",
         [patch("acme.io/a", time=CLIENT)], [patch("acme.io/a", time=EARLIER)], [EARLIER]),
        ("update, changed content gets now even with a client time",
         [patch("acme.io/a", {"pool": "b"}, time=CLIENT)], [patch("acme.io/a", time=EARLIER)], [STAMP]),
        ("update, new manager keeps its client time", [patch("acme.io/b", time=CLIENT)], [], [CLIENT]),
        ("update, new manager without time gets now", [patch("acme.io/b")], [], [STAMP]),
    ],
)
def test_stamping(case, new, old, expected):
    old_obj = None if old is None else trainjob(patches=old)
    result = stamp_runtime_patches(trainjob(patches=new), old_obj, NOW)
    assert times(result) == expected, case


def test_input_not_mutated_and_idempotent():
    obj = trainjob(patches=[patch("acme.io/a")])
    once = stamp_runtime_patches(obj, None, NOW)
    assert "time" not in obj["spec"]["runtimePatches"][0]
    assert stamp_runtime_patches(once, None, NOW) == once


def test_without_patches_nothing_changes():
    obj = trainjob()
    assert stamp_runtime_patches(obj, None, NOW) == obj


def test_time_format_is_utc_seconds():
    from datetime import datetime, timedelta, timezone
    local = datetime(2026, 9, 1, 14, 0, 0, 123456, tzinfo=timezone(timedelta(hours=2)))
    assert format_time(local) == "2026-09-01T12:00:00Z"
