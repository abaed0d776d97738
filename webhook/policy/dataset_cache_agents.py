"""Where a DatasetCache's agents may run and how much node memory they may take: the cluster admin's decision.

The agent DaemonSet is created by the controller, not the user, so whatever a DatasetCache asks for its agents is
granted with the controller's rights, past the namespace's RBAC, quota and Pod Security: a user who may not create
pods could otherwise write ``priorityClassName: system-node-critical`` (preempting any workload), a toleration
``{operator: Exists}`` (every node, the control plane included, and no eviction on NoExecute taints) and a
``memoryBudget`` of a terabyte (requested on every node). ``DatasetCacheAgents`` is the admin's setting, from flags
of ``trainguard webhook``, ``trainguard controller`` and ``trainguard render`` (Helm values ``datasetCache.*``),
never from an object a namespace user can write; both enforce it with ``agent_errors``: the webhook at ``kubectl
apply``, the controller before it builds the DaemonSet (a cache stored while the webhook was down, or before the
admin narrowed the setting, gets no agents).

The rules:

* ``spec.priorityClassName``: one of ``allowed_priority_classes`` (exact names; none by default, so ``system-*``
  only where the admin lists it);
* ``spec.tolerations``: each names a taint key in ``allowed_toleration_keys`` (none by default). A toleration
  without a key tolerates every taint and is never allowed. The agents always get ``AGENT_GPU_TOLERATION``
  (``nvidia.com/gpu``, NoSchedule), so a copy of it is allowed too;
* ``spec.nodeSelector``: keys in ``allowed_node_selector_keys`` (well-known node labels by default) or in
  ``required_node_selector``, which the controller adds to every agent DaemonSet; a cache may not give a required
  key another value;
* ``spec.memoryBudget``: at most ``max_memory_budget`` (64Gi by default).

An UPDATE that keeps a field the admin has since disallowed is admitted with a warning, as for sources
(``dataset_cache.source_findings``): the controller already runs no agents for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from trainguard.webhook.api.quantity import QuantityError, parse_quantity
from trainguard.webhook.api.views import DatasetCache
from trainguard.webhook.field import ErrorType, FieldError, aggregate, forbidden, invalid

PRIORITY_CLASS_FIELD = "spec.priorityClassName"
TOLERATIONS_FIELD = "spec.tolerations"
NODE_SELECTOR_FIELD = "spec.nodeSelector"
MEMORY_BUDGET_FIELD = "spec.memoryBudget"

PRIORITY_CLASS_SETTING = "--dataset-cache-allowed-priority-classes (Helm value datasetCache.allowedPriorityClasses)"
TOLERATION_SETTING = "--dataset-cache-allowed-toleration-keys (Helm value datasetCache.allowedTolerationKeys)"
NODE_SELECTOR_SETTING = ("--dataset-cache-allowed-node-selector-keys (Helm value "
                         "datasetCache.allowedNodeSelectorKeys)")
REQUIRED_SELECTOR_SETTING = ("--dataset-cache-required-node-selector (Helm value "
                             "datasetCache.requiredNodeSelector)")
MEMORY_BUDGET_SETTING = "--dataset-cache-max-memory-budget (Helm value datasetCache.maxMemoryBudget)"

# Every agent pod gets it (GPU nodes are commonly tainted so); not the user's to widen.
AGENT_GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
DEFAULT_NODE_SELECTOR_KEYS = (
    "kubernetes.io/hostname", "node.kubernetes.io/instance-type", "topology.kubernetes.io/region",
    "topology.kubernetes.io/zone", "nvidia.com/gpu.present", "nvidia.com/gpu.product", "nvidia.com/gpu.clique",
)
DEFAULT_MAX_MEMORY_BUDGET = "64Gi"


def _quantity_bytes(text: str) -> int:
    try:
        value = parse_quantity(text).value()
    except QuantityError as e:
        raise ValueError(f"max memory budget {text!r}: {e}") from e
    if value <= 0:
        raise ValueError(f"max memory budget {text!r} must be greater than zero")
    return value


@dataclass(frozen=True)
class DatasetCacheAgents:
    """The admin's setting: how DatasetCache agents may be scheduled and how much memory a cache may take."""

    allowed_priority_classes: tuple[str, ...] = ()
    allowed_toleration_keys: tuple[str, ...] = ()
    allowed_node_selector_keys: tuple[str, ...] = DEFAULT_NODE_SELECTOR_KEYS
    # (key, value) pairs added to every agent DaemonSet's nodeSelector, sorted by key.
    required_node_selector: tuple[tuple[str, str], ...] = ()
    max_memory_budget: str = DEFAULT_MAX_MEMORY_BUDGET
    max_memory_budget_bytes: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "max_memory_budget_bytes", _quantity_bytes(self.max_memory_budget))

    @staticmethod
    def of(*, priority_classes: Iterable[str] = (), toleration_keys: Iterable[str] = (),
           node_selector_keys: Iterable[str] = DEFAULT_NODE_SELECTOR_KEYS,
           required_node_selector: Mapping[str, str] | None = None,
           max_memory_budget: str = DEFAULT_MAX_MEMORY_BUDGET) -> "DatasetCacheAgents":
        """De-duplicated, in the order given; raises ``ValueError`` for a budget that is not a positive quantity."""
        return DatasetCacheAgents(
            tuple(dict.fromkeys(priority_classes)), tuple(dict.fromkeys(toleration_keys)),
            tuple(dict.fromkeys(node_selector_keys)), tuple(sorted((required_node_selector or {}).items())),
            max_memory_budget)

    def describe(self) -> str:
        """One line for logs: what this setting allows."""
        required = ", ".join(f"{k}={v}" for k, v in self.required_node_selector) or "none"
        return (f"priority classes: {_names(self.allowed_priority_classes)}; toleration keys: "
                f"{_names(self.allowed_toleration_keys)}; node selector keys: "
                f"{_names(self.allowed_node_selector_keys)}; required node selector: {required}; "
                f"max memory budget: {self.max_memory_budget}")


def _names(names: Iterable[str]) -> str:
    return ", ".join(names) or "none"


def _not_allowed(path: str, value: Any, detail: str) -> FieldError:
    return FieldError(path, ErrorType.NOT_SUPPORTED, detail, value)


def priority_class_errors(cache: DatasetCache, agents: DatasetCacheAgents) -> list[FieldError]:
    name = cache.priority_class_name
    if not name or name in agents.allowed_priority_classes:
        return []
    if not agents.allowed_priority_classes:
        detail = (f"the cluster admin allows no priority class for cache agents ({PRIORITY_CLASS_SETTING}); "
                  "remove it")
    else:
        detail = (f"cache agents may use only the priority classes the cluster admin allows: "
                  f"{_names(agents.allowed_priority_classes)} ({PRIORITY_CLASS_SETTING})")
    return [_not_allowed(PRIORITY_CLASS_FIELD, name, detail)]


def toleration_errors(cache: DatasetCache, agents: DatasetCacheAgents) -> list[FieldError]:
    allowed = f"{_names(agents.allowed_toleration_keys)} ({TOLERATION_SETTING})"
    errors: list[FieldError] = []
    for i, toleration in enumerate(cache.tolerations):
        if toleration == AGENT_GPU_TOLERATION:
            continue
        key = toleration.get("key") if isinstance(toleration, Mapping) else None
        if not key:
            errors.append(forbidden(
                f"{TOLERATIONS_FIELD}[{i}]",
                f"a toleration without a key tolerates every taint, the control plane's included; cache agents may "
                f"tolerate only the taint keys the cluster admin allows: {allowed}"))
        elif key not in agents.allowed_toleration_keys:
            errors.append(_not_allowed(
                f"{TOLERATIONS_FIELD}[{i}].key", key,
                f"cache agents may tolerate only the taint keys the cluster admin allows: {allowed}"))
    return errors


def node_selector_errors(cache: DatasetCache, agents: DatasetCacheAgents) -> list[FieldError]:
    required = dict(agents.required_node_selector)
    errors: list[FieldError] = []
    for key, value in cache.node_selector.items():
        path = f"{NODE_SELECTOR_FIELD}[{key}]"
        if key in required:
            if value != required[key]:
                errors.append(invalid(path, value, f"the cluster admin requires {key}={required[key]} for every "
                                                   f"cache agent ({REQUIRED_SELECTOR_SETTING})"))
        elif key not in agents.allowed_node_selector_keys:
            errors.append(forbidden(path, f"cache agents may select nodes only by the label keys the cluster admin "
                                          f"allows: {_names(agents.allowed_node_selector_keys)} "
                                          f"({NODE_SELECTOR_SETTING})"))
    return errors


def memory_budget_errors(cache: DatasetCache, agents: DatasetCacheAgents) -> list[FieldError]:
    try:
        budget = cache.memory_budget_bytes
    except QuantityError:
        return []  # not a quantity: the door check and the builder refuse it in their own words
    if budget <= agents.max_memory_budget_bytes:
        return []
    return [invalid(MEMORY_BUDGET_FIELD, cache.memory_budget,
                    f"must be at most {agents.max_memory_budget}, the most node memory the cluster admin allows a "
                    f"DatasetCache ({MEMORY_BUDGET_SETTING})")]


# Each rule with the field it judges, read the same way from the old object on UPDATE.
_RULES: tuple[tuple[Callable[[DatasetCache], Any], Callable[[DatasetCache, DatasetCacheAgents], list[FieldError]]], ...] = (
    (lambda c: c.priority_class_name, priority_class_errors),
    (lambda c: c.tolerations, toleration_errors),
    (lambda c: c.node_selector, node_selector_errors),
    (lambda c: c.memory_budget, memory_budget_errors),
)


def agent_errors(obj: Mapping[str, Any], agents: DatasetCacheAgents) -> list[FieldError]:
    """Why DatasetCache ``obj`` asks its agents for more than ``agents`` (the admin's setting) allows (empty:
    nothing)."""
    cache = DatasetCache(obj)
    return [error for _, rule in _RULES for error in rule(cache, agents)]


def agent_findings(
    obj: Mapping[str, Any], old: Mapping[str, Any] | None, agents: DatasetCacheAgents,
) -> tuple[list[FieldError], list[str]]:
    """The admission side of ``agent_errors``: (errors to deny with, warnings). On UPDATE, a field kept as it was
    is warned about, not denied (see the module docstring); a changed one is judged as on CREATE."""
    cache = DatasetCache(obj)
    previous = DatasetCache(old) if old is not None else None
    errors: list[FieldError] = []
    kept: list[FieldError] = []
    for read, rule in _RULES:
        found = rule(cache, agents)
        if found and previous is not None and read(previous) == read(cache):
            kept += found
        else:
            errors += found
    if not kept:
        return errors, []
    return errors, [f'DatasetCache "{cache.metadata.name or ""}": no cache agents run for it while it asks for '
                    f"what the cluster admin no longer allows: {aggregate(kept)}"]
