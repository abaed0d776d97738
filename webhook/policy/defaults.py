"""What trainguard's policies write into a TrainJob at CREATE (the mutating half of the engine).

Three kinds of effect, each only where nobody else has spoken (the user's TrainJob, the runtime, another
manager's runtimePatch always win; among policies the first in ``matching.application_order`` wins). Nothing a
user wrote is overwritten: a scheduling value the policy pins and the user set otherwise is left as written for
the validating webhook to deny (Enforce) or warn about (Audit), naming what to change (``pinning``).

* TrainJob metadata: Kueue ``kueue.x-k8s.io/queue-name`` / ``kueue.x-k8s.io/priority-class`` labels (user >
  policy > the runtime object's own labels/annotations declaring a default), KAI ``kai.scheduler/queue`` label, the
  KAI scheduler name as annotation ``trainguard.io/scheduler-name`` (the TrainJob API cannot carry pod
  ``schedulerName``; the runtime build turns the annotation into it), default labels, ``activeDeadlineSeconds``.
  A TrainJob with a Kueue queue is created suspended (Kueue admits it by unsuspending).
* ONE runtimePatch owned by manager ``trainguard.io/policy``: topology hints on the trainer replicatedJobs that
  request GPUs, default nodeSelector/tolerations, the KAI queue label on the JobSet. It is placed FIRST in
  ``runtimePatches`` so every later (user, Kueue) patch overrides it; an existing entry is rewritten in place,
  never duplicated, and removed when the policies no longer ask for anything. Kueue's own patch (manager
  ``kueue.x-k8s.io/manager``) is never touched.
* Nothing on UPDATE: policy effects are decided once, at CREATE. Rewriting the patch later could turn Kueue's
  suspend request into a denial ("RuntimePatches cannot be modified when the JobSet's ReplicatedJob ... is still
  active"), and a policy change must not re-shape admitted jobs.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from trainguard.webhook.api.constants import ANNOTATION_SCHEDULER_NAME
from trainguard.webhook.api.views import Meta, ReplicatedJob, Runtime, TrainJob, patch_template
from trainguard.webhook.policy.matching import first_set
from trainguard.webhook.policy.policy_model import Policy
from trainguard.webhook.policy.runtime_rules import pod_spec, replicated_jobs
from trainguard.webhook.policy.shape import gpu_count, job_shape, trainer_pod_sets
from trainguard.webhook.policy.topology import (
    KAI_TOPOLOGY_KEYS,
    KUEUE_TOPOLOGY_KEYS,
    NoFit,
    Placement,
    hints,
    place,
)

Object = dict[str, Any]

POLICY_MANAGER = "trainguard.io/policy"
KUEUE_MANAGER = "kueue.x-k8s.io/manager"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
KAI_QUEUE_LABEL = "kai.scheduler/queue"
SCHEDULER_NAME_ANNOTATION = ANNOTATION_SCHEDULER_NAME


@dataclass(frozen=True)
class TopologyOutcome:
    """The topology decision, kept so validation can report a job that fits no level."""

    policy: Policy
    result: Placement | NoFit | None


# --- reading what others wrote ----------------------------------------------------------------------------------


def _other_patches(trainjob: Object) -> list[Object]:
    return [p for p in TrainJob(trainjob).runtime_patches if isinstance(p, dict) and p.get("manager") != POLICY_MANAGER]


def _patch_job(patch: Object, job: str) -> Object:
    found = patch_template(patch).job(job)
    return dict(found.raw) if found is not None else {}


def _job_meta(rjob: Object) -> Meta:
    return Meta(ReplicatedJob(rjob).get("template.metadata"))


def _pod_meta(rjob: Object) -> Meta:
    return ReplicatedJob(rjob).pod_metadata


def _written_elsewhere(trainjob: Object, runtime: Object, job: str) -> list[Object]:
    """The runtime's replicatedJob ``job`` and every other manager's patch for it."""
    rjob = next((r for r in replicated_jobs(runtime) if r.get("name") == job), {})
    return [rjob] + [_patch_job(p, job) for p in _other_patches(trainjob)]


def _declared(sources: list[Object], meta, keys) -> bool:
    return any(k in meta(src).annotations for src in sources for k in keys)


# --- the owned runtimePatch -------------------------------------------------------------------------------------


def _topology(effective: Any, policies: list[Policy]) -> TopologyOutcome | None:
    topology, owner = first_set(policies, lambda p: p.spec.topology if p.spec.topology and p.spec.topology.levels else None)
    if topology is None or owner is None:
        return None
    return TopologyOutcome(owner, place(job_shape(effective, topology.gpu_resource_name), topology.levels))


def desired_policy_patch(trainjob: Object, runtime: Object, effective: Any, policies: list[Policy]) -> Object | None:
    """The ``trainguard.io/policy`` runtimePatch the matching policies ask for, or None when they ask nothing."""
    job_annotations: dict[str, dict[str, str]] = {}
    pod_annotations: dict[str, dict[str, str]] = {}
    pod_specs: dict[str, Object] = {}

    outcome = _topology(effective, policies) if effective is not None else None
    if outcome is not None and isinstance(outcome.result, Placement):
        topology = outcome.policy.spec.topology
        assert topology is not None
        hinted = hints(outcome.result, topology)
        for ps in trainer_pod_sets(effective):
            if gpu_count(ps.requests, topology.gpu_resource_name) <= 0:
                continue
            sources = _written_elsewhere(trainjob, runtime, ps.name)
            if hinted.pod_annotations and not _declared(sources, _pod_meta, KUEUE_TOPOLOGY_KEYS):
                pod_annotations[ps.name] = dict(hinted.pod_annotations)
            if hinted.job_annotations and not _declared(sources, _job_meta, KAI_TOPOLOGY_KEYS):
                job_annotations[ps.name] = dict(hinted.job_annotations)

    node_selector, _ = first_set(policies, lambda p: p.spec.defaults.node_selector or None)
    tolerations, _ = first_set(policies, lambda p: p.spec.defaults.tolerations or None)
    for rjob in replicated_jobs(runtime):
        name = rjob.get("name")
        if not name:
            continue
        others = [pod_spec(_patch_job(p, name)) for p in _other_patches(trainjob)]
        if node_selector:
            taken = {k for s in [pod_spec(rjob)] + others for k in (s.get("nodeSelector") or {})}
            add = {k: v for k, v in node_selector.items() if k not in taken}
            if add:
                pod_specs.setdefault(name, {})["nodeSelector"] = add
        if tolerations and not any(o.get("tolerations") is not None for o in others):
            # Patch tolerations REPLACE the runtime's (atomic list): carry the runtime's over, then add ours.
            own = list(pod_spec(rjob).get("tolerations") or [])
            merged = own + [dict(t) for t in tolerations if dict(t) not in own]
            if merged != own:
                pod_specs.setdefault(name, {})["tolerations"] = merged

    ordered: list[Object] = []
    for rjob in replicated_jobs(runtime):
        name = rjob.get("name")
        if name not in job_annotations and name not in pod_annotations and name not in pod_specs:
            continue
        template: Object = {}
        if name in job_annotations:
            template["metadata"] = {"annotations": job_annotations[name]}
        pod_template: Object = {}
        if name in pod_annotations:
            pod_template["metadata"] = {"annotations": pod_annotations[name]}
        if name in pod_specs:
            pod_template["spec"] = pod_specs[name]
        if pod_template:
            template["spec"] = {"template": pod_template}
        ordered.append({"name": name, "template": template})

    kai_queue, _ = first_set(policies, lambda p: p.spec.scheduling.kai_queue)
    jobset_template: Object = {}
    jobset_labels = Runtime(runtime).template.metadata.labels
    other_labels = {k for p in _other_patches(trainjob) for k in patch_template(p).metadata.labels}
    if kai_queue and KAI_QUEUE_LABEL not in jobset_labels and KAI_QUEUE_LABEL not in other_labels:
        jobset_template["metadata"] = {"labels": {KAI_QUEUE_LABEL: kai_queue}}
    if ordered:
        jobset_template["spec"] = {"replicatedJobs": ordered}
    if not jobset_template:
        return None
    return {"manager": POLICY_MANAGER, "trainingRuntimeSpec": {"template": jobset_template}}


def write_policy_patch(trainjob: Object, desired: Object | None) -> None:
    """Put ``desired`` in place of the existing policy entry (keeping its ``time`` when content is unchanged,
    which the stamping step then confirms), else first in the list; remove the entry when ``desired`` is None."""
    spec = trainjob.setdefault("spec", {})
    patches = list(TrainJob(trainjob).runtime_patches)
    index = next((i for i, p in enumerate(patches) if isinstance(p, dict) and p.get("manager") == POLICY_MANAGER), None)
    if desired is None:
        if index is not None:
            del patches[index]
            if patches:
                spec["runtimePatches"] = patches
            else:
                spec.pop("runtimePatches", None)
        return
    if index is not None:
        current = patches[index]
        if {k: v for k, v in current.items() if k != "time"} == desired:
            return
        patches[index] = desired
    else:
        patches.insert(0, desired)
    spec["runtimePatches"] = patches


# --- TrainJob metadata ------------------------------------------------------------------------------------------


def _runtime_declared(runtime: Object, key: str) -> str | None:
    meta = Runtime(runtime).metadata
    return meta.labels.get(key) or meta.annotations.get(key)


def _runtime_sets_scheduler(runtime: Object) -> bool:
    # Every pod template names one: the annotation would apply nowhere. Otherwise it fills the rest (the build
    # keeps a scheduler a template names; ``pinning`` checks it).
    jobs = replicated_jobs(runtime)
    return bool(jobs) and all(pod_spec(r).get("schedulerName") for r in jobs)


def apply_metadata_defaults(trainjob: Object, runtime: Object, policies: list[Policy]) -> None:
    meta = trainjob.setdefault("metadata", {})
    labels = dict(Meta(meta).labels)
    annotations = dict(Meta(meta).annotations)

    def kueue(field: str):
        return lambda p: getattr(p.spec.scheduling.kueue, field) if p.spec.scheduling.kueue else None

    for key, field in ((KUEUE_QUEUE_LABEL, "queue_name"), (KUEUE_PRIORITY_LABEL, "priority_class")):
        if key not in labels:
            value = first_set(policies, kueue(field))[0] or _runtime_declared(runtime, key)
            if value:
                labels[key] = value
    kai_queue = first_set(policies, lambda p: p.spec.scheduling.kai_queue)[0]
    if kai_queue and KAI_QUEUE_LABEL not in labels:
        labels[KAI_QUEUE_LABEL] = kai_queue
    scheduler = first_set(policies, lambda p: p.spec.scheduling.scheduler_name)[0]
    if scheduler and SCHEDULER_NAME_ANNOTATION not in annotations and not _runtime_sets_scheduler(runtime):
        annotations[SCHEDULER_NAME_ANNOTATION] = scheduler
    for p in policies:
        for k, v in (p.spec.defaults.labels or {}).items():
            labels.setdefault(k, v)
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations

    spec = trainjob.setdefault("spec", {})
    deadline = first_set(policies, lambda p: p.spec.defaults.active_deadline_seconds)[0]
    if deadline is not None and TrainJob(trainjob).active_deadline_seconds is None:
        spec["activeDeadlineSeconds"] = deadline
    if labels.get(KUEUE_QUEUE_LABEL):
        # As Kueue's WorkloadShouldBeSuspended: every job with a queue name, MultiKueue's included.
        spec["suspend"] = True


def apply_policies(trainjob: Object, runtime: Object, effective: Any, policies: list[Policy]) -> Object:
    """A copy of ``trainjob`` with every policy effect applied (CREATE only; see the module docstring)."""
    result = copy.deepcopy(trainjob)
    if not policies:
        return result
    apply_metadata_defaults(result, runtime, policies)
    write_policy_patch(result, desired_policy_patch(result, runtime, effective, policies))
    return result


def topology_outcome(effective: Any, policies: list[Policy]) -> TopologyOutcome | None:
    return _topology(effective, policies) if effective is not None else None
