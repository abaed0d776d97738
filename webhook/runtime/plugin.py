"""What a runtime plugin is: a small required interface plus optional capabilities, as Kueue's ``jobframework``.

An ML policy (torch, mpi, jax, xgboost, flux, plain) or a pod-group policy (coscheduling, volcano) is a module
that has a ``NAME`` (the ``mlPolicy`` / ``podGroupPolicy`` field that selects it), a ``KIND`` and an ``enforce``
step; it may also validate a TrainJob and build objects beside the JobSet. The pipeline asks each capability with
``isinstance`` and calls only what a plugin offers, with one signature per capability, so ``effective``,
``validate`` and ``build`` iterate the registry (``trainguard.webhook.runtime.registry``) instead of naming
plugins. Contexts carry what a capability needs from outside the draft, so adding an input does not change every
plugin's signature.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, AbstractSet, Any, Literal, Mapping, Protocol, runtime_checkable

from trainguard.webhook.api.views import TrainJob
from trainguard.webhook.field import FieldError
from trainguard.webhook.runtime.draft import Draft
from trainguard.webhook.runtime.keys import KeySource

if TYPE_CHECKING:
    from trainguard.webhook.runtime.effective import PodSet

ML = "ml"
POD_GROUP = "pod_group"
PluginKind = Literal["ml", "pod_group"]


@dataclass(frozen=True)
class ExistingObjects:
    """What the reconciler's caches say already exists for this TrainJob."""

    jobset: Mapping[str, Any] | None = None  # the live JobSet (its spec.suspend matters)
    podgroup: bool = False
    mpi_ssh_secret: bool = False
    flux_curve_secret: bool = False


@dataclass(frozen=True)
class ValidationContext:
    """Inputs of TrainJob validation beyond the draft."""

    old_trainjob: Mapping[str, Any] | None = None  # None on CREATE
    jobset: Mapping[str, Any] | None = None  # the live JobSet
    priority_classes: AbstractSet[str] | None = None  # None: unknown, existence checks are skipped


@dataclass(frozen=True)
class BuildContext:
    """Inputs of object building beyond the draft."""

    trainjob: Mapping[str, Any]  # the owner of every object built
    pod_sets: tuple[PodSet, ...]
    keys: KeySource
    existing: ExistingObjects = ExistingObjects()

    @property
    def suspended(self) -> bool:
        return TrainJob(self.trainjob).suspend


@runtime_checkable
class RuntimePlugin(Protocol):
    """Every plugin: selected by ``NAME`` under ``mlPolicy`` (KIND ``ml``) or ``podGroupPolicy`` (``pod_group``)."""

    NAME: str
    KIND: PluginKind

    def enforce(self, draft: Draft) -> None:
        """Edit the draft JobSet (counts, env, volumes, labels)."""


# Optional (ML), a module constant: ``NEEDS_NODE_JOB = True`` when the policy addresses the first trainer pod as
# ``<trainjob>-node-0-0`` or writes a hostfile for ``node``, so a runtime configuring it must have a replicatedJob
# named ``node`` (checked when the runtime is applied, ``trainguard.webhook.policy.runtime_rules``).


@runtime_checkable
class ValidatesTrainJob(Protocol):
    """Optional: TrainJob rules of this plugin, run on the prepared draft before any enforce step."""

    def validate(self, draft: Draft, ctx: ValidationContext) -> list[FieldError]: ...


@runtime_checkable
class BuildsObjects(Protocol):
    """Optional: objects applied beside the JobSet (Secrets, ConfigMaps, PodGroups), from the finished draft."""

    def build(self, draft: Draft, ctx: BuildContext) -> list[dict]: ...


@runtime_checkable
class CountsNodes(Protocol):
    """Optional (ML): which replicated jobs run training processes and how many nodes they make, when that is
    not simply the trainer job (MPI's workers are the ``node`` job, the launcher one of them with
    runLauncherAsNode)."""

    def trainer_jobs(self, draft: Draft) -> tuple[str, ...]: ...

    def num_nodes(self, draft: Draft, pods_by_job: Mapping[str, int]) -> int | None: ...


__all__ = [
    "ML",
    "POD_GROUP",
    "BuildContext",
    "BuildsObjects",
    "CountsNodes",
    "ExistingObjects",
    "PluginKind",
    "RuntimePlugin",
    "ValidatesTrainJob",
    "ValidationContext",
]
