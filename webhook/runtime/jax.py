"""JAX ML policy (upstream's ``plugins/jax``): JAX distributed-initialisation env on the trainer's ``node`` container.

Like Torch, nothing is injected when the TrainJob has no ``spec.trainer`` (upstream quirk kept for parity).
"""

from __future__ import annotations

from trainguard.webhook.runtime.draft import Draft, completion_index_env, env, set_trainer_count, upsert_into_container
from trainguard.webhook.runtime.names import NODE, TRAINER_PORT
from trainguard.webhook.runtime.plugin import ML

NAME = "jax"
KIND = ML
NEEDS_NODE_JOB = True


def enforce(draft: Draft) -> None:
    set_trainer_count(draft)
    rj = draft.trainer_job()
    if not draft.has_trainer or rj is None:
        return
    upsert_into_container(
        draft,
        rj,
        NODE,
        env_vars=[
            env("JAX_NUM_PROCESSES", draft.counts.get(rj["name"], 1)),
            completion_index_env("JAX_PROCESS_ID"),
            env("JAX_COORDINATOR_ADDRESS", f"{draft.name}-{NODE}-0-0.{draft.name}:{TRAINER_PORT}"),
        ],
        ports=[{"containerPort": TRAINER_PORT}],
    )
