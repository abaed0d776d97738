"""Validation of TrainJobPolicy objects for policy authors.

Denied (the policy could never work as written):
* unreadable fields (wrong types, unknown mode/placement/target) -- normally caught by the CRD schema first;
* topology levels that are not valid label keys, repeat a label, or do not strictly grow (narrowest first; the
  CRD only checks "sorted", which lets two levels hold the same number of GPUs);
* alternatives without the value they add to (``allowedQueueNames`` without ``queueName``, ...: ``pinning``);
* impossible limits: ``maxGpusPerNode`` or ``maxTotalGpus`` of 0 (refuses every GPU job), ``maxGpusPerNode``
  above ``maxTotalGpus``, an empty image prefix or runtime name, an ``allowedRuntimes`` entry that is not
  ``<name>``, ``ClusterTrainingRuntime/<name>`` or ``TrainingRuntime/<name>``, an invalid resource name;
* a conflict: another policy with the SAME priority whose selectors can match the same TrainJob (an empty selector,
  equal selectors, or a namespace / runtime in the snapshot both match) and that sets the same default to a
  different value. Priorities decide between different levels, so equal priorities must agree.
Warned (allowed, but probably a mistake):
* KAI as a target without ``kaiTopology`` (KAI's ``kai.scheduler/topology`` annotation cannot be written; only
  the placement annotation is);
* a topology label outside the well-known set (kubernetes.io/hostname, topology.kubernetes.io/*, nvidia.com/gpu.clique,
  cloud.google.com/gce-topology-*, ...): Kueue/KAI will wait forever if no node carries it;
* ``maxGPUsPerNode`` above the narrowest level's domain, or ``maxTotalGPUs`` above the widest: jobs inside the
  limits could still fit no topology level and be refused by the topology rule.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Mapping

from trainguard.webhook.api.meta import label_selector_matches
from trainguard.webhook.field import FieldError, duplicate, forbidden, invalid
from trainguard.webhook.policy.matching import namespace_labels
from trainguard.webhook.policy.pinning import SETTINGS as PINNED_SETTINGS
from trainguard.webhook.policy.policy_model import Policy, PolicyParseError, parse_policy
from trainguard.webhook.policy.runtime_ref import allowed_runtime_entry

_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
_QUALIFIED = re.compile(rf"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?{_NAME}$")
WELL_KNOWN_TOPOLOGY_PREFIXES = (
    "kubernetes.io/hostname",
    "topology.kubernetes.io/",
    "nvidia.com/gpu.clique",
    "cloud.google.com/gce-topology-",
    "cloud.google.com/gke-nodepool",
    "network.topology.kubernetes.io/",
    "topology.k8s.aws/",
    "kai.scheduler/",
)


def _known_label(key: str) -> bool:
    return any(key == p or (p.endswith(("/", "-")) and key.startswith(p)) for p in WELL_KNOWN_TOPOLOGY_PREFIXES)


def _own_errors(policy: Policy) -> tuple[list[FieldError], list[str]]:
    errors: list[FieldError] = []
    warnings: list[str] = []
    topo = policy.spec.topology
    if topo is not None:
        seen: set[str] = set()
        for i, level in enumerate(topo.levels):
            path = f"spec.topology.levels[{i}]"
            if not _QUALIFIED.match(level.node_label) or len(level.node_label.split("/")[-1]) > 63:
                errors.append(invalid(f"{path}.nodeLabel", level.node_label, "must be a valid label key"))
            elif level.node_label in seen:
                errors.append(duplicate(f"{path}.nodeLabel", level.node_label))
            elif not _known_label(level.node_label):
                warnings.append(
                    f'{path}.nodeLabel: "{level.node_label}" is not a well-known topology label; make sure nodes '
                    "carry it and your Kueue/KAI Topology lists it, or jobs will never be placed")
            seen.add(level.node_label)
            if level.gpus_per_domain < 1:
                errors.append(invalid(f"{path}.gpusPerDomain", level.gpus_per_domain, "must be at least 1"))
            elif i > 0 and level.gpus_per_domain <= topo.levels[i - 1].gpus_per_domain:
                errors.append(invalid(
                    f"{path}.gpusPerDomain", level.gpus_per_domain,
                    f"levels go from narrowest to widest, so must be more than the {topo.levels[i - 1].gpus_per_domain} "
                    f"GPUs of levels[{i - 1}] ({topo.levels[i - 1].node_label})"))
        if "KAI" in topo.schedulers and not topo.kai_topology:
            warnings.append("spec.topology.kaiTopology: not set, so the kai.scheduler/topology annotation is not "
                            "written; KAI needs it to apply the placement")

    for setting in PINNED_SETTINGS:
        alternatives = setting.alternatives(policy)
        if alternatives and not setting.value(policy):
            errors.append(forbidden(setting.allowed_field, f"needs {setting.field}: the alternatives are allowed "
                                                           "besides it, and it stays the default"))
        for i, v in enumerate(alternatives):
            if not v:
                errors.append(invalid(f"{setting.allowed_field}[{i}]", v, "must not be empty"))

    limits = policy.spec.limits
    for field, value in (("maxNodes", limits.max_nodes), ("maxGpusPerNode", limits.max_gpus_per_node),
                         ("maxTotalGpus", limits.max_total_gpus)):
        if value is not None and value < 1:
            errors.append(invalid(f"spec.limits.{field}", value,
                                  "must be at least 1: 0 refuses every job that uses the resource; to forbid GPUs, "
                                  "use a namespace without GPU quota instead"))
    if (limits.max_gpus_per_node is not None and limits.max_total_gpus is not None
            and limits.max_gpus_per_node > limits.max_total_gpus >= 1):
        errors.append(invalid("spec.limits.maxGpusPerNode", limits.max_gpus_per_node,
                              f"cannot exceed maxTotalGpus {limits.max_total_gpus}: one node would break the total"))
    for field, values in (("allowedRuntimes", limits.allowed_runtimes),
                          ("allowedImagePrefixes", limits.allowed_image_prefixes)):
        for i, v in enumerate(values):
            if not v:
                errors.append(invalid(f"spec.limits.{field}[{i}]", v, "must not be empty"))
    for i, entry in enumerate(limits.allowed_runtimes):
        if entry and allowed_runtime_entry(entry) is None:
            errors.append(invalid(f"spec.limits.allowedRuntimes[{i}]", entry,
                                  "must be <name> (a ClusterTrainingRuntime), ClusterTrainingRuntime/<name> or "
                                  "TrainingRuntime/<name>"))
    for i, resource in enumerate(limits.required_requests):
        if not _QUALIFIED.match(resource):
            errors.append(invalid(f"spec.limits.requiredResourceRequests[{i}]", resource, "must be a resource name"))
    if topo is not None and topo.levels:
        if limits.max_gpus_per_node is not None and limits.max_gpus_per_node > topo.levels[0].gpus_per_domain:
            warnings.append(
                f"spec.limits.maxGpusPerNode: {limits.max_gpus_per_node} is more than the "
                f"{topo.levels[0].gpus_per_domain} GPUs of the narrowest topology level {topo.levels[0].node_label}; "
                "such jobs pass the limit but fit no level")
        if limits.max_total_gpus is not None and limits.max_total_gpus > topo.levels[-1].gpus_per_domain:
            warnings.append(
                f"spec.limits.maxTotalGpus: {limits.max_total_gpus} is more than the "
                f"{topo.levels[-1].gpus_per_domain} GPUs of the widest topology level {topo.levels[-1].node_label}; "
                "such jobs pass the limit but fit no level")
    return errors, warnings


# Defaults that must agree between overlapping policies of equal priority: (path shown, value picker).
_SETTINGS: tuple[tuple[str, Callable[[Policy], Any]], ...] = (
    ("spec.scheduling.kueue.queueName", lambda p: p.spec.scheduling.kueue and p.spec.scheduling.kueue.queue_name),
    ("spec.scheduling.kueue.priorityClass",
     lambda p: p.spec.scheduling.kueue and p.spec.scheduling.kueue.priority_class),
    ("spec.scheduling.kai.queue", lambda p: p.spec.scheduling.kai_queue),
    ("spec.scheduling.schedulerName", lambda p: p.spec.scheduling.scheduler_name),
    *((s.allowed_field, lambda p, s=s: tuple(sorted(s.alternatives(p))) or None) for s in PINNED_SETTINGS),
    ("spec.topology", lambda p: p.spec.topology.effective() if p.spec.topology else None),
    ("spec.defaults.activeDeadlineSeconds", lambda p: p.spec.defaults.active_deadline_seconds),
    ("spec.defaults.nodeSelector", lambda p: p.spec.defaults.node_selector or None),
    ("spec.defaults.tolerations", lambda p: list(p.spec.defaults.tolerations) if p.spec.defaults.tolerations else None),
)


def _selectors_overlap(a, b, candidates: list[dict[str, str]]) -> bool:
    if a is None or b is None or a == b:
        return True
    return any(label_selector_matches(a, c) and label_selector_matches(b, c) for c in candidates)


def _sets_overlap(a: tuple[str, ...] | None, b: tuple[str, ...] | None) -> bool:
    return a is None or b is None or bool(set(a) & set(b))


def _overlap(p: Policy, q: Policy, ns_labels: Mapping[str, Mapping[str, str]], runtime_labels: list[dict[str, str]]) -> bool:
    """Whether some TrainJob could match both (conservative: unknown label combinations are assumed to exist only
    when a selector is absent or both are equal)."""
    a, b = p.spec.selector, q.spec.selector
    namespaces = [namespace_labels(ns, ns_labels) for ns in ns_labels]
    return (_selectors_overlap(a.namespace, b.namespace, namespaces)
            and _selectors_overlap(a.runtime_labels, b.runtime_labels, runtime_labels)
            and _sets_overlap(a.runtime_names, b.runtime_names)
            and _sets_overlap(a.runtime_kinds, b.runtime_kinds)
            and (a.trainjob is None or b.trainjob is None or a.trainjob == b.trainjob))


def conflict_errors(policy: Policy, others: list[Policy], ns_labels: Mapping[str, Mapping[str, str]],
                    runtime_labels: list[dict[str, str]]) -> list[FieldError]:
    errors: list[FieldError] = []
    for other in sorted(others, key=lambda o: o.name):
        if other.name == policy.name or other.spec.priority != policy.spec.priority:
            continue
        if not _overlap(policy, other, ns_labels, runtime_labels):
            continue
        for path, pick in _SETTINGS:
            mine, theirs = pick(policy) or None, pick(other) or None
            if mine is not None and theirs is not None and mine != theirs:
                errors.append(invalid(
                    path, mine,
                    f'conflicts with TrainJobPolicy "{other.name}" ({theirs!r}) which can match the same TrainJobs at '
                    f"the same priority {policy.spec.priority}; make the values agree, narrow a selector, or give "
                    "one policy a higher spec.priority"))
    return errors


def policy_errors(obj: dict[str, Any], stored: Mapping[str, dict[str, Any]], ns_labels: Mapping[str, Mapping[str, str]],
                  runtime_labels: list[dict[str, str]]) -> tuple[list[FieldError], list[str]]:
    try:
        policy = parse_policy(obj)
    except PolicyParseError as e:
        return [invalid(e.path, e.value, e.detail)], []
    errors, warnings = _own_errors(policy)
    others: list[Policy] = []
    for name, other in stored.items():
        if name == policy.name:
            continue
        try:
            others.append(parse_policy(other))
        except PolicyParseError:
            continue  # an unreadable stored policy is reported when it is itself applied or used
    errors += conflict_errors(policy, others, ns_labels, runtime_labels)
    return errors, warnings
