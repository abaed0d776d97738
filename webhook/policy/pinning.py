"""Scheduling values a TrainJobPolicy pins (issue 22): the queue, priority and scheduler a selected job runs with.

A policy that sets a Kueue queue, WorkloadPriorityClass, KAI queue or schedulerName gives it as a default
(``defaults``, only where nobody has spoken) AND names the only values a selected TrainJob may run with: its own
value plus the alternatives it lists (``allowedQueueNames``, ``allowedPriorityClasses``, ``kai.allowedQueues``,
``allowedSchedulerNames``). The policy that pins a setting is the one whose value is the default, the first in
application order that sets it (so a higher-priority team policy decides over a cluster-wide one); its mode decides
what a finding does (Enforce denies, Audit warns: "users win" with a warning).

A value takes effect from several places; each is checked and named in the finding with what to change:

* the TrainJob: labels ``kueue.x-k8s.io/queue-name``, ``kueue.x-k8s.io/priority-class``, ``kai.scheduler/queue``,
  and annotation ``trainguard.io/scheduler-name`` (the build turns it into the pods' ``schedulerName``);
* every runtimePatch, whatever manager it names (a user can write any name; what Kueue writes in its own patch,
  podset labels, topology annotations, nodeSelector, tolerations and scheduling gates, carries none of these):
  the JobSet, replicated-job and pod template labels, and the pods' ``schedulerName``;
* the referenced runtime's template, in the same places (a namespace user writes TrainingRuntimes too);
* the pods of the built job: a pod template naming no scheduler runs with the default one, so a pinned
  schedulerName needs the annotation when one does (the mutating webhook writes it).

Linear: every template of the TrainJob's patches and of the runtime is visited once. Paths name a runtimePatch by
its manager and a replicated job by its name (their merge keys), as ``pod_security`` does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping

from trainguard.webhook.api.views import JobSetTemplate, Runtime, TrainJob, patch_template, replicated_jobs
from trainguard.webhook.field import FieldError, invalid, required
from trainguard.webhook.policy.defaults import (
    KAI_QUEUE_LABEL,
    KUEUE_PRIORITY_LABEL,
    KUEUE_QUEUE_LABEL,
    SCHEDULER_NAME_ANNOTATION,
)
from trainguard.webhook.policy.limits import Violation
from trainguard.webhook.policy.matching import first_set
from trainguard.webhook.policy.policy_model import Policy


@dataclass(frozen=True)
class Setting:
    """One pinnable scheduling setting: where it lands on the job and where the policy gives it."""

    key: str  # the label key; for the scheduler, the TrainJob annotation (pods: ``schedulerName``)
    field: str  # the policy's field holding the default
    allowed_field: str  # the policy's field listing alternatives
    value: Callable[[Policy], str | None]
    alternatives: Callable[[Policy], tuple[str, ...]]
    is_label: bool


def _kueue(pick: Callable[[Any], Any], empty: Any) -> Callable[[Policy], Any]:
    return lambda p: pick(p.spec.scheduling.kueue) if p.spec.scheduling.kueue is not None else empty


SETTINGS: tuple[Setting, ...] = (
    Setting(KUEUE_QUEUE_LABEL, "spec.scheduling.kueue.queueName", "spec.scheduling.kueue.allowedQueueNames",
            _kueue(lambda k: k.queue_name, None), _kueue(lambda k: k.allowed_queue_names, ()), True),
    Setting(KUEUE_PRIORITY_LABEL, "spec.scheduling.kueue.priorityClass",
            "spec.scheduling.kueue.allowedPriorityClasses",
            _kueue(lambda k: k.priority_class, None), _kueue(lambda k: k.allowed_priority_classes, ()), True),
    Setting(KAI_QUEUE_LABEL, "spec.scheduling.kai.queue", "spec.scheduling.kai.allowedQueues",
            lambda p: p.spec.scheduling.kai_queue, lambda p: p.spec.scheduling.kai_allowed_queues, True),
    Setting(SCHEDULER_NAME_ANNOTATION, "spec.scheduling.schedulerName", "spec.scheduling.allowedSchedulerNames",
            lambda p: p.spec.scheduling.scheduler_name, lambda p: p.spec.scheduling.allowed_scheduler_names, False),
)


@dataclass(frozen=True)
class Pin:
    setting: Setting
    policy: Policy
    value: str  # the default
    allowed: tuple[str, ...]  # the default first, then the alternatives

    def detail(self) -> str:
        fields = self.setting.field + (f", {self.setting.allowed_field}" if len(self.allowed) > 1 else "")
        return f'TrainJobPolicy "{self.policy.name}" allows only {json.dumps(list(self.allowed))} ({fields})'


def pins(policies: list[Policy]) -> list[Pin]:
    """The pinned settings of ``policies`` (in application order): one per setting some policy gives a value."""
    out: list[Pin] = []
    for setting in SETTINGS:
        value, owner = first_set(policies, setting.value)
        if not value or owner is None:
            continue
        out.append(Pin(setting, owner, value,
                       (value,) + tuple(a for a in setting.alternatives(owner) if a != value)))
    return out


def _template_values(template: JobSetTemplate, prefix: str, label_pins: list[Pin],
                     scheduler: Pin | None) -> Iterator[tuple[str, Pin, Any]]:
    """(path, pin, value) for every value in ``template`` a pin does not allow."""

    def labels(found: Mapping[str, Any], where: str) -> Iterator[tuple[str, Pin, Any]]:
        for pin in label_pins:
            value = found.get(pin.setting.key)
            if value is not None and value not in pin.allowed:
                yield f"{where}.labels[{pin.setting.key}]", pin, value

    yield from labels(template.metadata.labels, f"{prefix}.metadata")
    for rj in template.replicated_jobs():
        base = f"{prefix}.spec.replicatedJobs[{rj.name}].template"
        yield from labels(rj.labels, f"{base}.metadata")
        yield from labels(rj.pod_metadata.labels, f"{base}.spec.template.metadata")
        name = rj.pod_spec.get("schedulerName")
        if scheduler is not None and name and name not in scheduler.allowed:
            yield f"{base}.spec.template.spec.schedulerName", scheduler, name


def pin_violations(obj: dict[str, Any], runtime: Mapping[str, Any], policies: list[Policy],
                   effective: Callable[[], Any]) -> list[Violation]:
    """Every place ``obj`` (built from ``runtime``) runs with a value the pins of ``policies`` do not allow.
    ``effective()``: the built job or None, asked only when a pinned scheduler's annotation is missing."""
    pinned = pins(policies)
    if not pinned:
        return []
    label_pins = [p for p in pinned if p.setting.is_label]
    scheduler = next((p for p in pinned if not p.setting.is_label), None)
    job = TrainJob(obj)
    found: list[Violation] = []

    def deny(pin: Pin, error: FieldError) -> None:
        found.append(Violation(pin.policy, error))

    meta = job.metadata
    for pin in label_pins:
        value = meta.labels.get(pin.setting.key)
        if value and value not in pin.allowed:  # an empty or missing label: ``scheduling_findings`` requires it
            deny(pin, invalid(f"metadata.labels[{pin.setting.key}]", value,
                              f'{pin.detail()}; leave the label out to get "{pin.value}"'))
    if scheduler is not None:
        path = f"metadata.annotations[{scheduler.setting.key}]"
        value = meta.annotations.get(scheduler.setting.key)
        if value and value not in scheduler.allowed:
            deny(scheduler, invalid(path, value, f'{scheduler.detail()}; leave the annotation out to get '
                                                 f'"{scheduler.value}"'))
        elif not value:
            built = effective()
            unscheduled = [rj.name for rj in replicated_jobs(built.spec if built is not None else None)
                           if not rj.pod_spec.get("schedulerName")]
            if unscheduled:
                deny(scheduler, required(path, f'{scheduler.detail()}: the pods of replicatedJob '
                                               f'{", ".join(unscheduled)} would run with the default scheduler; set '
                                               f'it to "{scheduler.value}"'))

    for i, patch in enumerate(job.runtime_patches):
        if not isinstance(patch, Mapping):
            continue
        # Named by manager (unique in the list): the mutating webhook puts its own patch first, shifting indexes.
        manager = patch.get("manager")
        key = manager if isinstance(manager, str) and manager else i
        prefix = f"spec.runtimePatches[{key}].trainingRuntimeSpec.template"
        for path, pin, value in _template_values(patch_template(patch), prefix, label_pins, scheduler):
            deny(pin, invalid(path, value, f"{pin.detail()}; remove it from the patch or use an allowed value"))

    rt = Runtime(runtime)
    for path, pin, value in _template_values(rt.template, "spec.template", label_pins, scheduler):
        deny(pin, invalid("spec.runtimeRef", value,
                          f'{rt.kind} "{rt.metadata.name}" sets it at {path}; {pin.detail()}; change the runtime '
                          "or reference another"))
    return found
