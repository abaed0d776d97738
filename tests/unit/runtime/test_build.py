"""build_objects as a whole: skip rules, suspend, idempotence, purity, trainguard extras, dataset cache, models."""

from __future__ import annotations

import builtins
import copy
import json
import socket

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainguard.webhook.runtime import BuildError, ExistingObjects, build_objects, effective_job, placeholder_keys

from .fixtures import LLM_DDP, MPI_RUNTIME, PLAIN_BATCH, TAB_TRAIN, TORCH_RUNTIME, deep, pod, rjob, trainjob


def objects(tj, rt, **kw):
    return build_objects(tj, rt, keys=placeholder_keys(), **kw)


@pytest.mark.parametrize(
    "tj_suspend, existing_suspend, rebuilt",
    [(False, False, False), (True, False, True), (False, True, True), (True, True, True)],
    ids=["running-skipped", "suspending", "resuming", "suspended"],
)
def test_running_jobset_is_never_mutated(tj_suspend, existing_suspend, rebuilt):
    tj = deep(TAB_TRAIN)
    tj["spec"]["suspend"] = tj_suspend
    existing = ExistingObjects(jobset={"spec": {"suspend": existing_suspend}}, podgroup=True)
    kinds = [o["kind"] for o in objects(tj, PLAIN_BATCH, existing=existing)]
    assert ("JobSet" in kinds) is rebuilt


def test_suspend_copied_from_trainjob():
    tj = deep(LLM_DDP)
    tj["spec"]["suspend"] = True
    assert objects(tj, TORCH_RUNTIME)[0]["spec"]["suspend"] is True


@pytest.mark.parametrize(
    "tj, rt",
    [(LLM_DDP, TORCH_RUNTIME), (TAB_TRAIN, PLAIN_BATCH), (trainjob("pi", "mpi-distributed", trainer={"numNodes": 3}), MPI_RUNTIME)],
    ids=["torch", "plain", "mpi"],
)
def test_building_twice_gives_the_same_objects_and_leaves_inputs_alone(tj, rt):
    tj_before, rt_before = copy.deepcopy(tj), copy.deepcopy(rt)
    first, second = objects(tj, rt), objects(tj, rt)
    assert first == second
    assert (tj, rt) == (tj_before, rt_before)


def test_build_is_pure(monkeypatch):
    """No file, socket or environment access while building (placeholder keys; generation is injected)."""

    def refuse(*args, **kwargs):
        raise AssertionError("I/O during build")

    monkeypatch.setattr(builtins, "open", refuse)
    monkeypatch.setattr(socket, "socket", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    assert objects(trainjob("pi", "mpi-distributed", trainer={"numNodes": 2}), MPI_RUNTIME)
    assert objects(TAB_TRAIN, PLAIN_BATCH)


class _Model:
    """Stands in for a trainguard.webhook.api model: anything with dump() is accepted."""

    def __init__(self, data):
        self._data = data

    def dump(self):
        return copy.deepcopy(self._data)


def test_models_are_accepted():
    assert objects(_Model(LLM_DDP), _Model(TORCH_RUNTIME)) == objects(LLM_DDP, TORCH_RUNTIME)


# -- trainguard extras -------------------------------------------------------------------------------------


def _kai(tj):
    tj = deep(tj)
    tj["metadata"]["annotations"] = {"trainguard.io/scheduler-name": "kai-scheduler"}
    return tj


def test_scheduler_name_applied_where_unset_and_recorded():
    rt = deep(PLAIN_BATCH)
    pod(rt["spec"]["template"]["spec"]["replicatedJobs"][0])["schedulerName"] = "custom"
    js = objects(_kai(TAB_TRAIN), rt)[0]
    assert pod(rjob(js, "node"))["schedulerName"] == "kai-scheduler"
    assert pod(rjob(js, "dataset-initializer"))["schedulerName"] == "custom"  # the runtime author's choice wins
    effects = json.loads(js["metadata"]["annotations"]["trainguard.io/policy-effects"])
    assert effects == {"schedulerName": {"value": "kai-scheduler", "replicatedJobs": ["node"]}}


def test_no_scheduler_annotation_no_effects():
    js = objects(TAB_TRAIN, PLAIN_BATCH)[0]
    assert "annotations" not in js["metadata"]
    assert all("schedulerName" not in pod(rj) for rj in js["spec"]["replicatedJobs"])


# -- dataset cache -----------------------------------------------------------------------------------------


def _cached(name="imagenet"):
    tj = deep(LLM_DDP)
    tj["metadata"]["annotations"] = {"trainguard.io/dataset-cache": name}
    return tj


CACHE = {"apiVersion": "trainguard.io/v1alpha1", "kind": "DatasetCache", "metadata": {"name": "imagenet", "namespace": "team-a"}}


def test_dataset_cache_is_wired():
    js = objects(_cached(), TORCH_RUNTIME, dataset_cache=CACHE)[0]
    node = rjob(js, "node")
    assert any(v["name"] == "trainguard-dataset-cache" for v in pod(node)["volumes"])
    assert objects(_cached(), TORCH_RUNTIME, dataset_cache=CACHE) == [js]


@pytest.mark.parametrize(
    "cache, match",
    [(None, "was not provided"), ({**CACHE, "metadata": {"name": "other", "namespace": "team-a"}}, "names 'imagenet'"),
     ({**CACHE, "metadata": {"name": "imagenet", "namespace": "elsewhere"}}, "cannot wire")],
    ids=["missing", "wrong-name", "wrong-namespace"],
)
def test_dataset_cache_errors(cache, match):
    with pytest.raises(BuildError, match=match):
        objects(_cached(), TORCH_RUNTIME, dataset_cache=cache)


# -- properties --------------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    num_nodes=st.integers(min_value=1, max_value=64),
    gpus=st.integers(min_value=0, max_value=8),
    env=st.lists(st.sampled_from(["A", "B", "NCCL_DEBUG"]), max_size=3, unique=True),
)
def test_effective_numbers_follow_the_built_pods(num_nodes, gpus, env):
    tj = deep(LLM_DDP)
    tj["spec"]["trainer"].update(numNodes=num_nodes, env=[{"name": n, "value": "1"} for n in env])
    tj["spec"]["trainer"]["resourcesPerNode"] = {"limits": {"nvidia.com/gpu": gpus}} if gpus else {}
    job = effective_job(tj, TORCH_RUNTIME)
    js = objects(tj, TORCH_RUNTIME)[0]
    node = rjob(js, "node")
    assert node["template"]["spec"]["parallelism"] == num_nodes == job.num_nodes
    assert job.gpus_per_node == gpus and job.total_gpus == gpus * num_nodes
    assert objects(tj, TORCH_RUNTIME)[0] == js


def test_delete_directive_in_runtime_patch_keeps_node_container_and_null_resources_keep_runtime_gpus():
    rt = deep(TORCH_RUNTIME)
    rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["resources"] = {
        "limits": {"nvidia.com/gpu": 4}
    }
    tj = deep(LLM_DDP)
    tj["spec"]["trainer"]["resourcesPerNode"] = {"limits": None, "requests": {"cpu": "2"}}
    tj["spec"]["runtimePatches"] = [{"manager": "a.io/x", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"spec": {"template": {"spec": {"containers": [{"name": "node", "$patch": "delete"}]}}}}}]}}}}]
    job = effective_job(tj, rt)
    node = job.spec["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
    assert node["name"] == "node" and node["image"] == "ghcr.io/acme/train:1.0"
    assert node["resources"] == {"limits": {"nvidia.com/gpu": 4}, "requests": {"cpu": "2"}}
    assert job.gpus_per_node == 4 and job.total_gpus == 16


def _scribble(value):
    """Modify every dict and list reachable from ``value`` in place."""
    if isinstance(value, dict):
        for v in list(value.values()):
            _scribble(v)
        value["x-scribbled"] = True
    elif isinstance(value, list):
        for v in value:
            _scribble(v)
        value.append("x-scribbled")


def _with_patches(tj):
    tj = deep(tj)
    tj["spec"]["runtimePatches"] = [
        {"manager": "a.io/x", "trainingRuntimeSpec": {"template": {"metadata": {"labels": {"p": "1"}}, "spec": {"replicatedJobs": [
            {"name": "node", "template": {"metadata": {"labels": {"q": "1"}}, "spec": {"template": {"spec": {
                "nodeSelector": {"pool": "a"}, "tolerations": [{"key": "gpu", "operator": "Exists"}],
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "k", "operator": "In", "values": ["v"]}]}]}}}}}}}}]}}}},
    ]
    return tj


@pytest.mark.parametrize("tj, rt", [
    (_with_patches(LLM_DDP), TORCH_RUNTIME),
    (TAB_TRAIN, PLAIN_BATCH),
    (_with_patches(trainjob("pi", "mpi-distributed", trainer={"numNodes": 2, "env": [{"name": "A", "value": "1"}],
                                                             "resourcesPerNode": {"limits": {"nvidia.com/gpu": 2}}})),
     MPI_RUNTIME),
], ids=["torch", "plain-coscheduling", "mpi"])
def test_outputs_share_no_structure_with_inputs(tj, rt):
    """Merging copies the runtime once and patches into that copy: nothing returned may alias an input, so a
    caller (or a later policy) editing the effective job or a built object can never reach the TrainJob/runtime."""
    tj_before, rt_before = deep(tj), deep(rt)
    job = effective_job(tj, rt)
    built = objects(tj, rt)
    _scribble(job.spec)
    for obj in built:
        _scribble(obj)
    assert (tj, rt) == (tj_before, rt_before)
