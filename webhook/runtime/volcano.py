"""Volcano pod-group policy (``plugins/volcano``): a Volcano PodGroup with queue, priority and network topology.

Queue comes from the JobSet annotation ``scheduling.volcano.sh/queue-name`` (runtime template metadata or a
runtimePatch); priorityClassName from the last pod template that sets one. PriorityClass existence is checked
against a set of names the caller supplies (the admission server's cache), keeping this module pure.
"""

from __future__ import annotations

from typing import Any

from trainguard.webhook.field import FieldError, invalid
from trainguard.webhook.runtime.coscheduling import gang_size
from trainguard.webhook.runtime.draft import Draft, pod_metadata
from trainguard.webhook.runtime.objects import owned_object
from trainguard.webhook.runtime.plugin import POD_GROUP, BuildContext, ValidationContext

GROUP_NAME_ANNOTATION = "scheduling.k8s.io/group-name"
QUEUE_ANNOTATION = "scheduling.volcano.sh/queue-name"
SYSTEM_PRIORITY_CLASSES = ("system-cluster-critical", "system-node-critical")

NAME = "volcano"
KIND = POD_GROUP


def validate(draft: Draft, ctx: ValidationContext) -> list[FieldError]:
    priority_classes = ctx.priority_classes
    errors: list[FieldError] = []
    if QUEUE_ANNOTATION in draft.annotations and draft.annotations[QUEUE_ANNOTATION] == "":
        errors.append(invalid(f"spec.annotations[{QUEUE_ANNOTATION}]", "", "Volcano queue name must not be empty"))
    if priority_classes is None:
        return errors
    for _, spec in draft.all_pod_specs():
        name = spec.get("priorityClassName")
        if not name:
            continue
        if name in SYSTEM_PRIORITY_CLASSES:
            break  # upstream stops checking at the first system class
        if name not in priority_classes:
            errors.append(
                invalid(
                    "spec.templateSpec.priorityClassName",
                    name,
                    f'PriorityClass "{name}" doesn\'t exist: priorityclasses.scheduling.k8s.io "{name}" not found',
                )
            )
    return errors


def enforce(draft: Draft) -> None:
    for rj in draft.jobs():
        meta = pod_metadata(rj)
        meta["annotations"] = {**(meta.get("annotations") or {}), GROUP_NAME_ANNOTATION: draft.name}


def build(draft: Draft, ctx: BuildContext) -> list[dict]:
    if ctx.existing.podgroup and not ctx.suspended:
        return []  # frozen once created, unless the TrainJob is suspended
    policy = draft.pod_group_policy_source(NAME)
    members, resources = gang_size(ctx.pod_sets)
    spec: dict[str, Any] = {"minMember": members, "minResources": resources}
    if draft.annotations.get(QUEUE_ANNOTATION):
        spec["queue"] = draft.annotations[QUEUE_ANNOTATION]
    priority = [s.get("priorityClassName") for _, s in draft.all_pod_specs() if s.get("priorityClassName")]
    if priority:
        spec["priorityClassName"] = priority[-1]
    topology = policy.get("networkTopology")
    if topology is not None:
        spec["networkTopology"] = {
            "mode": topology.get("mode", "hard"),
            "highestTierAllowed": topology.get("highestTierAllowed", 1),
        }
    pod_group = owned_object("scheduling.volcano.sh/v1beta1", "PodGroup", draft.name, ctx.trainjob)
    pod_group["spec"] = spec
    return [pod_group]
