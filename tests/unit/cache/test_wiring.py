"""wire_dataset_cache: which containers get the socket mount and env, idempotence, and refusals."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from trainguard.webhook.runtime.dataset_cache import (
    DATASET_CACHE_ANNOTATION,
    DatasetCacheWiringError,
    socket_host_directory,
    wire_dataset_cache,
)

CACHE = {"apiVersion": "trainguard.io/v1alpha1", "kind": "DatasetCache",
         "metadata": {"name": "imagenet", "namespace": "team-a"}}
TRAINJOB = {"metadata": {"name": "job", "namespace": "team-a", "annotations": {DATASET_CACHE_ANNOTATION: "imagenet"}}}

MOUNT = {"name": "trainguard-dataset-cache", "mountPath": "/var/run/trainguard/cache", "readOnly": True}
ENV = [
    {"name": "TRAINGUARD_CACHE_SOCKET", "value": "/var/run/trainguard/cache/agent.sock"},
    {"name": "TRAINGUARD_DATASET", "value": "imagenet"},
]


def rjob(name: str, ancestor: str | None, containers: list[str]) -> dict:
    labels = {"trainer.kubeflow.org/trainjob-ancestor-step": ancestor} if ancestor else {}
    return {
        "name": name,
        "template": {
            "metadata": {"labels": labels},
            "spec": {"template": {"spec": {"containers": [{"name": c, "image": "i"} for c in containers]}}},
        },
    }


def jobset(*rjobs: dict) -> dict:
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "job", "namespace": "team-a"}, "spec": {"replicatedJobs": list(rjobs)}}


def containers_of(js: dict, job: str) -> dict[str, dict]:
    rj = next(r for r in js["spec"]["replicatedJobs"] if r["name"] == job)
    return {c["name"]: c for c in rj["template"]["spec"]["template"]["spec"]["containers"]}


def volumes_of(js: dict, job: str) -> list[dict]:
    rj = next(r for r in js["spec"]["replicatedJobs"] if r["name"] == job)
    return rj["template"]["spec"]["template"]["spec"].get("volumes", [])


@pytest.mark.parametrize(
    "rjobs, wired, untouched",
    [
        ([rjob("node", "trainer", ["node"])], [("node", "node")], []),
        (
            [rjob("dataset-initializer", "dataset-initializer", ["dataset-initializer"]),
             rjob("trainer", "trainer", ["node", "sidecar"])],
            [("trainer", "node")],
            [("dataset-initializer", "dataset-initializer"), ("trainer", "sidecar")],
        ),
        ([rjob("launcher", "trainer", ["node"]), rjob("node", None, ["node"])], [("launcher", "node"), ("node", "node")], []),
    ],
    ids=["torch", "initializer-and-sidecar-untouched", "mpi-launcher-and-workers"],
)
def test_trainer_containers_get_mount_and_env(rjobs: list, wired: list, untouched: list) -> None:
    js = wire_dataset_cache(jobset(*rjobs), TRAINJOB, CACHE)
    for job, container in wired:
        c = containers_of(js, job)[container]
        assert c["volumeMounts"] == [MOUNT] and c["env"] == ENV
        assert volumes_of(js, job) == [{
            "name": "trainguard-dataset-cache",
            "hostPath": {"path": "/var/run/trainguard/cache/team-a/imagenet", "type": "DirectoryOrCreate"},
        }]
    for job, container in untouched:
        assert "env" not in containers_of(js, job)[container]


def test_wiring_is_idempotent_and_pure() -> None:
    source = jobset(rjob("node", "trainer", ["node"]))
    before = copy.deepcopy(source)
    once = wire_dataset_cache(source, TRAINJOB, CACHE)
    assert source == before
    assert wire_dataset_cache(once, TRAINJOB, CACHE) == once


def test_existing_env_is_replaced_in_place() -> None:
    js = jobset(rjob("node", "trainer", ["node"]))
    node = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
    node["env"] = [{"name": "A", "value": "1"}, {"name": "TRAINGUARD_DATASET", "value": "old"}]
    out = containers_of(wire_dataset_cache(js, TRAINJOB, CACHE), "node")["node"]["env"]
    assert [e["name"] for e in out] == ["A", "TRAINGUARD_DATASET", "TRAINGUARD_CACHE_SOCKET"]
    assert out[1]["value"] == "imagenet"


@pytest.mark.parametrize(
    "trainjob, cache_obj, js, message",
    [
        ({"metadata": {"namespace": "team-a"}}, CACHE, jobset(rjob("node", "trainer", ["node"])), "Required value"),
        (
            {"metadata": {"namespace": "team-a", "annotations": {DATASET_CACHE_ANNOTATION: "other"}}},
            CACHE, jobset(rjob("node", "trainer", ["node"])), "does not name the DatasetCache",
        ),
        (
            {"metadata": {"namespace": "team-b", "annotations": {DATASET_CACHE_ANNOTATION: "imagenet"}}},
            CACHE, jobset(rjob("node", "trainer", ["node"])), "must be in the TrainJob's namespace",
        ),
        (TRAINJOB, CACHE, jobset(rjob("init", "dataset-initializer", ["init"])), "no trainer container"),
    ],
    ids=["not-opted-in", "other-cache", "other-namespace", "no-trainer"],
)
def test_refused(trainjob: dict, cache_obj: dict, js: dict, message: str) -> None:
    with pytest.raises(DatasetCacheWiringError, match=message):
        wire_dataset_cache(js, trainjob, cache_obj)


@pytest.mark.parametrize("namespace, name", [("a", ".."), ("a/b", "c"), ("", "c"), ("a", "")])
def test_socket_directory_refuses_path_tricks(namespace: str, name: str) -> None:
    with pytest.raises(ValueError):
        socket_host_directory(namespace, name)


def test_socket_directory_matches_the_daemonset() -> None:
    from trainguard.controller.reconcile.cache_daemonset import build_daemonset
    from trainguard.webhook.policy.dataset_cache import DatasetCacheSources

    ds = build_daemonset({**CACHE, "spec": {"source": {"hostPath": {"path": "/d"}, "shards": "*"}, "memoryBudget": "1Gi"}},
                         image="img", sources=DatasetCacheSources.of(["/d"]))
    socket_volume = next(v for v in ds["spec"]["template"]["spec"]["volumes"] if v["name"] == "socket")
    assert socket_volume["hostPath"]["path"] == socket_host_directory("team-a", "imagenet")
