"""The DatasetCache view: each field's path and default (absent / null / wrong type / present), no copies, no writes."""

from __future__ import annotations

import copy
from typing import Any, Callable

import pytest

from trainguard.webhook.api.quantity import QuantityError
from trainguard.webhook.api.views import CacheStatus, DatasetCache

Read = Callable[[DatasetCache], Any]


def spec(**fields: Any) -> dict:
    return {"spec": fields}


def source(**fields: Any) -> dict:
    return {"spec": {"source": fields}}


def status(**fields: Any) -> dict:
    return {"status": fields}


READY = {"type": "Ready", "status": "True", "reason": "Warm"}

# (what is read, the object, what it reads as)
CASES: list[tuple[str, Read, dict, Any]] = [
    # spec.source.hostPath: "is it an object" apart from "its path", so the source check sees a pathless hostPath
    ("has_host_path", lambda v: v.source.has_host_path, {}, False),
    ("has_host_path", lambda v: v.source.has_host_path, source(hostPath=None), False),
    ("has_host_path", lambda v: v.source.has_host_path, source(hostPath="/data"), False),
    ("has_host_path", lambda v: v.source.has_host_path, source(hostPath={}), True),
    ("host_path", lambda v: v.source.host_path, {}, None),
    ("host_path", lambda v: v.source.host_path, source(hostPath={"path": None}), None),
    ("host_path", lambda v: v.source.host_path, source(hostPath={"path": 7}), 7),  # as written: the door refuses it
    ("host_path", lambda v: v.source.host_path, source(hostPath={"path": "//d/./x/"}), "//d/./x/"),  # uncleaned
    ("has_claim", lambda v: v.source.has_claim, {}, False),
    ("has_claim", lambda v: v.source.has_claim, source(persistentVolumeClaim=None), False),
    ("has_claim", lambda v: v.source.has_claim, source(persistentVolumeClaim="pvc"), True),  # set: the check sees it
    ("has_claim", lambda v: v.source.has_claim, source(persistentVolumeClaim={"claimName": "d"}), True),
    ("claim_name", lambda v: v.source.claim_name, {}, None),
    ("claim_name", lambda v: v.source.claim_name, source(persistentVolumeClaim={"claimName": None}), None),
    ("claim_name", lambda v: v.source.claim_name, source(persistentVolumeClaim=["d"]), None),
    ("claim_name", lambda v: v.source.claim_name, source(persistentVolumeClaim={"claimName": "d"}), "d"),
    ("sub_path", lambda v: v.source.sub_path, {}, ""),
    ("sub_path", lambda v: v.source.sub_path, source(persistentVolumeClaim={"path": None}), ""),
    ("sub_path", lambda v: v.source.sub_path, source(persistentVolumeClaim={"path": 3}), ""),
    ("sub_path", lambda v: v.source.sub_path, source(persistentVolumeClaim={"path": "/a/b/"}), "a/b"),
    ("shards", lambda v: v.source.shards, {}, ""),
    ("shards", lambda v: v.source.shards, source(shards=None), ""),
    ("shards", lambda v: v.source.shards, {"spec": {"source": "x"}}, ""),
    ("shards", lambda v: v.source.shards, source(shards="train-*.tar"), "train-*.tar"),
    # the rest of spec
    ("memory_budget", lambda v: v.memory_budget, {}, None),
    ("memory_budget", lambda v: v.memory_budget, spec(memoryBudget=None), None),
    ("memory_budget", lambda v: v.memory_budget, {"spec": "8Gi"}, None),
    ("memory_budget", lambda v: v.memory_budget, spec(memoryBudget="8Gi"), "8Gi"),
    ("memory_budget_bytes", lambda v: v.memory_budget_bytes, spec(memoryBudget="8Gi"), 8 * 2**30),
    ("memory_budget_bytes", lambda v: v.memory_budget_bytes, spec(memoryBudget=1000), 1000),
    ("memory_budget_bytes", lambda v: v.memory_budget_bytes, spec(memoryBudget="1500m"), 2),  # rounded up, as Go
    ("memory_budget_bytes", lambda v: v.memory_budget_bytes, spec(memoryBudget="0"), 0),  # the builder refuses it
    ("node_selector", lambda v: v.node_selector, {}, {}),
    ("node_selector", lambda v: v.node_selector, spec(nodeSelector=None), {}),
    ("node_selector", lambda v: v.node_selector, spec(nodeSelector=["a"]), {}),
    ("node_selector", lambda v: v.node_selector, spec(nodeSelector={"a": "b"}), {"a": "b"}),
    ("tolerations", lambda v: v.tolerations, {}, []),
    ("tolerations", lambda v: v.tolerations, spec(tolerations=None), []),
    ("tolerations", lambda v: v.tolerations, spec(tolerations={"key": "a"}), []),
    ("tolerations", lambda v: v.tolerations, spec(tolerations=[{"key": "a"}]), [{"key": "a"}]),
    ("priority_class_name", lambda v: v.priority_class_name, {}, None),
    ("priority_class_name", lambda v: v.priority_class_name, spec(priorityClassName=None), None),
    ("priority_class_name", lambda v: v.priority_class_name, spec(priorityClassName=""), ""),
    ("priority_class_name", lambda v: v.priority_class_name, spec(priorityClassName="high"), "high"),
    ("hold_trainers_until_warm", lambda v: v.hold_trainers_until_warm, {}, False),
    ("hold_trainers_until_warm", lambda v: v.hold_trainers_until_warm, spec(holdTrainersUntilWarm=None), False),
    ("hold_trainers_until_warm", lambda v: v.hold_trainers_until_warm, spec(holdTrainersUntilWarm=0), False),
    ("hold_trainers_until_warm", lambda v: v.hold_trainers_until_warm, spec(holdTrainersUntilWarm=True), True),
    ("hold_trainers_until_warm", lambda v: v.hold_trainers_until_warm, spec(holdTrainersUntilWarm=False), False),
    # status
    ("nodes_desired", lambda v: v.cache_status.nodes_desired, {}, None),
    ("nodes_desired", lambda v: v.cache_status.nodes_desired, {"status": None}, None),
    ("nodes_desired", lambda v: v.cache_status.nodes_desired, {"status": [1]}, None),
    ("nodes_desired", lambda v: v.cache_status.nodes_desired, status(nodesDesired=0), 0),
    ("nodes_ready", lambda v: v.cache_status.nodes_ready, status(nodesReady=None), None),
    ("nodes_ready", lambda v: v.cache_status.nodes_ready, status(nodesReady=2), 2),
    ("bytes_resident", lambda v: v.cache_status.bytes_resident, {}, None),
    ("bytes_resident", lambda v: v.cache_status.bytes_resident, status(bytesResident=150), 150),
    ("shards", lambda v: v.cache_status.shards, {}, None),
    ("shards", lambda v: v.cache_status.shards, status(shards=5), 5),
    ("observed_generation", lambda v: v.cache_status.observed_generation, {}, None),
    ("observed_generation", lambda v: v.cache_status.observed_generation, status(observedGeneration=3), 3),
    ("conditions", lambda v: v.cache_status.conditions, {}, []),
    ("conditions", lambda v: v.cache_status.conditions, status(conditions=None), []),
    ("conditions", lambda v: v.cache_status.conditions, status(conditions=READY), []),
    ("conditions", lambda v: v.cache_status.conditions, status(conditions=[READY]), [READY]),
    ("ready_condition", lambda v: v.cache_status.ready_condition.raw, {}, {}),
    ("ready_condition", lambda v: v.cache_status.ready_condition.raw, status(conditions=None), {}),
    ("ready_condition", lambda v: v.cache_status.ready_condition.raw, status(conditions=["Ready", None]), {}),
    ("ready_condition", lambda v: v.cache_status.ready_condition.raw,
     status(conditions=[{"type": "Other"}, READY]), READY),
]


@pytest.mark.parametrize("field, read, obj, expected", CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_fields(field: str, read: Read, obj: dict, expected: Any) -> None:
    before = copy.deepcopy(obj)
    assert read(DatasetCache(obj)) == expected
    assert obj == before  # a view never writes


@pytest.mark.parametrize("budget", [None, "lots", "8 Gi", True, [1]], ids=["absent", "word", "space", "bool", "list"])
def test_a_budget_that_is_no_quantity_names_the_field(budget: Any) -> None:
    with pytest.raises(QuantityError, match=r"^spec\.memoryBudget: quantities must match"):
        DatasetCache(spec(memoryBudget=budget)).memory_budget_bytes


def test_metadata_and_kind_come_from_kube_object() -> None:
    view = DatasetCache({"apiVersion": "trainguard.io/v1alpha1", "kind": "DatasetCache",
                         "metadata": {"name": "imagenet", "namespace": "team-a", "uid": "u", "generation": 3}})
    assert (view.api_version, view.kind, view.metadata.name, view.metadata.namespace, view.metadata.uid,
            view.metadata.generation) == ("trainguard.io/v1alpha1", "DatasetCache", "imagenet", "team-a", "u", 3)


def test_views_wrap_the_callers_dicts_without_copying() -> None:
    obj = {"spec": {"source": {"hostPath": {"path": "/d"}}, "tolerations": [{"key": "a"}]},
           "status": {"conditions": [dict(READY)]}}
    view = DatasetCache(obj)
    assert view.source.raw is obj["spec"]["source"]
    assert view.tolerations is obj["spec"]["tolerations"]
    assert view.cache_status.ready_condition.raw is obj["status"]["conditions"][0]


def test_a_bare_status_reads_as_the_objects() -> None:
    """``compute_status`` reads its ``previous`` status mapping with the same view as a whole object's status."""
    bare = {"nodesReady": 1, "conditions": [READY]}
    assert (CacheStatus(bare).ready_condition.raw == DatasetCache({"status": bare}).cache_status.ready_condition.raw
            == READY)
    assert CacheStatus(None).ready_condition.raw == {} and CacheStatus(None).nodes_ready is None
