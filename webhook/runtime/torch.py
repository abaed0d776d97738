"""Torch ML policy (upstream's ``plugins/torch/torch.go``): torchrun's PET_* environment, port 29500, envInjection.

Process count (``PET_NPROC_PER_NODE``): ``trainer.numProcPerNode`` when set; otherwise ``auto``, which stays
literal when the node has GPUs (torchrun resolves it) and becomes the CPU count when it has none. The GPU and CPU
counts are read from the node container AFTER ``resourcesPerNode`` was merged into it, i.e. what the pod really
requests; upstream reads the raw override (bug #3974), which disagrees when the override adds only CPU to a
runtime that declares GPUs.
"""

from __future__ import annotations

from trainguard.webhook.field import FieldError, invalid
from trainguard.webhook.runtime import torchtune
from trainguard.webhook.runtime.draft import (
    BuildError,
    Draft,
    completion_index_env,
    env,
    set_trainer_count,
    upsert_into_container,
)
from trainguard.webhook.runtime.merge import upsert
from trainguard.webhook.runtime.names import NODE, TRAINER_PORT
from trainguard.webhook.runtime.plugin import ML, ValidationContext
from trainguard.webhook.runtime.reserved_env import reserved_env_errors
from trainguard.webhook.runtime.resources import cpu_count, gpu_count

NAME = "torch"
KIND = ML
NEEDS_NODE_JOB = True
RESERVED_ENVS = ("PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT")


def env_injection_targets(draft: Draft) -> list[dict]:
    return list(((draft.ml_policy_source(NAME).get("envInjection") or {}).get("targets")) or [])


def validate(draft: Draft, ctx: ValidationContext) -> list[FieldError]:
    errors: list[FieldError] = []
    for target in env_injection_targets(draft):
        rj = draft.job(target.get("jobName", ""))
        names = {c.get("name") for c in draft.containers(rj)} | {c.get("name") for c in draft.containers(rj, init=True)}
        for container in target.get("containerNames") or []:
            if rj is None or container not in names:
                errors.append(
                    invalid(
                        "spec.runtimeRef",
                        target,  # upstream quotes the whole envInjection target, not the runtimeRef
                        f'envInjection target podSet "{target.get("jobName")}" container "{container}" not found in runtime template',
                    )
                )
    errors += reserved_env_errors(draft, RESERVED_ENVS)
    if torchtune.is_torchtune(draft):
        errors += torchtune.validate(draft)
    return errors


def num_proc_per_node(draft: Draft) -> str:
    value = draft.trainer.num_proc_per_node
    if value is not None:
        return str(value)
    resources = draft.node_resources()
    if gpu_count(resources) > 0:
        return "auto"
    return str(cpu_count(resources))


def master_address(draft: Draft) -> str:
    # Upstream hard-codes the `node` job and the TrainJob-name subdomain, whatever network.subdomain says.
    return f"{draft.name}-{NODE}-0-0.{draft.name}"


def enforce(draft: Draft) -> None:
    set_trainer_count(draft)
    trainer_rj = draft.trainer_job()
    nnodes = draft.counts.get(trainer_rj["name"], 1) if trainer_rj else 1
    nproc = num_proc_per_node(draft)
    draft.facts["torch_nproc_per_node"] = nproc
    rank = completion_index_env("PET_NODE_RANK")
    master = [env("PET_MASTER_ADDR", master_address(draft)), env("PET_MASTER_PORT", TRAINER_PORT)]
    if draft.has_trainer and trainer_rj is not None:
        envs = [env("PET_NNODES", nnodes), env("PET_NPROC_PER_NODE", nproc), rank]
        if torchtune.is_torchtune(draft):
            torchtune.enforce(draft, trainer_rj, nnodes)
        else:
            envs += master
        upsert_into_container(draft, trainer_rj, NODE, env_vars=envs, ports=[{"containerPort": TRAINER_PORT}])
    # envInjection targets get all five PET_* envs, even for torchtune and without spec.trainer (v2.3).
    all_envs = [env("PET_NNODES", nnodes), env("PET_NPROC_PER_NODE", nproc), rank, *master]
    for target in env_injection_targets(draft):
        rj = draft.job(target.get("jobName", ""))
        for name in target.get("containerNames") or []:
            done = upsert_into_container(draft, rj, name, env_vars=all_envs)
            if not done:
                done = _upsert_init_container_env(draft, rj, name, all_envs)
            if not done:
                raise BuildError(f'envInjection target podSet "{target.get("jobName")}" container "{name}" not found in runtime template')


def _upsert_init_container_env(draft: Draft, rj: dict | None, name: str, envs: list[dict]) -> bool:
    for c in draft.containers(rj, init=True):
        if c.get("name") == name:
            c["env"] = upsert(c.get("env"), envs, "name")
            return True
    return False
