"""Env names an ML policy owns: ``spec.trainer.env`` may not set them (torch's PET_*, MPI's OMPI_MCA_*).

One error listing every clash, sorted and space-separated, with the whole env list as the value: upstream's
message, shared by the policies that reserve names this way.
"""

from __future__ import annotations

from trainguard.webhook.field import FieldError, invalid
from trainguard.webhook.runtime.draft import Draft


def reserved_env_errors(draft: Draft, reserved: tuple[str, ...]) -> list[FieldError]:
    trainer_env = draft.trainer.env
    clashes = sorted({e.get("name") for e in trainer_env if e.get("name") in reserved})
    if not clashes:
        return []
    return [invalid("spec.trainer.env", trainer_env, f"must not have reserved envs, invalid envs configured: [{' '.join(clashes)}]")]
