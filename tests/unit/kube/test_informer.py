"""Informer logic against a scripted list/watch stream: store, events, resourceVersion, 410 relist, backoff."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from trainguard.webhook.kube.errors import ApiError, Gone
from trainguard.webhook.kube.informer import Backoff, CacheEvent, Informer
from trainguard.webhook.kube.resources import JOBSETS

from fake_source import FakeSource, RecordingSleep, ev, obj


async def run_until_idle(source: FakeSource, informer: Informer) -> None:
    informer.start()
    await asyncio.wait_for(source.idle.wait(), timeout=10)


def make(source: FakeSource, sleep: RecordingSleep | None = None) -> tuple[Informer, list[CacheEvent]]:
    inf = Informer(source, JOBSETS, backoff=Backoff(jitter=0), sleep=sleep or RecordingSleep())
    seen: list[CacheEvent] = []
    inf.add_handler(seen.append)
    return inf, seen


async def test_list_then_watch_keeps_store_and_resource_version() -> None:
    src = FakeSource()
    src.lists.append(([obj("a", "1", "ns"), obj("b", "2", "ns")], "10"))
    src.watches.append(
        [ev("ADDED", obj("c", "11", "ns")), ev("MODIFIED", obj("a", "12", "ns", spec={"x": 1})), ev("DELETED", obj("b", "13", "ns"))]
    )
    inf, seen = make(src)
    await run_until_idle(src, inf)
    try:
        assert inf.synced.is_set()
        assert sorted(inf.keys()) == [("ns", "a"), ("ns", "c")]
        assert inf.get("a", "ns")["spec"] == {"x": 1}
        assert [(e.type, e.obj["metadata"]["name"]) for e in seen] == [
            ("ADDED", "a"), ("ADDED", "b"), ("ADDED", "c"), ("MODIFIED", "a"), ("DELETED", "b")
        ]
        assert seen[3].old is not None and seen[3].old["metadata"]["resourceVersion"] == "1"
        # first watch starts at the list's RV, the next one where the first stopped
        assert src.watch_from == ["10", "13"]
    finally:
        await inf.stop()


async def test_bookmark_moves_resource_version_without_events() -> None:
    src = FakeSource()
    src.lists.append(([], "5"))
    src.watches.append([ev("BOOKMARK", {"metadata": {"resourceVersion": "42"}})])
    inf, seen = make(src)
    await run_until_idle(src, inf)
    await inf.stop()
    assert seen == []
    assert src.watch_from == ["5", "42"]


async def test_gone_relists_and_emits_only_differences() -> None:
    src = FakeSource()
    src.lists.append(([obj("keep", "1", "ns"), obj("change", "2", "ns"), obj("drop", "3", "ns")], "3"))
    src.watches.append([Gone(410, "Expired", "too old resource version: 3 (900)")])
    src.lists.append(([obj("keep", "1", "ns"), obj("change", "7", "ns"), obj("new", "8", "ns")], "9"))
    inf, seen = make(src)
    await run_until_idle(src, inf)
    await inf.stop()
    after_relist = [(e.type, e.obj["metadata"]["name"]) for e in seen[3:]]
    assert sorted(after_relist) == [("ADDED", "new"), ("DELETED", "drop"), ("MODIFIED", "change")]
    assert inf.relists == 1 and src.list_calls == 2
    assert src.watch_from == ["3", "9"]


@pytest.mark.parametrize(
    "failure",
    [ApiError(500, "InternalError", "etcd down"), aiohttp.ClientConnectionError("reset"), asyncio.TimeoutError(), OSError("refused")],
    ids=["api-500", "connection", "timeout", "os"],
)
async def test_watch_failures_back_off_exponentially_and_keep_the_cache(failure: BaseException) -> None:
    src = FakeSource()
    sleep = RecordingSleep()
    src.lists.append(([obj("a", "1", "ns")], "1"))
    for _ in range(4):
        src.watches.append([failure])
    src.watches.append([ev("ADDED", obj("b", "2", "ns"))])  # success resets the backoff
    src.watches.append([failure])
    inf, _ = make(src, sleep)
    await run_until_idle(src, inf)
    await inf.stop()
    assert sleep.delays == [0.2, 0.4, 0.8, 1.6, 0.2]
    assert inf.synced.is_set() and len(inf) == 2
    assert src.list_calls == 1  # plain errors resume the watch; only 410 relists
    assert inf.failures == 5


async def test_not_synced_until_a_list_succeeds() -> None:
    src = FakeSource()
    sleep = RecordingSleep()
    src.lists.append(ApiError(503, "ServiceUnavailable", "starting"))
    src.lists.append(ApiError(404, "NotFound", "the server could not find the requested resource"))
    src.lists.append(([], "1"))
    inf, _ = make(src, sleep)
    synced_after_failures: list[bool] = []
    original = src.list_all

    async def observing(*a, **kw):
        synced_after_failures.append(inf.synced.is_set())
        return await original(*a, **kw)

    src.list_all = observing  # type: ignore[method-assign]
    await run_until_idle(src, inf)
    await inf.stop()
    assert synced_after_failures == [False, False, False]
    assert inf.synced.is_set()
    assert sleep.delays == [0.2, 0.4]


async def test_backoff_is_capped() -> None:
    b = Backoff(initial=1, factor=3, maximum=10, jitter=0)
    assert [b.next_delay() for _ in range(5)] == [1, 3, 9, 10, 10]
    b.reset()
    assert b.next_delay() == 1


def test_backoff_jitter_stays_within_bounds() -> None:
    b = Backoff(initial=1, factor=1, maximum=1, jitter=0.2)
    assert all(0.8 <= b.next_delay() <= 1.2 for _ in range(200))


async def test_watch_ending_without_events_does_not_spin() -> None:
    src = FakeSource()
    sleep = RecordingSleep()
    src.lists.append(([], "1"))
    src.watches.extend([[], []])
    inf, _ = make(src, sleep)
    await run_until_idle(src, inf)
    await inf.stop()
    assert sleep.delays == [0.2, 0.4]


async def test_failing_handler_does_not_stop_the_cache() -> None:
    src = FakeSource()
    src.lists.append(([], "1"))
    src.watches.append([ev("ADDED", obj("a", "2")), ev("ADDED", obj("b", "3"))])
    inf = Informer(src, JOBSETS, backoff=Backoff(jitter=0), sleep=RecordingSleep())

    def broken(_: CacheEvent) -> None:
        raise RuntimeError("handler bug")

    good: list[str] = []
    inf.add_handler(broken)
    inf.add_handler(lambda e: good.append(e.obj["metadata"]["name"]))
    await run_until_idle(src, inf)
    await inf.stop()
    assert good == ["a", "b"]


async def test_late_handler_gets_the_cached_objects_first() -> None:
    src = FakeSource()
    src.lists.append(([obj("a", "1", "ns")], "1"))
    inf, _ = make(src)
    await run_until_idle(src, inf)
    late: list[CacheEvent] = []
    inf.add_handler(late.append)
    await inf.stop()
    assert [(e.type, e.obj["metadata"]["name"]) for e in late] == [("ADDED", "a")]


async def test_added_for_a_known_key_is_a_modification_and_managed_fields_are_dropped() -> None:
    src = FakeSource()
    src.lists.append(([obj("a", "1", "ns", meta={"managedFields": [{"manager": "kubectl"}]})], "1"))
    src.watches.append([ev("ADDED", obj("a", "2", "ns"))])
    inf, seen = make(src)
    await run_until_idle(src, inf)
    await inf.stop()
    assert "managedFields" not in seen[0].obj["metadata"]
    assert seen[1].type == "MODIFIED" and seen[1].old is seen[0].obj


async def test_unknown_event_types_are_ignored() -> None:
    src = FakeSource()
    src.lists.append(([], "1"))
    src.watches.append([ev("SURPRISE", obj("a", "2"))])
    inf, seen = make(src)
    await run_until_idle(src, inf)
    await inf.stop()
    assert seen == [] and len(inf) == 0


async def test_an_unexpected_failure_is_retried_and_does_not_end_the_informer() -> None:
    """A frame the cache cannot use (here an object that is not a dict) used to raise AttributeError out of the
    loop: the task died quietly while ``synced`` stayed set over a cache that never changed again."""
    src = FakeSource()
    sleep = RecordingSleep()
    src.lists.append(([obj("a", "1", "ns")], "1"))
    src.watches.append([ev("ADDED", ["not", "an", "object"])])  # type: ignore[arg-type]
    src.watches.append([ev("ADDED", obj("b", "2", "ns"))])
    inf, _ = make(src, sleep)
    task = inf.start()
    await asyncio.wait_for(src.idle.wait(), timeout=10)
    try:
        assert not task.done()
        assert inf.failures == 1 and sleep.delays == [0.2]
        assert sorted(inf.keys()) == [("ns", "a"), ("ns", "b")]
    finally:
        await inf.stop()


async def test_repeated_gone_without_progress_backs_off_instead_of_relisting_in_a_loop() -> None:
    src = FakeSource()
    sleep = RecordingSleep()
    for rv in ("1", "2", "3", "4"):
        src.lists.append(([obj("a", rv, "ns")], rv))
    for _ in range(3):
        src.watches.append([Gone(410, "Expired", "too old resource version")])
    inf, _ = make(src, sleep)
    await run_until_idle(src, inf)
    await inf.stop()
    assert src.list_calls == 4
    assert sleep.delays == [0.2, 0.4]  # the first 410 relists at once; the following ones back off


async def test_a_list_that_keeps_expiring_backs_off() -> None:
    src = FakeSource()
    sleep = RecordingSleep()
    src.lists.append(([], "1"))
    src.watches.append([Gone(410, "Expired", "too old resource version")])
    src.lists.append(Gone(410, "Expired", "continue token expired"))
    src.lists.append(Gone(410, "Expired", "continue token expired"))
    src.lists.append(([], "9"))
    inf, _ = make(src, sleep)
    await run_until_idle(src, inf)
    await inf.stop()
    assert sleep.delays == [0.2, 0.4]
    assert src.watch_from[-1] == "9"


async def test_a_required_kind_answered_404_is_marked_not_served_until_it_lists() -> None:
    """A kind the informer needs (not ``absent_ok``) that the apiserver does not serve stays unsynced and says so
    (``not_served``, the error kept), for /readyz to name the CRD; a later successful list clears both."""
    src = FakeSource()
    sleep = RecordingSleep()
    src.lists.append(ApiError(404, "NotFound", "the server could not find the requested resource"))
    src.lists.append(([], "1"))
    inf, _ = make(src, sleep)
    seen: list[tuple[bool, bool, str]] = []
    original = src.list_all

    async def observing(*a, **kw):
        seen.append((inf.synced.is_set(), inf.not_served, inf.last_error))
        return await original(*a, **kw)

    src.list_all = observing  # type: ignore[method-assign]
    await run_until_idle(src, inf)
    await inf.stop()
    assert seen[0] == (False, False, "")
    assert seen[1][:2] == (False, True) and "could not find the requested resource" in seen[1][2]
    assert inf.synced.is_set() and not inf.not_served and inf.last_error == ""


def test_unserved_names_each_required_kind_once_and_never_an_optional_one() -> None:
    from trainguard.webhook.kube.resources import TRAINJOBS, WORKLOADS
    from trainguard.webhook.kube.served import unserved

    src = FakeSource()
    required = [Informer(src, TRAINJOBS), Informer(src, TRAINJOBS, namespace="a"), Informer(src, JOBSETS)]
    optional = Informer(src, WORKLOADS, absent_ok=True)
    assert unserved([*required, optional]) == []
    for inf in (*required[:2], optional):
        inf.not_served = True
    (line,) = unserved([*required, optional])
    assert line.startswith("trainjobs.trainer.kubeflow.org trainer.kubeflow.org/v1alpha1 is not served")
    assert "Kubeflow Trainer's CRDs at v1alpha1" in line and "kubectl get crd trainjobs.trainer.kubeflow.org" in line
