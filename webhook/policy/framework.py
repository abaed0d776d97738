"""The policy engine's door into the runtime framework (``trainguard.webhook.runtime``).

The engine never re-derives the job: GPUs, pod counts and images come from ``effective_job``, the same code the
reconciler builds with, and the runtime plugins' TrainJob rules from ``validate_trainjob``.
"""

from __future__ import annotations

from typing import AbstractSet, Any, Mapping

from trainguard.webhook.field import FieldError
from trainguard.webhook.runtime import BuildError, EffectiveJob, effective_job, validate_trainjob


def effective_job_or_none(trainjob: Mapping[str, Any], runtime: Mapping[str, Any]) -> EffectiveJob | None:
    """The effective job, or None when the pair cannot be built (validation reports why)."""
    try:
        return effective_job(trainjob, runtime)
    except BuildError:
        return None


def plugin_validation(
    trainjob: Mapping[str, Any],
    old: Mapping[str, Any] | None,
    runtime: Mapping[str, Any],
    jobset: Mapping[str, Any] | None,
    priority_classes: AbstractSet[str] | None,
) -> tuple[list[FieldError], list[str]]:
    return validate_trainjob(trainjob, old, runtime, jobset, priority_classes=priority_classes)
