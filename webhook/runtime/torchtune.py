"""Torchtune specialisation of the Torch policy (upstream's
``plugins/torch/torchtune.go``): active when ``trainer.command == ["tune","run"]``.

The runtime name encodes the model (``torchtune-llama3.2-1b`` -> ``llama3_2/1B``); the recipe and config file
follow from node count, processes per node, GPUs and the LoRA/QLoRA arguments; the runtime's own command
carries immutable config overrides (output_dir, tokenizer paths, checkpoint dir) that users may not override.
"""

from __future__ import annotations

from trainguard.webhook.field import FieldError, invalid
from trainguard.webhook.runtime.draft import Draft
from trainguard.webhook.runtime.names import ANCESTOR_TRAINER, NODE, TRAINER_PORT
from trainguard.webhook.runtime.resources import gpu_count

ENTRYPOINT = ["tune", "run"]
SUPPORTED_MODELS = ("llama3_2/1B", "llama3_2/3B", "llama3_3/70B", "qwen2_5/1.5B")
MULTI_NODE_MODELS = ("llama3_3/70B",)
IMMUTABLE_CONFIGS = ("output_dir", "tokenizer.path", "checkpointer.checkpoint_dir", "tokenizer.merges_file")
LORA_ARG = "model.lora_attn_modules"
QUANTIZE_ARG = "model.quantize_base"
DORA_ARG = "model.use_dora"


def is_torchtune(draft: Draft) -> bool:
    return list(draft.trainer.command or []) == ENTRYPOINT


def model_name(runtime_name: str) -> str:
    parts = runtime_name.split("-")
    if len(parts) != 3:
        return ""
    return f"{parts[1].replace('.', '_')}/{parts[2].upper()}"


def uses_lora(args: list[str]) -> bool:
    return any(LORA_ARG in a for a in args)


def uses_qlora(args: list[str]) -> bool:
    """QLoRA = quantize_base requested, unless DoRA is on (DoRA wins, as upstream)."""
    quantize = False
    for a in args:
        if DORA_ARG in a:
            return False
        if QUANTIZE_ARG in a:
            quantize = True
    return quantize


def recipe_and_config(model: str, num_nodes: int, nproc: int | None, gpus: int, args: list[str]) -> tuple[str, str]:
    """(recipe, config) for the run; ``nproc`` None means ``auto``."""
    single_device = num_nodes == 1 and (nproc == 1 or gpus == 1)
    if single_device:
        if uses_qlora(args):
            recipe, suffix = "lora_finetune_single_device", "_qlora_single_device"
        elif uses_lora(args):
            recipe, suffix = "lora_finetune_single_device", "_lora_single_device"
        else:
            recipe, suffix = "full_finetune_single_device", "_full_single_device"
    elif num_nodes == 1 and uses_qlora(args):
        recipe, suffix = "lora_finetune_distributed", "_qlora"
    elif num_nodes == 1 and uses_lora(args):
        recipe, suffix = "lora_finetune_distributed", "_lora"
    elif num_nodes > 1:
        recipe, suffix = "full_finetune_distributed", "_full_multinode"
    else:
        recipe, suffix = "full_finetune_distributed", "_full"
    return recipe, f"{model}{suffix}"


def _inputs(draft: Draft) -> tuple[str, int, int | None, int, list[str]]:
    trainer = draft.trainer
    return (
        model_name(draft.runtime_ref.name),
        int(trainer.num_nodes or 1),
        trainer.num_proc_per_node,
        gpu_count(draft.node_resources()),
        list(trainer.args or []),
    )


def validate(draft: Draft) -> list[FieldError]:
    errors: list[FieldError] = []
    runtime_name = draft.runtime_ref.name
    model, num_nodes, nproc, gpus, args = _inputs(draft)
    if model not in SUPPORTED_MODELS:
        errors.append(invalid("spec.runtimeRef.name", runtime_name, f"must have a supported pretrained model, invalid model configured: {model}"))
    if num_nodes > 1 and model not in MULTI_NODE_MODELS:
        errors.append(invalid("spec.trainer.numNodes", num_nodes, f"must be 1 for {model} model"))
    _, config = recipe_and_config(model, num_nodes, nproc, gpus, args)
    if "_qlora" in config:
        if model == "qwen2_5/1.5B":
            errors.append(invalid("spec.runtimeRef.name", runtime_name, f"QLoRA is not supported for {model} model"))
        if "_qlora_single_device" not in config and model in ("llama3_2/1B", "llama3_2/3B"):
            errors.append(invalid("spec.trainer.numProcPerNode", "auto" if nproc is None else nproc, f"must be auto or 1 for {model} model when using QLoRA"))
            errors.append(invalid("spec.trainer.resourcesPerNode", draft.trainer.resources_per_node, f"must have gpu resource with value 1 for {model} model when using QLoRA"))
    if num_nodes > 1 and uses_lora(args):
        errors.append(invalid("spec.trainer.numNodes", num_nodes, "LoRA fine-tuning is not supported for multi-node training in TorchTune"))
    for i, arg in enumerate(args):
        key = arg.split("=", 1)[0]
        if key in IMMUTABLE_CONFIGS:
            errors.append(invalid(f"spec.trainer.args[{i}]", arg, f'must not set immutable config "{key}" in trainer args; it is managed by the runtime'))
    return errors


def _runtime_overrides(draft: Draft) -> list[str]:
    """Immutable ``key=value`` items of the runtime's own trainer command (patches cannot change commands)."""
    out: list[str] = []
    for rj in draft.runtime_view.template.replicated_jobs():
        if rj.ancestor != ANCESTOR_TRAINER:
            continue
        for c in rj.containers():
            if c.name == NODE:
                out += [item for item in c.command if item.split("=", 1)[0] in IMMUTABLE_CONFIGS]
    return out


def enforce(draft: Draft, trainer_rj: dict, num_nodes: int) -> None:
    """Rewrite the node command into ``tune run [--rdzv_endpoint=...] <recipe> --config <cfg> <overrides>``."""
    model, _, nproc, gpus, args = _inputs(draft)
    recipe, config = recipe_and_config(model, num_nodes, nproc, gpus, args)
    command = list(ENTRYPOINT)
    if num_nodes > 1 or (nproc is not None and nproc > 1) or (nproc is None and gpus > 1):
        command.append(f"--rdzv_endpoint={draft.name}-{NODE}-0-0.{draft.name}:{TRAINER_PORT}")
    command += [recipe, "--config", config, *_runtime_overrides(draft)]

    def edit(c: dict) -> dict:
        return {**c, "command": command}

    draft.edit_container(trainer_rj, NODE, edit)
