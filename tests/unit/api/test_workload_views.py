"""Views of the kinds the reconciler and the I/O layer read (webhook/api/views/workloads.py), plus the metadata and
condition readers they share (base.py): each property absent / null / wrong type / present, and the reads are
tolerant where a watch transform depends on them (an exception there would keep an object out of a cache)."""

from __future__ import annotations

import copy
from typing import Any, Callable

import pytest

from trainguard.webhook.api.views import (
    AdmissionCheck,
    ClusterQueue,
    Condition,
    JobSet,
    KubeObject,
    Lease,
    LocalQueue,
    Meta,
    ObjectList,
    Pod,
    TrainJob,
    find_condition,
    object_key,
    object_labels,
    resource_version,
)

ABSENT = object()


def _at(path: str, value: Any) -> dict:
    """An object with ``value`` at ``path`` ("a.b"); ABSENT: the last key is left out."""
    keys = path.split(".")
    root: dict = {}
    node = root
    for key in keys[:-1]:
        node[key] = {}
        node = node[key]
    if value is not ABSENT:
        node[keys[-1]] = value
    return root


# (view, property, path in the object, absent, null, wrong type -> expected, present -> expected)
Read = Callable[[dict], Any]
CASES: list[tuple[str, Read, str, Any, Any, tuple[Any, Any], tuple[Any, Any]]] = [
    ("meta.creation_timestamp", lambda o: Meta(o).creation_timestamp, "creationTimestamp", None, None,
     (7, 7), ("2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z")),
    ("meta.labels", lambda o: dict(Meta(o).labels), "labels", {}, {}, (["a"], {}), ({"a": "b"}, {"a": "b"})),
    ("condition.type", lambda o: Condition(o).type, "type", "", "", (3, 3), ("Ready", "Ready")),
    ("condition.status", lambda o: Condition(o).status, "status", "", "", (True, True), ("False", "False")),
    ("condition.is_true", lambda o: Condition(o).is_true, "status", False, False, (True, False), ("True", True)),
    ("condition.reason", lambda o: Condition(o).reason, "reason", "", "", (1, 1), ("Warm", "Warm")),
    ("condition.message", lambda o: Condition(o).message, "message", "", "", (1, 1), ("m", "m")),
    ("condition.last_transition_time", lambda o: Condition(o).last_transition_time, "lastTransitionTime", None, None,
     ("", None), ("2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z")),
    ("jobset.conditions", lambda o: JobSet(o).conditions, "status.conditions", [], [], ({"type": "x"}, []),
     ([{"type": "Completed"}], [{"type": "Completed"}])),
    ("jobset.replicated_jobs_status", lambda o: JobSet(o).replicated_jobs_status, "status.replicatedJobsStatus",
     None, None, ({"a": 1}, {"a": 1}), ([{"name": "node", "active": 1}], [{"name": "node", "active": 1}])),
    ("jobset.replicated_jobs", lambda o: [j.name for j in JobSet(o).replicated_jobs], "spec.replicatedJobs", [], [],
     ("node", []), ([{"name": "node"}, {"name": "launcher"}], ["node", "launcher"])),
    ("pod.scheduling_gates", lambda o: Pod(o).scheduling_gates, "spec.schedulingGates", [], [], ({"name": "g"}, []),
     ([{"name": "g"}], [{"name": "g"}])),
    ("lease.holder_identity", lambda o: Lease(o).holder_identity, "spec.holderIdentity", None, None, (1, 1),
     ("a", "a")),
    ("lease.lease_duration_seconds", lambda o: Lease(o).lease_duration_seconds, "spec.leaseDurationSeconds", None,
     None, ("15", "15"), (15, 15)),
    ("lease.acquire_time", lambda o: Lease(o).acquire_time, "spec.acquireTime", None, None, (1, 1), ("t", "t")),
    ("lease.renew_time", lambda o: Lease(o).renew_time, "spec.renewTime", None, None, (1, 1), ("t", "t")),
    ("lease.lease_transitions", lambda o: Lease(o).lease_transitions, "spec.leaseTransitions", None, None,
     ("2", "2"), (2, 2)),
    ("localqueue.cluster_queue", lambda o: LocalQueue(o).cluster_queue, "spec.clusterQueue", None, None, (1, 1),
     ("cq", "cq")),
    ("clusterqueue.admission_checks", lambda o: ClusterQueue(o).admission_checks,
     "spec.admissionChecksStrategy.admissionChecks", [], [], ("mk", []), ([{"name": "mk"}], [{"name": "mk"}])),
    ("admissioncheck.controller_name", lambda o: AdmissionCheck(o).controller_name, "spec.controllerName", None, None,
     (1, 1), ("kueue.x-k8s.io/multikueue", "kueue.x-k8s.io/multikueue")),
    ("list.items", lambda o: ObjectList(o).items, "items", [], [], ({"a": 1}, []), ([{"a": 1}], [{"a": 1}])),
    ("list.continue_token", lambda o: ObjectList(o).continue_token, "metadata.continue", None, None, ("", None),
     ("tok", "tok")),
    ("list.resource_version", lambda o: ObjectList(o).resource_version, "metadata.resourceVersion", "", "", (5, "5"),
     ("12", "12")),
    ("trainjob.jobs_status", lambda o: TrainJob(o).jobs_status, "status.jobsStatus", [], [], ({"name": "n"}, []),
     ([{"name": "node", "ready": 1}], [{"name": "node", "ready": 1}])),
]


@pytest.mark.parametrize("read, path, absent, null, wrong, present", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_absent_null_wrong_type_present(read, path, absent, null, wrong, present) -> None:
    assert read(_at(path, ABSENT)) == absent
    assert read(_at(path, None)) == null
    written, expected = wrong
    assert read(_at(path, written)) == expected
    written, expected = present
    obj = _at(path, written)
    before = copy.deepcopy(obj)
    assert read(obj) == expected
    assert obj == before  # views never write


# The objects' spec/status as written by other controllers and users: a section that is not an object reads as
# empty, never raises (a watch transform that raised would keep the object out of its cache).
@pytest.mark.parametrize("section", [None, "text", ["a"], 3])
@pytest.mark.parametrize(
    "read, empty",
    [
        (lambda o: JobSet(o).conditions, []),
        (lambda o: JobSet(o).replicated_jobs_status, None),
        (lambda o: JobSet(o).replicated_jobs, []),
        (lambda o: Pod(o).scheduling_gates, []),
        (lambda o: Lease(o).record, (None, None, None, None, None)),
        (lambda o: LocalQueue(o).cluster_queue, None),
        (lambda o: ClusterQueue(o).admission_checks, []),
        (lambda o: AdmissionCheck(o).controller_name, None),
    ],
    ids=["jobset.conditions", "jobset.replicated_jobs_status", "jobset.replicated_jobs", "pod.scheduling_gates",
         "lease.record", "localqueue.cluster_queue", "clusterqueue.admission_checks", "admissioncheck.controller_name"],
)
def test_a_section_of_the_wrong_type_reads_as_empty(read, empty, section) -> None:
    assert read({"spec": section, "status": section}) == empty


def test_admission_checks_strategy_of_the_wrong_type_reads_as_empty() -> None:
    assert ClusterQueue({"spec": {"admissionChecksStrategy": ["mk"]}}).admission_checks == []


def test_lease_record_is_the_election_fields_in_order() -> None:
    spec = {"holderIdentity": "a", "leaseDurationSeconds": 15, "acquireTime": "t0", "renewTime": "t1",
            "leaseTransitions": 2, "other": "ignored"}
    assert Lease({"spec": spec}).record == ("a", 15, "t0", "t1", 2)


@pytest.mark.parametrize(
    "meta, keys, expected",
    [
        ({"name": "a", "uid": "u", "labels": {"x": "y"}}, ("name", "labels"), {"name": "a", "labels": {"x": "y"}}),
        ({"name": "a"}, ("name", "resourceVersion"), {"name": "a"}),  # absent keys stay absent
        ({"name": None}, ("name",), {"name": None}),  # present as null: kept as written
        ({}, ("name",), {}),
        (None, ("name",), {}),
        ("text", ("name",), {}),  # not an object: nothing to keep
    ],
    ids=["subset", "absent", "null", "empty", "no-metadata", "wrong-type"],
)
def test_only_keeps_the_named_fields_as_written(meta, keys, expected) -> None:
    obj = {"metadata": meta}
    before = copy.deepcopy(obj)
    kept = KubeObject(obj).metadata.only(keys)
    assert kept == expected
    assert obj == before
    if isinstance(meta, dict) and kept:
        kept["name"] = "changed"  # a new dict: the object is untouched
        assert obj == before


# The informer's per-event readers (no view allocated) read what Meta reads: absent / null / wrong type / present,
# for the metadata section itself and for the field.
@pytest.mark.parametrize(
    "obj, key, rv, name",
    [
        ({}, ("", ""), "", ""),
        ({"metadata": None}, ("", ""), "", ""),
        ({"metadata": ["a"]}, ("", ""), "", ""),
        ({"metadata": "text"}, ("", ""), "", ""),
        ({"metadata": {"name": None, "namespace": None, "resourceVersion": None}}, ("", ""), "", ""),
        ({"metadata": {"name": 7, "namespace": 0, "resourceVersion": 12}}, ("", "7"), "12", 7),
        ({"metadata": {"name": "a", "namespace": "ns", "resourceVersion": "5"}}, ("ns", "a"), "5", "a"),
        (None, ("", ""), "", ""),
    ],
    ids=["absent", "null", "list", "text", "null-fields", "wrong-type-fields", "present", "no-object"],
)
def test_object_key_resource_version_and_meta_of(obj, key, rv, name) -> None:
    assert object_key(obj) == key
    assert resource_version(obj) == rv
    assert Meta.of(obj).name == name
    assert Meta.of(obj).name == KubeObject(obj).metadata.name
    assert Meta.of(obj).raw == KubeObject(obj).metadata.raw


def test_meta_of_wraps_the_metadata_without_copying() -> None:
    obj = {"metadata": {"name": "a", "labels": {"x": "y"}}}
    assert Meta.of(obj).raw is obj["metadata"]
    assert Meta.of(obj).labels is obj["metadata"]["labels"]


@pytest.mark.parametrize(
    "obj, expected",
    [({}, {}), ({"metadata": None}, {}), ({"metadata": {"labels": None}}, {}), ({"metadata": {"labels": ["a"]}}, {}),
     ({"metadata": "text"}, {}), ({"metadata": {"labels": {"a": "b"}}}, {"a": "b"})],
    ids=["absent", "null-metadata", "null", "wrong-type", "wrong-type-metadata", "present"],
)
def test_object_labels_reads_what_meta_labels_reads(obj, expected) -> None:
    assert dict(object_labels(obj)) == expected == dict(Meta.of(obj).labels)


READY = {"type": "Ready", "status": "True"}


@pytest.mark.parametrize(
    "conditions, found",
    [
        ([], None),
        ([{"type": "Other", "status": "True"}], None),
        ([None, "text", ["Ready"], {"type": None}], None),  # entries of the wrong type are passed over
        ([{"type": "Other"}, READY], READY),
        ([READY, {"type": "Ready", "status": "False"}], READY),  # the first one, as meta.FindStatusCondition
    ],
    ids=["empty", "absent", "wrong-types", "present", "first"],
)
def test_find_condition(conditions, found) -> None:
    condition = find_condition(conditions, "Ready")
    if found is None:
        assert condition is None
    else:
        assert condition is not None and condition.raw is found and condition.is_true
