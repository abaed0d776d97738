"""Coscheduling (upstream's ``plugins/coscheduling``): one scheduler-plugins PodGroup gating every pod of the job.

``minMember`` counts every pod (initializers included), ``minResources`` is Σ per-pod requests × count. The
PodGroup is frozen once created unless the TrainJob is suspended (same skip rule as the JobSet).
"""

from __future__ import annotations


from trainguard.webhook.api.quantity import format_resource_list, scale_resources, sum_resources
from trainguard.webhook.runtime.draft import Draft, pod_metadata
from trainguard.webhook.runtime.objects import owned_object
from trainguard.webhook.runtime.plugin import POD_GROUP, BuildContext

POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
DEFAULT_SCHEDULE_TIMEOUT_SECONDS = 60

NAME = "coscheduling"
KIND = POD_GROUP


def enforce(draft: Draft) -> None:
    for rj in draft.jobs():
        meta = pod_metadata(rj)
        meta["labels"] = {**(meta.get("labels") or {}), POD_GROUP_LABEL: draft.name}


def gang_size(pod_sets) -> tuple[int, dict[str, str]]:
    """(minMember, minResources) over every pod set."""
    members = sum(ps.count for ps in pod_sets)
    resources = sum_resources(scale_resources(ps.requests, ps.count) for ps in pod_sets)
    return members, format_resource_list(resources)


def build(draft: Draft, ctx: BuildContext) -> list[dict]:
    if ctx.existing.podgroup and not ctx.suspended:
        return []  # frozen once created, unless the TrainJob is suspended
    policy = draft.pod_group_policy_source(NAME)
    members, resources = gang_size(ctx.pod_sets)
    pod_group = owned_object("scheduling.x-k8s.io/v1alpha1", "PodGroup", draft.name, ctx.trainjob)
    pod_group["spec"] = {
        "minMember": members,
        "minResources": resources,
        "scheduleTimeoutSeconds": policy.get("scheduleTimeoutSeconds", DEFAULT_SCHEDULE_TIMEOUT_SECONDS),
    }
    return [pod_group]
