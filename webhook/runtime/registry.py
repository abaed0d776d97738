"""The one list of runtime plugins: upstream v2.3's ML policies and pod-group policies, in build order.

Adding an ML policy is one module (``NAME``, ``KIND = ML``, ``enforce`` and, optionally, ``validate`` / ``build`` /
``trainer_jobs`` + ``num_nodes``; see ``plugin``) and one line in ``PLUGINS``. The runtime CRD prunes an
``mlPolicy`` field it does not declare, so a new policy also needs its field in ``webhook/api/trainer.py`` and the
CRD.

Which plugins run for a runtime: the first ML policy whose ``spec.mlPolicy.<NAME>`` is set, else ``plain`` (the
CRD allows one), and the first pod-group policy whose ``spec.podGroupPolicy.<NAME>`` is set, if any. The order of
``PLUGINS`` is the order of the objects they build (after the JobSet): MPI's Secret and hostfile, the PodGroup,
Flux's ConfigMap and Secret.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TypeGuard, TypeVar

from trainguard.webhook.api.views import Runtime
from trainguard.webhook.runtime import coscheduling, flux, jax, mpi, plain, torch, volcano, xgboost
from trainguard.webhook.runtime.plugin import ML, POD_GROUP, RuntimePlugin

Capability = TypeVar("Capability")

PLUGINS: list[RuntimePlugin] = [torch, mpi, jax, xgboost, coscheduling, volcano, flux, plain]  # type: ignore[list-item]
# The ML policy of a runtime that configures none (upstream's PlainML).
FALLBACK_ML = plain


def register(plugin: RuntimePlugin) -> RuntimePlugin:
    """Add ``plugin`` (before the fallback); a second plugin of the same kind and name is refused."""
    if not isinstance(plugin, RuntimePlugin) or plugin.KIND not in (ML, POD_GROUP):
        raise TypeError(f"{plugin!r} is not a runtime plugin (NAME, KIND ml|pod_group, enforce)")
    if any(p.KIND == plugin.KIND and p.NAME == plugin.NAME for p in PLUGINS):
        raise ValueError(f"a {plugin.KIND} plugin named {plugin.NAME!r} is already registered")
    PLUGINS.insert(PLUGINS.index(FALLBACK_ML), plugin)  # type: ignore[arg-type]
    return plugin


def unregister(plugin: RuntimePlugin) -> None:
    PLUGINS.remove(plugin)


@lru_cache(maxsize=None)
def offers(plugin: object, capability: type[Capability]) -> TypeGuard[Capability]:
    """Whether ``plugin`` has ``capability`` (a ``plugin`` Protocol); asked once per plugin and capability, since a
    Protocol ``isinstance`` inspects every member each time and the pipeline asks on every review."""
    return isinstance(plugin, capability)


def ml_policies() -> tuple[RuntimePlugin, ...]:
    return tuple(p for p in PLUGINS if p.KIND == ML)


def pod_group_policies() -> tuple[RuntimePlugin, ...]:
    return tuple(p for p in PLUGINS if p.KIND == POD_GROUP)


def ml_policy_of(runtime: Runtime) -> RuntimePlugin:
    """The ML policy the runtime configures, or the fallback."""
    sources = runtime.ml_policy
    if sources:
        for p in PLUGINS:
            if p.KIND == ML and sources.get(p.NAME) is not None and p is not FALLBACK_ML:
                return p
    return FALLBACK_ML  # type: ignore[return-value]


def node_job_policies() -> tuple[str, ...]:
    """Names of the ML policies whose runtime needs a replicatedJob named ``node`` (``NEEDS_NODE_JOB``)."""
    return tuple(p.NAME for p in ml_policies() if getattr(p, "NEEDS_NODE_JOB", False))


def pod_group_policy_of(runtime: Runtime) -> RuntimePlugin | None:
    sources = runtime.pod_group_policy
    if sources:
        for p in PLUGINS:
            if p.KIND == POD_GROUP and sources.get(p.NAME) is not None:
                return p
    return None


def active(runtime: Runtime) -> list[RuntimePlugin]:
    """The plugins that run for ``runtime``, in ``PLUGINS`` order."""
    ml, pod_group = ml_policy_of(runtime), pod_group_policy_of(runtime)
    return [p for p in PLUGINS if p is ml or p is pod_group]


__all__ = [
    "FALLBACK_ML",
    "PLUGINS",
    "active",
    "ml_policies",
    "node_job_policies",
    "offers",
    "ml_policy_of",
    "pod_group_policies",
    "pod_group_policy_of",
    "register",
    "unregister",
]
