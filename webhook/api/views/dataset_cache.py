"""DatasetCache (trainguard.io/v1alpha1): where its shards are, how much node memory they may take, where its agents
run, and the status the reconciler writes back.

The pydantic model ``trainguard.webhook.api.trainguard.DatasetCache`` stays the CRD's source and the door check of
the DaemonSet builder (``cache_daemonset.buildable_cache``); everything after the door reads the wire dict through
this view. As for every view, a missing or null field reads as its default and a scalar is returned as written (a
wrong type is the door's to refuse); an object or list of the wrong type reads as empty. A DatasetCache is read once
per reconcile or build, not per admission, so its paths are walked with ``resolve``, which also reads an object of
the wrong type on the way as absent (the hot path's ``_at2`` chains would raise there).
"""

from __future__ import annotations

from typing import Any, Mapping

from trainguard.webhook.api.quantity import QuantityError, parse_quantity
from trainguard.webhook.api.views.base import (
    EMPTY, Condition, KubeObject, View, _is_mapping, _list, _mapping, find_condition, resolve,
)

MEMORY_BUDGET_FIELD = "spec.memoryBudget"


class CacheSource(View):
    """``spec.source``: exactly one of a node directory (``hostPath``) or a PVC of the cache's namespace, plus the
    shards' glob. Which one is set is asked with ``has_host_path`` / ``has_claim``: the admin's source check
    (``policy.dataset_cache.source_errors``) must see a hostPath object even when its path is missing."""

    __slots__ = ()

    @property
    def has_host_path(self) -> bool:
        """``hostPath`` is an object (its ``path`` may still be missing or unclean: the source check says so)."""
        return _is_mapping(self.raw.get("hostPath"))

    @property
    def host_path(self) -> Any:
        """``hostPath.path`` as written, uncleaned (``clean_host_path`` cleans it or refuses it); None when absent."""
        return resolve(self.raw, "hostPath.path")

    @property
    def has_claim(self) -> bool:
        """``persistentVolumeClaim`` is set (not null): the admin's ``allow_persistent_volume_claims`` decides."""
        return self.raw.get("persistentVolumeClaim") is not None

    @property
    def claim_name(self) -> Any:
        """``persistentVolumeClaim.claimName`` as written; None when absent."""
        return resolve(self.raw, "persistentVolumeClaim.claimName")

    @property
    def sub_path(self) -> str:
        """``persistentVolumeClaim.path`` relative to the volume root (outer ``/`` stripped, as the agent's root is
        ``/data/<sub_path>``); ``""``: the volume's root, also when absent or not a string."""
        path = resolve(self.raw, "persistentVolumeClaim.path")
        return path.strip("/") if isinstance(path, str) else ""

    @property
    def shards(self) -> Any:
        """The shards' glob, relative to the source directory, as written; ``""`` when absent."""
        return self._one("shards", "")


class CacheStatus(View):
    """A DatasetCache's ``status`` (what ``compute_status`` writes; also a bare status such as ``previous``)."""

    __slots__ = ()

    @property
    def nodes_desired(self) -> Any:
        """Agent pods the DaemonSet wants (nodes selected); None when not reported yet."""
        return self._one("nodesDesired")

    @property
    def nodes_ready(self) -> Any:
        """Agent pods Ready, i.e. nodes with the warm set resident; None when not reported yet."""
        return self._one("nodesReady")

    @property
    def bytes_resident(self) -> Any:
        return self._one("bytesResident")

    @property
    def shards(self) -> Any:
        return self._one("shards")

    @property
    def observed_generation(self) -> Any:
        return self._one("observedGeneration")

    @property
    def conditions(self) -> list[Mapping[str, Any]]:
        return _list(self._one("conditions"))

    @property
    def ready_condition(self) -> Condition:
        """The ``type: Ready`` condition (the only one written; a list-map keyed by type has one); a view of ``{}``
        when there is none, whose fields read as Go's zero values."""
        return find_condition(self.conditions, "Ready") or Condition(EMPTY)


class DatasetCache(KubeObject):
    """A DatasetCache: its source, memory budget, where its agents are scheduled, and its status."""

    __slots__ = ()

    @property
    def source(self) -> CacheSource:
        return CacheSource(resolve(self.raw, "spec.source"))

    @property
    def memory_budget(self) -> Any:
        """``spec.memoryBudget`` as written (a quantity string such as ``64Gi``, or a number); None when absent."""
        return resolve(self.raw, "spec.memoryBudget")

    @property
    def memory_budget_bytes(self) -> int:
        """``spec.memoryBudget`` in bytes (Go ``Quantity.Value()``: rounded up); raises ``QuantityError`` naming
        ``spec.memoryBudget`` when it is absent or not a quantity. A zero or negative budget is returned as is:
        whether it can be built is the builder's question."""
        written = self.memory_budget
        try:
            return parse_quantity(written).value()
        except QuantityError as exc:
            raise QuantityError(f"{MEMORY_BUDGET_FIELD}: {exc}") from exc

    @property
    def node_selector(self) -> Mapping[str, str]:
        """Labels of the nodes the agents run on; empty: every node."""
        return _mapping(resolve(self.raw, "spec.nodeSelector"))

    @property
    def tolerations(self) -> list[Mapping[str, Any]]:
        return _list(resolve(self.raw, "spec.tolerations"))

    @property
    def priority_class_name(self) -> Any:
        """The agents' PriorityClass as written; None when absent (``""`` also means none: test truthiness)."""
        return resolve(self.raw, "spec.priorityClassName")

    @property
    def hold_trainers_until_warm(self) -> bool:
        """Whether trainer pods of TrainJobs using this cache are gated until it is warm; default False. Read as
        truthiness, by the build that adds the gate and the controller that removes it alike, so they never
        disagree on a value the CRD schema would have refused."""
        return bool(resolve(self.raw, "spec.holdTrainersUntilWarm"))

    @property
    def cache_status(self) -> CacheStatus:
        """``status`` read field by field (``KubeObject.status`` is the raw mapping, e.g. to compare or copy it)."""
        return CacheStatus(self._one("status"))
