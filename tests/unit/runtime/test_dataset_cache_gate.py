"""DatasetCache spec.holdTrainersUntilWarm: the build gates the trainer pod templates (and only when opted in)."""

from __future__ import annotations

import copy

import pytest

from trainguard.webhook.runtime import build_objects, placeholder_keys
from trainguard.webhook.runtime.dataset_cache import WAITS_FOR_LABEL, WARM_GATE, holds_trainers, wire_dataset_cache

from .fixtures import LLM_DDP, MPI_RUNTIME, TORCH_RUNTIME, deep, pod, rjob

KUEUE_GATE = {"name": "kueue.x-k8s.io/topology"}


def cache(hold: bool | None) -> dict:
    spec: dict = {"source": {"hostPath": {"path": "/data"}, "shards": "*.arrow"}, "memoryBudget": "1Gi"}
    if hold is not None:
        spec["holdTrainersUntilWarm"] = hold
    return {"apiVersion": "trainguard.io/v1alpha1", "kind": "DatasetCache",
            "metadata": {"name": "imagenet", "namespace": "team-a"}, "spec": spec}


def cached_job() -> dict:
    tj = deep(LLM_DDP)
    tj["metadata"]["annotations"] = {"trainguard.io/dataset-cache": "imagenet"}
    return tj


def template(js: dict, name: str) -> dict:
    return rjob(js, name)["template"]["spec"]["template"]


def test_gate_and_label_only_when_the_cache_opts_in() -> None:
    for hold in (None, False):
        js = build_objects(cached_job(), TORCH_RUNTIME, keys=placeholder_keys(), dataset_cache=cache(hold))[0]
        assert "schedulingGates" not in pod(rjob(js, "node"))
        assert WAITS_FOR_LABEL not in (template(js, "node").get("metadata") or {}).get("labels", {})
    js = build_objects(cached_job(), TORCH_RUNTIME, keys=placeholder_keys(), dataset_cache=cache(True))[0]
    assert pod(rjob(js, "node"))["schedulingGates"] == [{"name": WARM_GATE}]
    assert template(js, "node")["metadata"]["labels"][WAITS_FOR_LABEL] == "imagenet"
    assert holds_trainers(cache(True)) and not holds_trainers(cache(False)) and not holds_trainers(None)


def test_no_cache_no_gate() -> None:
    js = build_objects(deep(LLM_DDP), TORCH_RUNTIME, keys=placeholder_keys())[0]
    assert "schedulingGates" not in pod(rjob(js, "node"))


def test_gate_is_idempotent_and_keeps_other_gates() -> None:
    js = build_objects(cached_job(), TORCH_RUNTIME, keys=placeholder_keys(), dataset_cache=cache(True))[0]
    pod(rjob(js, "node"))["schedulingGates"].insert(0, dict(KUEUE_GATE))
    before = copy.deepcopy(js)
    once = wire_dataset_cache(js, cached_job(), cache(True))
    twice = wire_dataset_cache(once, cached_job(), cache(True))
    assert js == before  # input untouched
    assert once == twice
    assert pod(rjob(once, "node"))["schedulingGates"] == [KUEUE_GATE, {"name": WARM_GATE}]
    assert build_objects(cached_job(), TORCH_RUNTIME, keys=placeholder_keys(), dataset_cache=cache(True)) == \
        build_objects(cached_job(), TORCH_RUNTIME, keys=placeholder_keys(), dataset_cache=cache(True))


@pytest.mark.parametrize("gated", ["launcher", "node"])
def test_mpi_launcher_and_workers_are_both_held(gated: str) -> None:
    tj = deep(LLM_DDP)
    tj["metadata"]["annotations"] = {"trainguard.io/dataset-cache": "imagenet"}
    tj["spec"]["runtimeRef"]["name"] = MPI_RUNTIME["metadata"]["name"]
    js = build_objects(tj, MPI_RUNTIME, keys=placeholder_keys(), dataset_cache=cache(True))[0]
    assert {"name": WARM_GATE} in pod(rjob(js, gated))["schedulingGates"]
