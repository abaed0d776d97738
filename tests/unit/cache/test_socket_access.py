"""Who can reach a cache agent's socket (issue 10, attack 6), as the builders render it: the agent's DaemonSet
creates the socket 0660 with ``SOCKET_GROUP_ID`` in a 0750 directory of that group, and only the trainer pods of
the cache's TrainJobs carry that group (and mount that directory)."""

from __future__ import annotations

import argparse
import copy

import pytest

from trainguard.cache import main as agent_main
from trainguard.controller.reconcile.cache_daemonset import build_daemonset
from trainguard.webhook.policy.dataset_cache import DatasetCacheSources
from trainguard.webhook.runtime.dataset_cache import SOCKET_GROUP_ID, socket_host_directory, wire_dataset_cache

from tests.unit.cache.test_wiring import CACHE, TRAINJOB, jobset, rjob

DATASET_CACHE = {
    "apiVersion": "trainguard.io/v1alpha1",
    "kind": "DatasetCache",
    "metadata": {"name": "imagenet", "namespace": "team-a", "uid": "uid-1"},
    "spec": {"source": {"persistentVolumeClaim": {"claimName": "datasets"}, "shards": "*.tar"}, "memoryBudget": "1Gi"},
}


def daemonset() -> dict:
    return build_daemonset(DATASET_CACHE, image="img", sources=DatasetCacheSources.of([]))  # PVCs allowed


def parse_agent_args(args: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    agent_main.configure(parser)
    return parser.parse_args(args[1:])  # args[0] is the "cache-agent" subcommand


def pod_groups(js: dict, job: str) -> list[int] | None:
    rj = next(r for r in js["spec"]["replicatedJobs"] if r["name"] == job)
    return (rj["template"]["spec"]["template"]["spec"].get("securityContext") or {}).get("supplementalGroups")


def test_the_agent_serves_its_socket_to_the_group_only() -> None:
    pod = daemonset()["spec"]["template"]["spec"]
    agent = parse_agent_args(pod["containers"][0]["args"])
    assert agent.socket_group == SOCKET_GROUP_ID
    assert pod["securityContext"]["supplementalGroups"] == [SOCKET_GROUP_ID]  # the agent may chgrp its socket
    prepare = parse_agent_args(pod["initContainers"][0]["args"])
    assert (prepare.prepare_socket_dir, prepare.owner_uid, prepare.socket_group) == (
        "/run/trainguard-cache", 65532, SOCKET_GROUP_ID)
    assert agent_main.SOCKET_DIR_MODE == 0o750
    socket_volume = next(v for v in pod["volumes"] if v["name"] == "socket")
    assert socket_volume["hostPath"]["path"] == socket_host_directory("team-a", "imagenet")


@pytest.mark.parametrize(
    "existing, expected",
    [(None, [SOCKET_GROUP_ID]), ([1000], [1000, SOCKET_GROUP_ID]), ([SOCKET_GROUP_ID, 7], [SOCKET_GROUP_ID, 7])],
    ids=["none", "kept-then-added", "already-there"],
)
def test_trainer_pods_get_the_group_once(existing: list[int] | None, expected: list[int]) -> None:
    trainer = rjob("node", "trainer", ["node"])
    if existing is not None:
        trainer["template"]["spec"]["template"]["spec"]["securityContext"] = {
            "runAsUser": 1000, "supplementalGroups": list(existing)}
    js = jobset(rjob("dataset-initializer", "dataset-initializer", ["dataset-initializer"]), trainer)
    before = copy.deepcopy(js)
    wired = wire_dataset_cache(js, TRAINJOB, CACHE)
    assert js == before
    assert pod_groups(wired, "node") == expected
    assert pod_groups(wire_dataset_cache(wired, TRAINJOB, CACHE), "node") == expected  # idempotent
    assert pod_groups(wired, "dataset-initializer") is None  # only pods that mount the socket get the group
    if existing is not None:
        rj = wired["spec"]["replicatedJobs"][1]
        assert rj["template"]["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == 1000


def test_mpi_launcher_and_workers_both_get_the_group() -> None:
    wired = wire_dataset_cache(jobset(rjob("launcher", "trainer", ["node"]), rjob("node", None, ["node"])),
                               TRAINJOB, CACHE)
    assert pod_groups(wired, "launcher") == pod_groups(wired, "node") == [SOCKET_GROUP_ID]
