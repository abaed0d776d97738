"""``trainer.numNodes`` sizes the trainer job exactly as upstream v2.3's plugins do, 0 included.

Upstream copies the value into the pod set's count unclamped (Torch, PlainML, JAX, XGBoost, Flux; MPI's ``node`` job
too, except with runLauncherAsNode, where it takes ``max(numNodes - 1, 1)``). A job of 0 nodes builds parallelism
0 and framework envs saying 0 (``PET_NNODES=0``): its Jobs complete at once with no pod. trainguard used to build
one node. A negative value is a deliberate difference: upstream admits it and builds a negative count; trainguard
denies it at admission and the build counts it as 0, so it can never subtract the trainer's GPUs from a job's total
and slip the job's other replicated jobs past a policy limit.
"""

from __future__ import annotations

import copy

import pytest

from trainguard.webhook.field import aggregate
from trainguard.webhook.runtime import build_objects, effective_job, placeholder_keys, validate_trainjob

from .fixtures import MPI_RUNTIME, container, env_map, single_job_runtime, trainjob


def _parallelism(js: dict, name: str) -> tuple[int, int]:
    spec = next(rj for rj in js["spec"]["replicatedJobs"] if rj["name"] == name)["template"]["spec"]
    return spec["parallelism"], spec["completions"]


def _mpi(launcher_as_node: bool) -> dict:
    rt = copy.deepcopy(MPI_RUNTIME)
    rt["spec"]["mlPolicy"]["mpi"]["runLauncherAsNode"] = launcher_as_node
    return rt


GPU_NODE = {"name": "node", "image": "img", "resources": {"limits": {"nvidia.com/gpu": 2}}}

CASES = [
    # (case, runtime, numNodes, job sized, its pods, {env of the node container that must say so})
    ("torch 0", single_job_runtime({"numNodes": 3, "torch": {}}), 0, "node", 0, {"PET_NNODES": "0"}),
    ("torch 5", single_job_runtime({"numNodes": 3, "torch": {}}), 5, "node", 5, {"PET_NNODES": "5"}),
    ("torch unset: the runtime's", single_job_runtime({"numNodes": 3, "torch": {}}), None, "node", 3, {"PET_NNODES": "3"}),
    ("plain 0", single_job_runtime({"numNodes": 2}), 0, "node", 0, {}),
    ("jax 0", single_job_runtime({"numNodes": 2, "jax": {}}), 0, "node", 0, {"JAX_NUM_PROCESSES": "0"}),
    ("xgboost 0", single_job_runtime({"numNodes": 2, "xgboost": {}}, container=GPU_NODE), 0, "node", 0,
     {"DMLC_NUM_WORKER": "0"}),
    ("flux 0", single_job_runtime({"numNodes": 2, "flux": {"numProcPerNode": 1}}), 0, "node", 0, {}),
    ("mpi 0", _mpi(False), 0, "node", 0, {}),
    ("mpi 0, launcher as node: at least one worker", _mpi(True), 0, "node", 1, {}),
    ("mpi 3, launcher as node", _mpi(True), 3, "node", 2, {}),
]


@pytest.mark.parametrize(("case", "rt", "nodes", "job", "pods", "envs"), CASES, ids=[c[0] for c in CASES])
def test_num_nodes_sizes_the_trainer_job_like_upstream(case, rt, nodes, job, pods, envs) -> None:
    trainer = {} if nodes is None else {"numNodes": nodes}
    tj = trainjob("t", trainer=trainer)
    js = build_objects(tj, rt, keys=placeholder_keys())[0]
    assert _parallelism(js, job) == (pods, pods)
    node = next(rj for rj in js["spec"]["replicatedJobs"] if rj["name"] == job)
    got = env_map(container(node))
    assert {k: got.get(k) for k in envs} == envs


def test_zero_nodes_leave_nothing_to_schedule() -> None:
    job = effective_job(trainjob("t", trainer={"numNodes": 0}), single_job_runtime({"numNodes": 4, "torch": {}}, container=GPU_NODE))
    assert (job.num_nodes, job.total_gpus) == (0, 0)


def test_zero_node_flux_and_mpi_objects_are_upstreams() -> None:
    flux_objects = build_objects(trainjob("t", trainer={"numNodes": 0}), single_job_runtime({"numNodes": 2, "flux": {"numProcPerNode": 2}}),
                                 keys=placeholder_keys())
    scripts = next(o for o in flux_objects if o["kind"] == "ConfigMap")["data"]
    # Upstream's generateRange(0, 0) and its -N/-n flags, as they come out for 0.
    assert 'hosts="t-node-0-[0--1]"' in scripts["init.sh"]
    assert 'flags="-N 0 -n 0  "' in scripts["entrypoint.sh"]
    mpi_objects = build_objects(trainjob("t", trainer={"numNodes": 0}), _mpi(False), keys=placeholder_keys())
    hostfile = next(o for o in mpi_objects if o["kind"] == "ConfigMap")
    assert hostfile["data"] == {"hostfile": ""}


# -- negative: denied at admission (upstream admits), counted as 0 by the build ------------------------------


def _with_gpu_sidecar_job() -> dict:
    """A trainer job ``node`` plus a non-trainer job ``evaluator`` of 2 pods with 8 GPUs each."""
    rt = single_job_runtime({"numNodes": 1, "torch": {}}, container=GPU_NODE)
    evaluator = copy.deepcopy(rt["spec"]["template"]["spec"]["replicatedJobs"][0])
    evaluator["name"] = "evaluator"
    evaluator["template"].pop("metadata")
    evaluator["template"]["spec"]["parallelism"] = 2
    evaluator["template"]["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 8}}
    rt["spec"]["template"]["spec"]["replicatedJobs"].append(evaluator)
    return rt


@pytest.mark.parametrize(
    ("nodes", "message"),
    [(-1, "spec.trainer.numNodes: Invalid value: -1: must be greater than or equal to 0"), (0, ""), (2, "")],
)
def test_negative_num_nodes_deliberately_differs_from_upstream(nodes, message) -> None:
    tj = trainjob("t", trainer={"numNodes": nodes})
    assert aggregate(validate_trainjob(tj, None, _with_gpu_sidecar_job(), None)[0]) == message


@pytest.mark.parametrize("rt", [_with_gpu_sidecar_job(), _mpi(False)], ids=["torch", "mpi"])
def test_negative_num_nodes_count_as_zero_and_never_offset_other_jobs(rt) -> None:
    job = effective_job(trainjob("t", trainer={"numNodes": -100}), rt)
    trainer = job.pod_set("node")
    assert trainer is not None and trainer.count == 0
    assert job.total_gpus == sum(ps.gpus * ps.pods for ps in job.pod_sets if ps.name != "node") >= 0
