"""TrainJobPolicy (``trainguard.io/v1alpha1``): selector, scheduling, topology, limits and defaults, with the CRD's
defaults applied where they are read.

The API model ``trainguard.webhook.api.trainguard.TrainJobPolicy`` is the CRD's source and the door check
(``trainguard.webhook.policy.policy_model.parse_policy`` validates with it); once a policy has passed it, the rules
read the wire dict through this view. The defaults the CRD declares (``mode: Enforce``, ``priority: 0``, topology
``placement: Preferred``, ``target: Kueue``, ``gpuResourceName: nvidia.com/gpu``) are applied here, for an absent
or null field alike, so a policy read from a file (``render``, not defaulted by an apiserver) means what the same
policy means in a cluster. Lists read as tuples (empty when absent) and optional settings as None, the shapes the
rules test with ``is None`` and ``in``.

Like every view, this one assumes the shapes the door has checked (``dict.get`` chains below a section); a whole
section of the wrong type reads as absent. Where the rules compare policies, the views compare by value: two label
selectors are equal when they select alike (a null field is an absent field), two topologies when their defaulted
settings are (``PolicyTopology.effective``).
"""

from __future__ import annotations

from typing import Any, Mapping

from trainguard.webhook.api.views.base import KubeObject, View, _at2

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
        return self._one("key", "")

    @property
    def operator(self) -> str:
        return self._one("operator", "")

    @property
    def values(self) -> list[str] | None:
        return self._one("values")


class LabelSelector(View):
    """A ``metav1.LabelSelector``, read by ``trainguard.webhook.api.meta.label_selector_matches``."""

    __slots__ = ()

    @property
    def match_labels(self) -> Mapping[str, str] | None:
        return self._one("matchLabels")

    @property
    def match_expressions(self) -> list[LabelSelectorRequirement] | None:
        terms = self._one("matchExpressions")
        return None if terms is None else [LabelSelectorRequirement(t) for t in terms]

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

    __slots__ = ()

    @property
    def namespace(self) -> LabelSelector | None:
        return _selector(self._one("namespaceSelector"))

    @property
    def trainjob(self) -> LabelSelector | None:
        return _selector(self._one("trainJobSelector"))

    @property
    def runtime_names(self) -> tuple[str, ...] | None:
        """``runtimeSelector.names``; None when absent or empty (no constraint)."""
        return _tuple(_at2(self.raw, "runtimeSelector", "names")) or None

    @property
    def runtime_kinds(self) -> tuple[str, ...] | None:
        """``runtimeSelector.kinds``; None when absent or empty (no constraint)."""
        return _tuple(_at2(self.raw, "runtimeSelector", "kinds")) or None

    @property
    def runtime_labels(self) -> LabelSelector | None:
        return _selector(_at2(self.raw, "runtimeSelector", "labelSelector"))


class KueueSettings(View):
    """``spec.scheduling.kueue``: the LocalQueue and WorkloadPriorityClass set as TrainJob labels."""

    __slots__ = ()

    @property
    def queue_name(self) -> str | None:
        return self._one("queueName")

    @property
    def priority_class(self) -> str | None:
        return self._one("priorityClass")


class PolicyScheduling(View):
    """``spec.scheduling``."""

    __slots__ = ()

    @property
    def kueue(self) -> KueueSettings | None:
        """None when ``kueue`` is absent; a view (possibly of ``{}``) when it is written."""
        kueue = self._one("kueue")
        return None if kueue is None else KueueSettings(kueue)

    @property
    def kai_queue(self) -> str | None:
        return _at2(self.raw, "kai", "queue")

    @property
    def scheduler_name(self) -> str | None:
        return self._one("schedulerName")


class TopologyLevel(View):
    """One ``spec.topology.levels[]`` entry: the node label naming a domain, and the GPUs one domain holds."""

    __slots__ = ()

    @property
    def node_label(self) -> str:
        return self._one("nodeLabel", "")

    @property
    def gpus_per_domain(self) -> int:
        return self._one("gpusPerDomain", 0)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TopologyLevel):
            return NotImplemented
        return (self.node_label, self.gpus_per_domain) == (other.node_label, other.gpus_per_domain)

    def __hash__(self) -> int:
        # Levels sit in frozen dataclasses (``topology.Placement``): hashable as their values.
        return hash((self.node_label, self.gpus_per_domain))


class PolicyTopology(View):
    """``spec.topology``, defaulted: gpuResourceName ``nvidia.com/gpu``, placement ``Preferred``, target ``Kueue``."""

    __slots__ = ()

    @property
    def gpu_resource_name(self) -> str:
        # ``or``: an empty name counts GPUs of no resource; the CRD default stands in for it.
        return self._one("gpuResourceName") or DEFAULT_GPU_RESOURCE

    @property
    def placement(self) -> str:
        return self._one("placement") or DEFAULT_PLACEMENT

    @property
    def schedulers(self) -> tuple[str, ...]:
        """Who receives the hints: ``target`` Kueue, KAI or Both as ``("Kueue",)``, ``("KAI",)``, both."""
        return SCHEDULERS_BY_TARGET.get(self._one("target") or DEFAULT_TARGET, ())

    @property
    def kai_topology(self) -> str | None:
        return self._one("kaiTopology")

    @property
    def levels(self) -> tuple[TopologyLevel, ...]:
        """Narrowest first, as written (the CRD requires at least one; ``policy_rules`` checks they grow)."""
        return tuple(TopologyLevel(lv) for lv in _tuple(self._one("levels")))

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
        return self._one("maxNodes")

    @property
    def max_gpus_per_node(self) -> int | None:
        return self._one("maxGpusPerNode")

    @property
    def max_total_gpus(self) -> int | None:
        return self._one("maxTotalGpus")

    @property
    def allowed_runtimes(self) -> tuple[str, ...]:
        return _tuple(self._one("allowedRuntimes"))

    @property
    def allowed_image_prefixes(self) -> tuple[str, ...]:
        return _tuple(self._one("allowedImagePrefixes"))

    @property
    def required_requests(self) -> tuple[str, ...]:
        """``requiredResourceRequests``."""
        return _tuple(self._one("requiredResourceRequests"))

    @property
    def pod_security(self) -> str | None:
        return self._one("podSecurity")


class PolicyDefaults(View):
    """``spec.defaults``: None for a default that is not given, or given empty (nothing to add)."""

    __slots__ = ()

    @property
    def active_deadline_seconds(self) -> int | None:
        return self._one("activeDeadlineSeconds")

    @property
    def labels(self) -> Mapping[str, str] | None:
        return self._one("labels") or None

    @property
    def node_selector(self) -> Mapping[str, str] | None:
        return self._one("nodeSelector") or None

    @property
    def tolerations(self) -> tuple[Mapping[str, Any], ...] | None:
        return _tuple(self._one("tolerations")) or None


class PolicySpec(View):
    """``spec`` of a TrainJobPolicy: mode and priority defaulted; every section a view (of ``{}`` when absent),
    except ``topology``, which is None when the policy gives none."""

    __slots__ = ()

    @property
    def mode(self) -> str:
        return self._one("mode") or DEFAULT_MODE

    @property
    def priority(self) -> int:
        return self._one("priority", 0)

    @property
    def selector(self) -> PolicySelector:
        return PolicySelector(self._one("selector"))

    @property
    def scheduling(self) -> PolicyScheduling:
        return PolicyScheduling(self._one("scheduling"))

    @property
    def topology(self) -> PolicyTopology | None:
        topology = self._one("topology")
        return None if topology is None else PolicyTopology(topology)

    @property
    def limits(self) -> PolicyLimits:
        return PolicyLimits(self._one("limits"))

    @property
    def defaults(self) -> PolicyDefaults:
        return PolicyDefaults(self._one("defaults"))


class TrainJobPolicy(KubeObject):
    """A TrainJobPolicy. ``spec`` is the typed ``PolicySpec`` (not the raw mapping ``KubeObject.spec`` gives): every
    reader of a policy's spec goes through it."""

    __slots__ = ()

    @property
    def name(self) -> str:
        return str(self.metadata.name or "")

    @property
    def spec(self) -> PolicySpec:  # type: ignore[override]
        return PolicySpec(self._one("spec"))

    @property
    def enforcing(self) -> bool:
        """``mode: Enforce`` (the default): violations deny; Audit only warns."""
        return self.spec.mode == "Enforce"

