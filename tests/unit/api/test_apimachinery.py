"""apimachinery helpers: metav1 time spellings and the controlling ownerReference, one way for every writer."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from trainguard.webhook.api.apimachinery import (
    controller_owner,
    controller_reference,
    format_micro_time,
    format_time,
    parse_time,
)

MOMENT = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    ("moment", "time", "micro"),
    [
        (MOMENT, "2026-01-02T03:04:05Z", "2026-01-02T03:04:05.678901Z"),
        # A naive datetime is UTC (the clock the callers inject is UTC).
        (MOMENT.replace(tzinfo=None), "2026-01-02T03:04:05Z", "2026-01-02T03:04:05.678901Z"),
        # Another zone is converted, not relabelled.
        (MOMENT.astimezone(timezone(timedelta(hours=2))), "2026-01-02T03:04:05Z", "2026-01-02T03:04:05.678901Z"),
    ],
)
def test_metav1_times(moment: datetime, time: str, micro: str) -> None:
    assert format_time(moment) == time
    assert format_micro_time(moment) == micro
    assert parse_time(time) == MOMENT.replace(microsecond=0)
    assert parse_time(micro) == MOMENT


def test_parse_time_rejects_what_is_not_a_time() -> None:
    with pytest.raises(ValueError):
        parse_time("yesterday")


def test_controller_reference_round_trip() -> None:
    owner = {"metadata": {"name": "imagenet", "uid": "u-1", "namespace": "team-a"}}
    ref = controller_reference("trainguard.io/v1alpha1", "DatasetCache", owner)
    assert ref == {"apiVersion": "trainguard.io/v1alpha1", "kind": "DatasetCache", "name": "imagenet", "uid": "u-1",
                   "controller": True, "blockOwnerDeletion": True}
    child = {"metadata": {"ownerReferences": [{**ref, "controller": False, "name": "other"}, ref]}}
    assert controller_owner(child, "DatasetCache", "trainguard.io") == "imagenet"
    # Another group with the same kind, or a reference that is not the controller, is not the owner.
    assert controller_owner(child, "DatasetCache", "example.com") is None
    assert controller_owner({"metadata": {"ownerReferences": [{**ref, "controller": False}]}},
                            "DatasetCache", "trainguard.io") is None
