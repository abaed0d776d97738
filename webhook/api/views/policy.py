"""TrainJobPolicy (``trainguard.io/v1alpha1``): selector, scheduling, topology, limits and defaults, with the CRD's
defaults applied where they are read.

The API model ``trainguard.webhook.api.trainguard.TrainJobPolicy`` is the CRD's source and the door check
(``trainguard.webhook.policy.policy_model.parse_policy`` validates with it); once a policy has passed it, the rules
read the wire dict through this view. The defaults the CRD declares (``mode: Enforce``, ``priority: 0``, topology
``placement: Preferred``, ``target: Kueue``, ``gpuResourceName: nvidia.com/gpu``) are applied here, for an absent
or null field alike, so a policy read from a file (``render``, not defaulted by an apiserver) means what the same
policy means in a cluster. Lists read as tuples (empty when absent) and optional settings as None, the shapes the
rules test with ``is None`` and ``in``.

The door has checked every type before a rule reads the view; still, an object of the wrong type at any level reads
as absent and a list of the wrong type as empty, so a view over an unchecked dict never raises (a scalar of the wrong
type is returned as written: the door refuses it). Sub-views (the spec's sections, the selectors, the topology
levels) and the name are made once, with the view: the parse cache in ``trainguard.webhook.policy.matching`` keeps
one view per stored policy version, and every review reads each section of every matching policy many times over.
They wrap the same dicts, so nothing is copied; the leaves are single ``dict.get`` reads.

Where the rules compare policies, the views compare by value: two label selectors are equal when they select alike
(a null field is an absent field), two topologies when their defaulted settings are (``PolicyTopology.effective``).
"""

from __future__ import annotations

from typing import Any, Mapping

from trainguard.webhook.api.views.base import KubeObject, View, _mapping

DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"
DEFAULT_MODE = "Enforce"
DEFAULT_PLACEMENT = "Preferred"
DEFAULT_TARGET = "Kueue"
# spec.topology.target -> the schedulers that receive the placement hints.
SCHEDULERS_BY_TARGET: Mapping[str, tuple[str, ...]] = {"Kueue": ("Kueue",), "KAI": ("KAI",), "Both": ("Kueue", "KAI")}


def _tuple(value: Any) -> tuple[Any, ...]:
    return tuple(value) if isinstance(value, list) else ()


def _without_nulls(value: Any) -> Any:
    # A null field is an absent field (the apiserver prunes them; a file may carry them).
    if isinstance(value, Mapping):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


class LabelSelectorRequirement(View):
    """One ``matchExpressions`` term: ``key``, ``operator``, ``values``."""

    __slots__ = ()

    @property
    def key(self) -> str:
        value = self.raw.get("key")
        return "" if value is None else value

    @property
    def operator(self) -> str:
        value = self.raw.get("operator")
        return "" if value is None else value

    @property
    def values(self) -> list[str] | None:
        return self.raw.get("values")


class LabelSelector(View):
    """A ``metav1.LabelSelector``, read by ``trainguard.webhook.api.meta.label_selector_matches``."""

    __slots__ = ("match_expressions",)

    match_expressions: tuple[LabelSelectorRequirement, ...] | None

    def __init__(self, raw: Mapping[str, Any] | None) -> None:
        super().__init__(raw)
        # Made once (see the module docstring): a selector is matched against every TrainJob of every review.
        terms = self.raw.get("matchExpressions")
        self.match_expressions = None if terms is None else tuple(LabelSelectorRequirement(t) for t in _tuple(terms))

    @property
    def match_labels(self) -> Mapping[str, str] | None:
        return self.raw.get("matchLabels")

    def __eq__(self, other: object) -> bool:
        # Equal selectors select alike: ``policy_rules`` treats two policies with equal selectors as overlapping.
        if not isinstance(other, LabelSelector):
            return NotImplemented
        return _without_nulls(self.raw) == _without_nulls(other.raw)

    __hash__ = None  # type: ignore[assignment]  # value equality over a mutable dict


def _selector(value: Any) -> LabelSelector | None:
    return None if value is None else LabelSelector(value)


class PolicySelector(View):
    """``spec.selector``: every selector given must match; an absent one (None here) matches everything."""

    __slots__ = ("namespace", "trainjob", "runtime_labels", "_runtime")

    namespace: LabelSelector | None
    trainjob: LabelSelector | None
    runtime_labels: LabelSelector | None  # runtimeSelector.labelSelector

    def __init__(self, raw: Mapping[str, Any] | None) -> None:
        super().__init__(raw)
        # Made once (see the module docstring).
        self.namespace = _selector(self.raw.get("namespaceSelector"))
        self.trainjob = _selector(self.raw.get("trainJobSelector"))
        self._runtime = _mapping(self.raw.get("runtimeSelector"))
        self.runtime_labels = _selector(self._runtime.get("labelSelector"))

    @property
    def runtime_names(self) -> tuple[str, ...] | None:
        """``runtimeSelector.names``; None when absent or empty (no constraint)."""
        return _tuple(self._runtime.get("names")) or None

    @property
    def runtime_kinds(self) -> tuple[str, ...] | None:
        """``runtimeSelector.kinds``; None when absent or empty (no constraint)."""
        return _tuple(self._runtime.get("kinds")) or None


class KueueSettings(View):
    """``spec.scheduling.kueue``: the LocalQueue and WorkloadPriorityClass set as TrainJob labels."""

    __slots__ = ()

    @property
    def queue_name(self) -> str | None:
        return self.raw.get("queueName")

    @property
    def priority_class(self) -> str | None:
        return self.raw.get("priorityClass")

    @property
    def allowed_queue_names(self) -> tuple[str, ...]:
        return _tuple(self.raw.get("allowedQueueNames"))

    @property
    def allowed_priority_classes(self) -> tuple[str, ...]:
        return _tuple(self.raw.get("allowedPriorityClasses"))


class PolicyScheduling(View):
    """``spec.scheduling``."""

    __slots__ = ("kueue", "_kai")

    kueue: KueueSettings | None
    """None when ``kueue`` is absent; a view (possibly of ``{}``) when it is written."""

    def __init__(self, raw: Mapping[str, Any] | None) -> None:
        super().__init__(raw)
        kueue = self.raw.get("kueue")
        self.kueue = None if kueue is None else KueueSettings(kueue)
        self._kai = _mapping(self.raw.get("kai"))

    @property
    def kai_queue(self) -> str | None:
        return self._kai.get("queue")

    @property
    def kai_allowed_queues(self) -> tuple[str, ...]:
        """``kai.allowedQueues``."""
        return _tuple(self._kai.get("allowedQueues"))

    @property
    def scheduler_name(self) -> str | None:
        return self.raw.get("schedulerName")

    @property
    def allowed_scheduler_names(self) -> tuple[str, ...]:
        return _tuple(self.raw.get("allowedSchedulerNames"))


class TopologyLevel(View):
    """One ``spec.topology.levels[]`` entry: the node label naming a domain, and the GPUs one domain holds."""

    __slots__ = ()

    @property
    def node_label(self) -> str:
        value = self.raw.get("nodeLabel")
        return "" if value is None else value

    @property
    def gpus_per_domain(self) -> int:
        value = self.raw.get("gpusPerDomain")
        return 0 if value is None else value

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TopologyLevel):
            return NotImplemented
        return (self.node_label, self.gpus_per_domain) == (other.node_label, other.gpus_per_domain)

    def __hash__(self) -> int:
        # Levels sit in frozen dataclasses (``topology.Placement``): hashable as their values.
        return hash((self.node_label, self.gpus_per_domain))


class PolicyTopology(View):
    """``spec.topology``, defaulted: gpuResourceName ``nvidia.com/gpu``, placement ``Preferred``, target ``Kueue``."""

    __slots__ = ("levels",)

    levels: tuple[TopologyLevel, ...]
    """Narrowest first, as written (the CRD requires at least one; ``policy_rules`` checks they grow)."""

    def __init__(self, raw: Mapping[str, Any] | None) -> None:
        super().__init__(raw)
        # Made once (see the module docstring): the topology rule walks them several times per review.
        self.levels = tuple(TopologyLevel(lv) for lv in _tuple(self.raw.get("levels")))

    @property
    def gpu_resource_name(self) -> str:
        # ``or``: an empty name counts GPUs of no resource; the CRD default stands in for it.
        return self.raw.get("gpuResourceName") or DEFAULT_GPU_RESOURCE

    @property
    def placement(self) -> str:
        return self.raw.get("placement") or DEFAULT_PLACEMENT

    @property
    def schedulers(self) -> tuple[str, ...]:
        """Who receives the hints: ``target`` Kueue, KAI or Both as ``("Kueue",)``, ``("KAI",)``, both."""
        return SCHEDULERS_BY_TARGET.get(self.raw.get("target") or DEFAULT_TARGET, ())

    @property
    def kai_topology(self) -> str | None:
        return self.raw.get("kaiTopology")

    def effective(self) -> dict[str, Any]:
        """The defaulted settings as one value: two policies' topologies agree when these are equal
        (``policy_rules`` compares them, and quotes them in a conflict)."""
        return {
            "gpu_resource_name": self.gpu_resource_name,
            "placement": self.placement,
            "schedulers": self.schedulers,
            "kai_topology": self.kai_topology,
            "levels": tuple({"node_label": lv.node_label, "gpus_per_domain": lv.gpus_per_domain}
                            for lv in self.levels),
        }


class PolicyLimits(View):
    """``spec.limits``: an absent bound is None, an absent list ``()`` (no constraint)."""

    __slots__ = ()

    @property
    def max_nodes(self) -> int | None:
        return self.raw.get("maxNodes")

    @property
    def max_gpus_per_node(self) -> int | None:
        return self.raw.get("maxGpusPerNode")

    @property
    def max_total_gpus(self) -> int | None:
        return self.raw.get("maxTotalGpus")

    @property
    def allowed_runtimes(self) -> tuple[str, ...]:
        return _tuple(self.raw.get("allowedRuntimes"))

    @property
    def allowed_image_prefixes(self) -> tuple[str, ...]:
        return _tuple(self.raw.get("allowedImagePrefixes"))

    @property
    def required_requests(self) -> tuple[str, ...]:
        """``requiredResourceRequests``."""
        return _tuple(self.raw.get("requiredResourceRequests"))

    @property
    def pod_security(self) -> str | None:
        return self.raw.get("podSecurity")


class PolicyDefaults(View):
    """``spec.defaults``: None for a default that is not given, or given empty (nothing to add)."""

    __slots__ = ()

    @property
    def active_deadline_seconds(self) -> int | None:
        return self.raw.get("activeDeadlineSeconds")

    @property
    def labels(self) -> Mapping[str, str] | None:
        return self.raw.get("labels") or None

    @property
    def node_selector(self) -> Mapping[str, str] | None:
        return self.raw.get("nodeSelector") or None

    @property
    def tolerations(self) -> tuple[Mapping[str, Any], ...] | None:
        return _tuple(self.raw.get("tolerations")) or None


class PolicySpec(View):
    """``spec`` of a TrainJobPolicy: mode and priority defaulted; every section a view (of ``{}`` when absent),
    except ``topology``, which is None when the policy gives none."""

    __slots__ = ("selector", "scheduling", "topology", "limits", "defaults")

    selector: PolicySelector
    scheduling: PolicyScheduling
    topology: PolicyTopology | None
    limits: PolicyLimits
    defaults: PolicyDefaults

    def __init__(self, raw: Mapping[str, Any] | None) -> None:
        super().__init__(raw)
        # Made once (see the module docstring).
        raw = self.raw
        self.selector = PolicySelector(raw.get("selector"))
        self.scheduling = PolicyScheduling(raw.get("scheduling"))
        topology = raw.get("topology")
        self.topology = None if topology is None else PolicyTopology(topology)
        self.limits = PolicyLimits(raw.get("limits"))
        self.defaults = PolicyDefaults(raw.get("defaults"))

    @property
    def mode(self) -> str:
        return self.raw.get("mode") or DEFAULT_MODE

    @property
    def priority(self) -> int:
        value = self.raw.get("priority")
        return 0 if value is None else value



class TrainJobPolicy(KubeObject):
    """A TrainJobPolicy. ``spec`` is the typed ``PolicySpec`` (not the raw mapping ``KubeObject.spec`` gives): every
    reader of a policy's spec goes through it."""

    # ``spec`` and ``name`` are read for every matching policy many times per review (sort keys, messages): made
    # once, with the view (a slot named ``spec`` takes the place of ``KubeObject.spec``).
    __slots__ = ("spec", "name")

    spec: PolicySpec  # type: ignore[assignment]
    name: str

    def __init__(self, raw: Mapping[str, Any] | None) -> None:
        super().__init__(raw)
        self.spec = PolicySpec(self.raw.get("spec"))
        self.name = str(self.metadata.name or "")

    @property
    def enforcing(self) -> bool:
        """``mode: Enforce`` (the default): violations deny; Audit only warns."""
        return self.spec.mode == "Enforce"
