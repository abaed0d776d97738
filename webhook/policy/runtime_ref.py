"""Resolving a TrainJob's ``spec.runtimeRef`` against the cluster snapshot, as upstream's
``TrainJobValidator`` does first: the runtime kind, the runtime itself, its deprecation label.

Upstream's messages are kept verbatim, including the capitalised ``spec.RuntimeRef`` path used for a missing
ClusterTrainingRuntime (a quirk of upstream's code that users and tests already match on) and the NotFound text
of controller-runtime's cache reader, which names the Kind, not the resource: ``ClusterTrainingRuntime.trainer.
kubeflow.org "x" not found`` (an apiserver GET would say ``clustertrainingruntimes.trainer.kubeflow.org``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from trainguard.webhook.api.constants import CLUSTER_TRAINING_RUNTIME_KIND, LABEL_SUPPORT, TRAINER_GROUP, TRAINING_RUNTIME_KIND
from trainguard.webhook.api.views import KubeObject, RuntimeRef, TrainJob
from trainguard.webhook.field import FieldError, invalid
from trainguard.webhook.policy.verdict import ClusterSnapshot

Object = dict[str, Any]

TRAINING_RUNTIME = TRAINING_RUNTIME_KIND
CLUSTER_TRAINING_RUNTIME = CLUSTER_TRAINING_RUNTIME_KIND
SUPPORT_LABEL = LABEL_SUPPORT
DEPRECATION_POLICY_URL = (
    "https://trainer.kubeflow.org/en/latest/operator-guides/runtime.html#runtime-deprecation-policy"
)


class UnsupportedRuntime(Exception):
    """The runtimeRef names a kind/group no runtime implements; upstream returns a bare error, not a field error."""


def runtime_ref(trainjob: Object) -> RuntimeRef:
    """The runtimeRef with the CRD defaults applied to absent fields (render has no apiserver to default them);
    ``kind: ""`` stays empty and names no runtime, as upstream (see ``trainguard.webhook.api.views``)."""
    return TrainJob(trainjob).runtime_ref


def not_found(kind: str, name: str) -> str:
    """Upstream's lookup error: its cached client builds the NotFound from the Kind and group (``Kind.group``)."""
    return f'{kind}.{TRAINER_GROUP} "{name}" not found'


@dataclass(frozen=True)
class Resolved:
    runtime: Object | None
    errors: tuple[FieldError, ...] = ()
    warnings: tuple[str, ...] = ()


def resolve_runtime(trainjob: Object, namespace: str, snapshot: ClusterSnapshot) -> Resolved:
    """Find the referenced runtime; raise ``UnsupportedRuntime`` for a kind/group outside the registry."""
    ref = runtime_ref(trainjob)
    if ref.registry_key == f"{TRAINING_RUNTIME}.{TRAINER_GROUP}":
        found = snapshot.training_runtimes.get((namespace, ref.name))
        if found is None:
            return Resolved(None, (invalid(
                "spec.runtimeRef", ref.as_dict(),
                f'{not_found(TRAINING_RUNTIME, ref.name)}: '
                "specified trainingRuntime must be created before the TrainJob is created",
            ),))
        return Resolved(found)
    if ref.registry_key == f"{CLUSTER_TRAINING_RUNTIME}.{TRAINER_GROUP}":
        found = snapshot.cluster_training_runtimes.get(ref.name)
        if found is None:
            return Resolved(None, (invalid(
                "spec.RuntimeRef", ref.as_dict(),
                f'{not_found(CLUSTER_TRAINING_RUNTIME, ref.name)}: '
                "specified clusterTrainingRuntime must be created before the TrainJob is created",
            ),))
        warnings: tuple[str, ...] = ()
        if is_deprecated(found):
            warnings = (
                f"Referenced ClusterTrainingRuntime {json.dumps(ref.name)} is deprecated and will be removed in a "
                f"future release of Kubeflow Trainer. See runtime deprecation policy: {DEPRECATION_POLICY_URL}",
            )
        return Resolved(found, (), warnings)
    raise UnsupportedRuntime(f"unsupported runtime: {ref.registry_key}")


def allowed_runtime_entry(entry: str) -> tuple[str, str] | None:
    """``spec.limits.allowedRuntimes`` entry -> (kind, name); None when unreadable.

    ``ClusterTrainingRuntime/<name>`` and ``TrainingRuntime/<name>`` name a kind; a plain ``<name>`` means the
    ClusterTrainingRuntime of that name ONLY (issue 10: matching by name alone let a namespaced TrainingRuntime of an
    allowed ClusterTrainingRuntime's name, written by a namespace user, shadow it). ``TrainingRuntime/<name>``
    allows that name in every namespace the policy selects.
    """
    kind, sep, name = entry.partition("/")
    if not sep:
        kind, name = CLUSTER_TRAINING_RUNTIME, entry
    if kind not in (TRAINING_RUNTIME, CLUSTER_TRAINING_RUNTIME) or not name or "/" in name:
        return None
    return kind, name


def is_deprecated(runtime: Object) -> bool:
    return KubeObject(runtime).metadata.labels.get(SUPPORT_LABEL) == "deprecated"
