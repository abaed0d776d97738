"""PlainML policy (``plugins/plainml``): no framework environment; ``trainer.numNodes`` sizes the trainer job.

Upstream runs PlainML whenever the policy is not torch/mpi/jax, i.e. also under xgboost and flux, which is why
those modules call ``enforce`` here first. The trainer's env is upserted by the trainer layer (``effective``).
"""

from __future__ import annotations

from trainguard.webhook.runtime.draft import Draft, set_trainer_count
from trainguard.webhook.runtime.plugin import ML

NAME = "plain"
KIND = ML


def enforce(draft: Draft) -> None:
    set_trainer_count(draft)
