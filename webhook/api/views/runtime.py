"""TrainingRuntime and ClusterTrainingRuntime (one spec for both)."""

from __future__ import annotations

from typing import Any, Mapping

from trainguard.webhook.api.views.base import KubeObject, _at2, _at3
from trainguard.webhook.api.views.jobset import JobSetTemplate


class Runtime(KubeObject):
    """A TrainingRuntime or a ClusterTrainingRuntime (one spec for both)."""

    __slots__ = ()

    @property
    def ml_policy(self) -> Mapping[str, Any] | None:
        """``spec.mlPolicy``; None when absent (the trainer job is then counted by its own parallelism)."""
        return _at2(self.raw, "spec", "mlPolicy")

    def ml_policy_source(self, name: str) -> Mapping[str, Any] | None:
        """``spec.mlPolicy.<name>`` (``torch``, ``mpi``...); None when not configured."""
        return _at3(self.raw, "spec", "mlPolicy", name)

    @property
    def num_nodes(self) -> int | None:
        """``spec.mlPolicy.numNodes`` as written."""
        return _at3(self.raw, "spec", "mlPolicy", "numNodes")

    @property
    def pod_group_policy(self) -> Mapping[str, Any] | None:
        """``spec.podGroupPolicy``; None when absent."""
        return _at2(self.raw, "spec", "podGroupPolicy")

    def pod_group_policy_source(self, name: str) -> Mapping[str, Any] | None:
        """``spec.podGroupPolicy.<name>`` (``coscheduling``, ``volcano``); None when not configured."""
        return _at3(self.raw, "spec", "podGroupPolicy", name)

    @property
    def template(self) -> JobSetTemplate:
        return JobSetTemplate(_at2(self.raw, "spec", "template"))
