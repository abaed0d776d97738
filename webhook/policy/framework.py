"""The policy engine's door into the runtime framework (``trainguard.webhook.runtime``, owned by the runtime engineer).

The engine never re-derives the job: GPUs, pod counts and images come from ``effective_job``, the same code the
reconciler builds with, and the plugin validations of §2.5 item 4+ from ``validate_trainjob``. Imported at call
time so that the engine's other entry points (runtime and policy validation) load even while the framework is
being built.
"""

from __future__ import annotations

from typing import Any


def effective_job_or_none(trainjob: dict[str, Any], runtime: dict[str, Any]) -> Any:
    """The effective job, or None when the pair cannot be built (validation reports why)."""
    from trainguard.webhook.runtime import BuildError, effective_job

    try:
        return effective_job(trainjob, runtime)
    except BuildError:
        return None


def plugin_validation(trainjob, old, runtime, jobset, priority_classes):
    from trainguard.webhook.runtime import validate_trainjob

    return validate_trainjob(trainjob, old, runtime, jobset, priority_classes=priority_classes)
