"""``validate_trainjob``: the TrainJob rules that belong to the runtime plugins (upstream's
CustomValidation plugins, which ``TrainJobValidator`` runs after the runtime lookup).

Runs on the prepared draft (template ⊕ patches ⊕ resourcesPerNode, no policy enforced), like upstream's
``ValidateObjects``; every plugin's errors are collected, none short-circuits another. Deliberate difference: a
negative ``spec.trainer.numNodes`` is denied (``num_nodes_errors``); upstream admits it.
"""

from __future__ import annotations

from typing import AbstractSet, Any

from trainguard.webhook.api.views import TrainJob
from trainguard.webhook.field import FieldError, invalid
from trainguard.webhook.runtime import jobset, registry
from trainguard.webhook.runtime.draft import Draft, as_object, prepare
from trainguard.webhook.runtime.merge import MergeError
from trainguard.webhook.runtime.plugin import ValidatesTrainJob, ValidationContext


def validate_trainjob(
    trainjob: Any,
    old_trainjob: Any,
    runtime: Any,
    jobset_obj: Any,
    *,
    priority_classes: AbstractSet[str] | None = None,
) -> tuple[list[FieldError], list[str]]:
    """(errors, warnings). ``old_trainjob`` None on CREATE; ``jobset_obj`` the live JobSet or None;
    ``priority_classes`` None skips the Volcano PriorityClass existence check."""
    try:
        draft = prepare(trainjob, runtime)
    except MergeError as e:
        return [invalid("spec.runtimePatches", TrainJob(as_object(trainjob)).get("spec.runtimePatches"), str(e))], []
    old = as_object(old_trainjob) if old_trainjob is not None else None
    live = as_object(jobset_obj) if jobset_obj is not None else None
    ctx = ValidationContext(old_trainjob=old, jobset=live, priority_classes=priority_classes)
    errors = num_nodes_errors(draft) + jobset.validate(draft, old, live)
    for plugin in registry.active(draft.runtime_view):
        if registry.offers(plugin, ValidatesTrainJob):
            errors += plugin.validate(draft, ctx)
    return errors, []


def num_nodes_errors(draft: Draft) -> list[FieldError]:
    """A negative ``trainer.numNodes`` is denied. Upstream admits it and copies it into the trainer job's count;
    the reconciler clamps it to 0 (``draft.set_trainer_count``), but a policy must not see a negative node count:
    it would subtract the trainer's GPUs from the job's total and let the other replicated jobs pass a limit."""
    nodes = draft.num_nodes_override
    if nodes is not None and int(nodes) < 0:
        return [invalid("spec.trainer.numNodes", nodes, "must be greater than or equal to 0")]
    return []
