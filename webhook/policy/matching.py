"""Which TrainJobPolicies apply to a TrainJob, and in what order.

A policy applies when every selector it gives matches (a missing selector matches everything):
``selector.namespaceSelector`` the TrainJob's namespace labels (from the snapshot, plus the
``kubernetes.io/metadata.name`` label the apiserver puts on every namespace); ``selector.trainJobSelector`` the
TrainJob's own labels; ``selector.runtimeSelector`` the runtimeRef's name and kind and the runtime object's labels.

Order of application (documented, and independent of the order the API or the cache lists policies in):
``spec.priority`` descending, then ``metadata.name`` ascending. For every default (labels, Kueue/KAI settings,
topology, deadline, node selector, tolerations) the FIRST policy in that order that sets it wins, and a value the
user (or the runtime) wrote always wins over every policy. Limits are not ordered: every matching policy's limits
are checked, each under its own mode.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from trainguard.webhook.api.meta import label_selector_matches
from trainguard.webhook.api.views import Meta, Runtime, TrainJob
from trainguard.webhook.policy.policy_model import Policy, PolicyParseError, parse_policy
from trainguard.webhook.policy.runtime_ref import runtime_ref

NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


def namespace_labels(namespace: str, known: Mapping[str, Mapping[str, str]]) -> dict[str, str]:
    labels = dict(known.get(namespace) or {})
    labels.setdefault(NAMESPACE_NAME_LABEL, namespace)
    return labels


def application_order(policies: Iterable[Policy]) -> list[Policy]:
    return sorted(policies, key=lambda p: (-p.spec.priority, p.name))


# Parsed policies by (uid, resourceVersion): every review reads every stored policy, and parsing one through the API
# model costs more than the rest of the matching. The apiserver gives a stored object a new resourceVersion on every
# change, so a hit is the same object; objects without both (files given to ``render``, tests) are parsed each
# time. A hit is the view over the dict first seen under that key: the informer replaces a changed object (new
# resourceVersion, new dict) and never edits a stored one in place, and views never write, so one view can be shared
# by concurrent reviews. Bounded: a cluster churning through policies cannot grow it without limit.
_PARSED: dict[tuple[str, str], Policy | tuple[str, str, Any, str]] = {}
_PARSED_MAX = 4096


def _parse_cached(obj: dict[str, Any]) -> Policy:
    meta = Meta.of(obj)
    uid, rv = meta.uid, meta.resource_version
    if not (isinstance(uid, str) and uid and isinstance(rv, str) and rv):
        return parse_policy(obj)
    key = (uid, rv)
    hit = _PARSED.get(key)
    if hit is None:
        try:
            hit = parse_policy(obj)
        except PolicyParseError as e:
            hit = (e.policy, e.path, e.value, e.detail)  # a fresh exception per raise: no traceback chain kept
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        _PARSED[key] = hit
    if isinstance(hit, tuple):
        raise PolicyParseError(*hit)
    return hit


def parse_all(objects: Mapping[str, dict[str, Any]]) -> tuple[list[Policy], list[str]]:
    """Parse every stored policy; an unreadable one is reported (as a warning) instead of breaking admission."""
    policies: list[Policy] = []
    problems: list[str] = []
    for name in sorted(objects):
        try:
            policies.append(_parse_cached(objects[name]))
        except PolicyParseError as e:
            problems.append(f"{e} (policy ignored)")
    return policies, problems


def selects(policy: Policy, ns_labels: Mapping[str, str], trainjob: Mapping[str, Any],
            runtime: Mapping[str, Any] | None) -> bool:
    sel = policy.spec.selector
    ref = runtime_ref(dict(trainjob))
    runtime_labels = dict(Runtime(runtime).metadata.labels)
    trainjob_labels = dict(TrainJob(trainjob).metadata.labels)
    return (label_selector_matches(sel.namespace, dict(ns_labels))
            and label_selector_matches(sel.trainjob, trainjob_labels)
            and (sel.runtime_names is None or ref.name in sel.runtime_names)
            and (sel.runtime_kinds is None or ref.kind in sel.runtime_kinds)
            and label_selector_matches(sel.runtime_labels, runtime_labels))


def matching_policies(
    policies: Iterable[Policy],
    trainjob: Mapping[str, Any],
    namespace: str,
    ns_labels: Mapping[str, Mapping[str, str]],
    runtime: Mapping[str, Any] | None,
) -> list[Policy]:
    labels = namespace_labels(namespace, ns_labels)
    return application_order(p for p in policies if selects(p, labels, trainjob, runtime))


def first_set(policies: Iterable[Policy], pick) -> tuple[Any, Policy | None]:
    """The first non-None value ``pick(policy)`` returns in application order, with the policy that set it."""
    for p in policies:
        value = pick(p)
        if value is not None:
            return value, p
    return None, None
