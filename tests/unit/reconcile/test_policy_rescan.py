"""The periodic policy rescan (``--policy-rescan-interval``): every unfinished TrainJob is queued for the policy
check again, with no watch event behind it; finished jobs are left alone; a lost Lease stops the scans."""

from __future__ import annotations

import argparse
import asyncio

import pytest

from trainguard.controller.reconcile.controller import TRAINJOB, Controller, Settings
from trainguard.controller.reconcile.main import seconds_or_never
from trainguard.controller.reconcile.metrics import Metrics
from trainguard.webhook.kube.informer import WatchEvent


class NoKube:
    """Nothing here talks to the apiserver: caches are never started and ``_process`` is replaced."""


def job(name: str, *, finished: bool = False) -> dict:
    status = {"conditions": [{"type": "Complete", "status": "True"}]} if finished else {}
    return {"metadata": {"name": name, "namespace": "ns", "uid": name, "resourceVersion": "1"}, "status": status}


def controller(interval: float, seen: list) -> Controller:
    c = Controller(NoKube(), Settings(workers=2, watch_podgroups=False, policy_rescan_interval=interval),  # type: ignore[arg-type]
                   Metrics(), "test")

    async def record(key) -> None:  # type: ignore[no-untyped-def]
        seen.append(key)

    c._process = record  # type: ignore[method-assign]
    c.trainjobs._apply(WatchEvent("ADDED", job("running")))
    c.trainjobs._apply(WatchEvent("ADDED", job("done", finished=True)))
    return c


async def test_every_interval_each_unfinished_job_is_checked_again_without_an_event() -> None:
    seen: list = []
    c = controller(0.05, seen)
    c.start_workers()
    await asyncio.sleep(0.4)
    await c.abort_workers()
    assert seen.count((TRAINJOB, "ns", "running")) >= 4  # once listed, then once per scan
    assert seen.count((TRAINJOB, "ns", "done")) == 1  # listed only: a finished job is never judged again
    assert c.metrics.policy_rescans._value.get() >= 3
    assert c.metrics.policy_rescan_jobs._value.get() == 1


async def test_zero_means_no_rescans() -> None:
    seen: list = []
    c = controller(0, seen)
    c.start_workers()
    await asyncio.sleep(0.3)
    await c.abort_workers()
    assert seen.count((TRAINJOB, "ns", "running")) == 1
    assert c.metrics.policy_rescans._value.get() == 0


async def test_a_lost_lease_stops_the_scans_and_leading_again_restarts_them() -> None:
    seen: list = []
    c = controller(0.05, seen)
    c.start_workers()
    await asyncio.sleep(0.2)
    await c.abort_workers()
    scans = c.metrics.policy_rescans._value.get()
    await asyncio.sleep(0.2)
    assert c.metrics.policy_rescans._value.get() == scans  # a standby queues nothing
    c.start_workers()
    await asyncio.sleep(0.2)
    await c.shutdown_workers(grace=1)
    assert c.metrics.policy_rescans._value.get() > scans


@pytest.mark.parametrize("text", ["-1", "soon", "inf", "nan", ""])
def test_the_interval_flag_refuses_what_is_not_seconds(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="0 or more"):
        seconds_or_never(text)


def test_the_interval_flag_takes_zero_and_seconds() -> None:
    assert seconds_or_never("0") == 0 and seconds_or_never("90.5") == 90.5


async def test_a_namespace_relabelled_rechecks_its_own_unfinished_jobs_only() -> None:
    # The same queueing the scan uses, scoped: the watch-driven recheck beside the periodic one.
    seen: list = []
    c = controller(0, seen)
    c.trainjobs._apply(WatchEvent("ADDED", {**job("elsewhere"), "metadata": {
        "name": "elsewhere", "namespace": "other", "uid": "e", "resourceVersion": "1"}}))
    c.namespaces._apply(WatchEvent("ADDED", {"metadata": {"name": "ns", "resourceVersion": "1"}}))
    c.start_workers()
    await asyncio.sleep(0.1)
    seen.clear()
    c.namespaces._apply(WatchEvent("MODIFIED", {"metadata": {"name": "ns", "resourceVersion": "2",
                                                             "labels": {"team": "a"}}}))
    await asyncio.sleep(0.1)
    await c.abort_workers()
    assert seen == [(TRAINJOB, "ns", "running")]
