"""Torch policy: worked example 4.1 and its variants, reserved envs, envInjection, torchtune."""

from __future__ import annotations

import pytest

from trainguard.webhook.field import aggregate
from trainguard.webhook.runtime import BuildError, build_objects, effective_job, placeholder_keys, validate_trainjob

from .fixtures import LLM_DDP, TORCH_RUNTIME, container, deep, env_map, rjob, single_job_runtime, trainjob

RANK = {"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}


def build_jobset(tj, rt):
    return build_objects(tj, rt, keys=placeholder_keys())[0]


def test_worked_example_4_1():
    js = build_jobset(LLM_DDP, TORCH_RUNTIME)
    assert js["apiVersion"] == "jobset.x-k8s.io/v1alpha2" and js["kind"] == "JobSet"
    assert js["metadata"]["name"] == "llm-ddp" and js["metadata"]["namespace"] == "team-a"
    assert "labels" not in js["metadata"]  # runtime-object labels are not propagated
    assert js["metadata"]["ownerReferences"] == [
        {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "llm-ddp", "uid": "7f0c-uid", "controller": True, "blockOwnerDeletion": True}
    ]
    assert js["spec"]["suspend"] is False
    node = rjob(js, "node")
    assert node["groupName"] == "default" and node["replicas"] == 1
    assert node["template"]["metadata"] == {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}}
    assert node["template"]["spec"]["parallelism"] == 4 and node["template"]["spec"]["completions"] == 4
    c = container(node)
    assert c["image"] == "ghcr.io/acme/train:1.0"
    assert c["command"] == ["torchrun", "/app/train.py"] and c["args"] == ["--epochs=3"]
    assert c["resources"] == {"requests": {"cpu": "32", "memory": "256Gi"}, "limits": {"nvidia.com/gpu": 8}}
    assert c["ports"] == [{"containerPort": 29500}]
    assert c["env"] == [
        {"name": "NCCL_DEBUG", "value": "INFO"},
        {"name": "PET_NNODES", "value": "4"},
        {"name": "PET_NPROC_PER_NODE", "value": "auto"},
        {"name": "PET_NODE_RANK", "valueFrom": RANK},
        {"name": "PET_MASTER_ADDR", "value": "llm-ddp-node-0-0.llm-ddp"},
        {"name": "PET_MASTER_PORT", "value": "29500"},
    ]


def test_effective_job_numbers_for_4_1():
    job = effective_job(LLM_DDP, TORCH_RUNTIME)
    assert (job.ml_policy, job.num_nodes, job.gpus_per_node, job.total_gpus, job.trainer_jobs) == ("torch", 4, 8, 32, ("node",))
    ps = job.pod_set("node")
    assert ps.count == 4 and ps.ancestor == "trainer" and ps.containers == ("node",)
    assert str(ps.requests["cpu"]) == "32" and str(ps.requests["nvidia.com/gpu"]) == "8"


@pytest.mark.parametrize(
    "trainer_change, expected",
    [
        ({"resourcesPerNode": {"limits": {"cpu": "3.7"}}}, "4"),
        ({"resourcesPerNode": {"requests": {"cpu": "2500m"}}}, "3"),
        ({"resourcesPerNode": {"requests": {"cpu": "0.7"}}}, "1"),
        ({"resourcesPerNode": None}, "1"),
        ({"numProcPerNode": 3}, "3"),
    ],
    ids=["cpu-3.7", "cpu-2500m", "cpu-0.7", "no-resources", "numProcPerNode-3"],
)
def test_worked_example_4_1_variants(trainer_change, expected):
    tj = deep(LLM_DDP)
    tj["spec"]["trainer"].update(trainer_change)
    if trainer_change.get("resourcesPerNode", 1) is None:
        del tj["spec"]["trainer"]["resourcesPerNode"]
    assert env_map(container(rjob(build_jobset(tj, TORCH_RUNTIME), "node")))["PET_NPROC_PER_NODE"] == expected


def test_merged_view_counts_runtime_gpus_when_override_adds_cpu_only():
    # Upstream bug #3974 would count 0 GPUs here and pass a CPU count; the merged pod has 8 GPUs.
    rt = single_job_runtime({"torch": {}}, container={"name": "node", "image": "i", "resources": {"limits": {"nvidia.com/gpu": 8}}})
    tj = trainjob(trainer={"numNodes": 2, "resourcesPerNode": {"requests": {"cpu": "16"}}})
    job = effective_job(tj, rt)
    assert (job.gpus_per_node, job.total_gpus) == (8, 16)
    assert env_map(container(rjob(build_jobset(tj, rt), "node")))["PET_NPROC_PER_NODE"] == "auto"


def test_without_spec_trainer_no_pet_env_and_runtime_node_count():
    tj = deep(LLM_DDP)
    del tj["spec"]["trainer"]
    node = rjob(build_jobset(tj, TORCH_RUNTIME), "node")
    assert node["template"]["spec"]["parallelism"] == 1
    c = container(node)
    assert "env" not in c and "ports" not in c and c["image"].startswith("pytorch/")


@pytest.mark.parametrize(
    "env, message",
    [
        ([{"name": "PET_NNODES", "value": "1"}, {"name": "PET_MASTER_ADDR", "value": "x"}],
         'spec.trainer.env: Invalid value: [{"name":"PET_NNODES","value":"1"},{"name":"PET_MASTER_ADDR","value":"x"}]: '
         "must not have reserved envs, invalid envs configured: [PET_MASTER_ADDR PET_NNODES]"),
        ([{"name": "NCCL_DEBUG", "value": "INFO"}], ""),
    ],
    ids=["reject-reserved", "accept"],
)
def test_reserved_envs(env, message):
    tj = trainjob(trainer={"env": env})
    errors, warnings = validate_trainjob(tj, None, single_job_runtime({"torch": {}}), None)
    assert aggregate(errors) == message and warnings == []


def _injection_runtime(targets):
    rt = single_job_runtime({"torch": {"envInjection": {"targets": targets}}})
    rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["initContainers"] = [{"name": "warmup", "image": "w"}]
    rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"].append({"name": "sidecar", "image": "s"})
    return rt


@pytest.mark.parametrize(
    "targets, message",
    [
        ([{"jobName": "node", "containerNames": ["missing"]}],
         'spec.runtimeRef: Invalid value: {"jobName":"node","containerNames":["missing"]}: envInjection target podSet "node" container "missing" not found in runtime template'),
        ([{"jobName": "ghost", "containerNames": ["sidecar"]}],
         'spec.runtimeRef: Invalid value: {"jobName":"ghost","containerNames":["sidecar"]}: envInjection target podSet "ghost" container "sidecar" not found in runtime template'),
        ([{"jobName": "node", "containerNames": ["sidecar", "warmup"]}], ""),
    ],
    ids=["reject-container", "reject-job", "accept"],
)
def test_env_injection_targets_validation(targets, message):
    errors, _ = validate_trainjob(trainjob(trainer={"numNodes": 2}), None, _injection_runtime(targets), None)
    assert aggregate(errors) == message


def test_env_injection_injects_all_pet_envs_even_without_trainer():
    rt = _injection_runtime([{"jobName": "node", "containerNames": ["sidecar", "warmup"]}])
    js = build_jobset(trainjob(), rt)
    node = rjob(js, "node")
    for c in (container(node, "sidecar"), node["template"]["spec"]["template"]["spec"]["initContainers"][0]):
        assert set(env_map(c)) == {"PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT"}
    assert "env" not in container(node)  # no spec.trainer: main container untouched


def test_env_injection_missing_target_is_a_build_error():
    with pytest.raises(BuildError, match='container "nope" not found'):
        effective_job(trainjob(), _injection_runtime([{"jobName": "node", "containerNames": ["nope"]}]))


# -- torchtune ---------------------------------------------------------------------------------------------


def _tune_runtime(name="torchtune-llama3.2-1b"):
    rt = single_job_runtime(
        {"numNodes": 1, "torch": {}},
        name=name,
        container={
            "name": "node",
            "image": "tt",
            "command": ["tune", "run", "full_finetune_distributed", "output_dir=/workspace/output", "tokenizer.path=/workspace/model/tok.model"],
            "resources": {"limits": {"nvidia.com/gpu": 2}},
        },
    )
    return rt


def _tune_job(runtime="torchtune-llama3.2-1b", **trainer):
    return trainjob(runtime=runtime, trainer={"command": ["tune", "run"], **trainer})


@pytest.mark.parametrize(
    "runtime, trainer, message",
    [
        ("torchtune-mistral-7b", {}, 'spec.runtimeRef.name: Invalid value: "torchtune-mistral-7b": must have a supported pretrained model, invalid model configured: mistral/7B'),
        ("torchtune-llama3.2-1b", {"numNodes": 2}, "spec.trainer.numNodes: Invalid value: 2: must be 1 for llama3_2/1B model"),
        ("torchtune-qwen2.5-1.5b", {"args": ["model.quantize_base=True"], "numProcPerNode": 1},
         'spec.runtimeRef.name: Invalid value: "torchtune-qwen2.5-1.5b": QLoRA is not supported for qwen2_5/1.5B model'),
        ("torchtune-llama3.3-70b", {"numNodes": 2, "args": ["model.lora_attn_modules=[q_proj]"]},
         "spec.trainer.numNodes: Invalid value: 2: LoRA fine-tuning is not supported for multi-node training in TorchTune"),
        ("torchtune-llama3.2-1b", {"args": ["epochs=1", "output_dir=/tmp"]},
         'spec.trainer.args[1]: Invalid value: "output_dir=/tmp": must not set immutable config "output_dir" in trainer args; it is managed by the runtime'),
        ("torchtune-llama3.3-70b", {"numNodes": 2}, ""),
        ("torchtune-llama3.2-1b", {"args": ["epochs=1"]}, ""),
    ],
    ids=["unsupported-model", "multi-node-small", "qlora-qwen", "lora-multinode", "immutable-arg", "accept-70b", "accept-1b"],
)
def test_torchtune_validation(runtime, trainer, message):
    errors, _ = validate_trainjob(_tune_job(runtime, **trainer), None, _tune_runtime(runtime), None)
    assert aggregate(errors) == message


def test_torchtune_distributed_qlora_on_small_model_needs_one_device():
    errors, _ = validate_trainjob(_tune_job(args=["model.quantize_base=True"]), None, _tune_runtime(), None)
    assert [e.path for e in errors] == ["spec.trainer.numProcPerNode", "spec.trainer.resourcesPerNode"]


@pytest.mark.parametrize(
    "runtime, trainer, command",
    [
        ("torchtune-llama3.2-1b", {"numProcPerNode": 1},
         ["tune", "run", "full_finetune_single_device", "--config", "llama3_2/1B_full_single_device"]),
        ("torchtune-llama3.2-1b", {},  # 2 GPUs, auto -> distributed on one node, rendezvous needed
         ["tune", "run", "--rdzv_endpoint=job-node-0-0.job:29500", "full_finetune_distributed", "--config", "llama3_2/1B_full"]),
        ("torchtune-llama3.2-1b", {"args": ["model.lora_attn_modules=[q_proj]"]},
         ["tune", "run", "--rdzv_endpoint=job-node-0-0.job:29500", "lora_finetune_distributed", "--config", "llama3_2/1B_lora"]),
        ("torchtune-llama3.3-70b", {"numNodes": 2},
         ["tune", "run", "--rdzv_endpoint=job-node-0-0.job:29500", "full_finetune_distributed", "--config", "llama3_3/70B_full_multinode"]),
    ],
    ids=["single-device", "multi-device", "lora", "multi-node"],
)
def test_torchtune_command(runtime, trainer, command):
    c = container(rjob(build_jobset(_tune_job(runtime, **trainer), _tune_runtime(runtime)), "node"))
    overrides = ["output_dir=/workspace/output", "tokenizer.path=/workspace/model/tok.model"]
    assert c["command"] == command + overrides
    env = env_map(c)
    assert "PET_MASTER_ADDR" not in env and "PET_NNODES" in env
    assert c["ports"] == [{"containerPort": 29500}]
