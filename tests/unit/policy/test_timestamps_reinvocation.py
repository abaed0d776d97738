"""runtimePatch times stay put when the apiserver reinvokes the mutating webhook (issue 10 item 11).

A changed entry gets ``now``; reinvoked a second later with that result (and the same old object), it keeps the
time it got. The time an entry may keep is in ``(old time, now]``: anything else is re-stamped, as upstream does.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from policy_helpers import NOW, trainjob
from trainguard.webhook.policy.timestamps import format_time, stamp_runtime_patches

OLD_TIME = "2026-09-01T11:00:00Z"
STAMP = format_time(NOW)


def entry(pool: str, time: str | None) -> dict:
    e = {"manager": "acme.io/a", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"spec": {"template": {"spec": {"nodeSelector": {"pool": pool}}}}}}]}}}}
    if time is not None:
        e["time"] = time
    return e


OLD = trainjob(patches=[entry("a", OLD_TIME)])


@pytest.mark.parametrize(
    ("case", "sent", "expected"),
    [
        ("echoed old time", OLD_TIME, STAMP),
        ("no time", None, STAMP),
        ("before the old time", "2026-01-01T00:00:00Z", STAMP),
        ("after now", "2026-09-01T12:00:01Z", STAMP),
        ("not a time", "yesterday", STAMP),
        ("a time since the old one: a stamp for this change", "2026-09-01T11:30:00Z", "2026-09-01T11:30:00Z"),
        ("exactly now", STAMP, STAMP),
    ],
)
def test_changed_entry_keeps_only_a_time_in_old_to_now(case, sent, expected) -> None:
    out = stamp_runtime_patches(trainjob(patches=[entry("b", sent)]), OLD, NOW)
    assert out["spec"]["runtimePatches"][0]["time"] == expected, case


@pytest.mark.parametrize("later", [timedelta(seconds=1), timedelta(minutes=5)])
@pytest.mark.parametrize("sent", [OLD_TIME, None, "2020-01-01T00:00:00Z"])
def test_reinvocation_changes_nothing(later, sent) -> None:
    once = stamp_runtime_patches(trainjob(patches=[entry("b", sent)]), OLD, NOW)
    assert stamp_runtime_patches(once, OLD, NOW + later) == once
