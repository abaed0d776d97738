"""XGBoost ML policy (upstream's ``plugins/xgboost``): DMLC tracker env; the reserved DMLC_* names are the policy's.

Workers per node are the node's GPUs (one worker per GPU) or 1, read from the merged node container.
"""

from __future__ import annotations

from trainguard.webhook.field import FieldError, forbidden
from trainguard.webhook.runtime import plain
from trainguard.webhook.runtime.draft import Draft, completion_index_env, env, upsert_into_container
from trainguard.webhook.runtime.names import NODE, TRAINER_PORT
from trainguard.webhook.runtime.plugin import ML, ValidationContext
from trainguard.webhook.runtime.resources import gpu_count

NAME = "xgboost"
KIND = ML
NEEDS_NODE_JOB = True

RESERVED_ENVS = ("DMLC_TRACKER_URI", "DMLC_TRACKER_PORT", "DMLC_TASK_ID", "DMLC_NUM_WORKER")


def validate(draft: Draft, ctx: ValidationContext) -> list[FieldError]:
    return [
        forbidden(f"spec.trainer.env[{i}]", f"{e.get('name')} is reserved for the XGBoost runtime")
        for i, e in enumerate(draft.trainer.env)
        if e.get("name") in RESERVED_ENVS
    ]


def enforce(draft: Draft) -> None:
    plain.enforce(draft)
    rj = draft.trainer_job()
    if not draft.has_trainer or rj is None:
        return
    workers_per_node = gpu_count(draft.node_resources()) or 1
    upsert_into_container(
        draft,
        rj,
        NODE,
        env_vars=[
            env("DMLC_TRACKER_URI", f"{draft.name}-{NODE}-0-0.{draft.name}"),
            env("DMLC_TRACKER_PORT", TRAINER_PORT),
            completion_index_env("DMLC_TASK_ID"),
            env("DMLC_NUM_WORKER", draft.counts.get(rj["name"], 1) * workers_per_node),
        ],
        ports=[{"containerPort": TRAINER_PORT}],
    )
