"""The webhooks trainguard serves: one stable URL path per (mutating|validating, kind), bound to a policy function.

The paths follow upstream's controller-runtime convention (``/{mutate|validate}-<group with dashes>-<version>-<kind
lowercase>``) so that clusters migrating from Kubeflow Trainer's own webhooks keep their URLs. The webhook names are
the ones that appear in denial messages (``admission webhook "<name>" denied the request: ...``); the Trainer ones
are upstream's names, so messages read exactly as users know them.

Each route names a function of the policy module (``trainguard.webhook.policy.pipeline`` unless told otherwise); binding is
done once at startup, so a missing function is a startup error, never a per-request surprise.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable, Literal, Mapping

from trainguard.webhook.api.constants import (
    CLUSTER_TRAINING_RUNTIME_KIND,
    DATASET_CACHE_KIND,
    LABEL_WEBHOOK_VALIDATION,
    TRAINER_GROUP,
    TRAINER_VERSION,
    TRAINGUARD_GROUP,
    TRAINGUARD_VERSION,
    TRAINING_RUNTIME_KIND,
    TRAINJOB_KIND,
    TRAINJOB_POLICY_KIND,
)
from trainguard.webhook.policy.verdict import AdmissionInput, ClusterSnapshot, Verdict

PolicyFunction = Callable[[AdmissionInput, ClusterSnapshot], Verdict]
DEFAULT_POLICY_MODULE = "trainguard.webhook.policy.pipeline"


@dataclass(frozen=True)
class WebhookRoute:
    path: str
    name: str  # the webhook's name in the (Mutating|Validating)WebhookConfiguration
    mutating: bool
    group: str
    version: str
    kind: str
    resource: str  # plural, for the registration rules
    scope: Literal["Namespaced", "Cluster"]
    policy: str  # attribute of the policy module
    # Upstream lets runtime owners opt out of validation with this label (value "disabled").
    upstream_opt_out_label: str | None = None

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


UPSTREAM_RUNTIME_OPT_OUT = LABEL_WEBHOOK_VALIDATION

ROUTES: tuple[WebhookRoute, ...] = (
    WebhookRoute(
        "/mutate-trainer-kubeflow-org-v1alpha1-trainjob", "defaulter.trainjob.trainer.kubeflow.org", True,
        TRAINER_GROUP, TRAINER_VERSION, TRAINJOB_KIND, "trainjobs", "Namespaced", "mutate_trainjob",
    ),
    WebhookRoute(
        "/validate-trainer-kubeflow-org-v1alpha1-trainjob", "validator.trainjob.trainer.kubeflow.org", False,
        TRAINER_GROUP, TRAINER_VERSION, TRAINJOB_KIND, "trainjobs", "Namespaced", "validate_trainjob",
    ),
    WebhookRoute(
        "/validate-trainer-kubeflow-org-v1alpha1-trainingruntime", "validator.trainingruntime.trainer.kubeflow.org", False,
        TRAINER_GROUP, TRAINER_VERSION, TRAINING_RUNTIME_KIND, "trainingruntimes", "Namespaced", "validate_training_runtime",
        # No opt-out: namespace users write TrainingRuntimes, and a label they set must not skip their validation.
    ),
    WebhookRoute(
        "/validate-trainer-kubeflow-org-v1alpha1-clustertrainingruntime",
        "validator.clustertrainingruntime.trainer.kubeflow.org", False,
        TRAINER_GROUP, TRAINER_VERSION, CLUSTER_TRAINING_RUNTIME_KIND, "clustertrainingruntimes", "Cluster",
        "validate_cluster_training_runtime", UPSTREAM_RUNTIME_OPT_OUT,
    ),
    WebhookRoute(
        "/validate-trainguard-io-v1alpha1-trainjobpolicy", "validator.trainjobpolicy.trainguard.io", False,
        TRAINGUARD_GROUP, TRAINGUARD_VERSION, TRAINJOB_POLICY_KIND, "trainjobpolicies", "Cluster", "validate_trainjob_policy",
    ),
    WebhookRoute(
        "/validate-trainguard-io-v1alpha1-datasetcache", "validator.datasetcache.trainguard.io", False,
        TRAINGUARD_GROUP, TRAINGUARD_VERSION, DATASET_CACHE_KIND, "datasetcaches", "Namespaced", "validate_dataset_cache",
    ),
)


@dataclass(frozen=True)
class BoundRoute:
    route: WebhookRoute
    decide: PolicyFunction


def bind_routes(
    policies: Mapping[str, PolicyFunction] | str = DEFAULT_POLICY_MODULE,
    routes: tuple[WebhookRoute, ...] = ROUTES,
) -> dict[str, BoundRoute]:
    """Path -> route with its function, from a module name (import once) or a mapping (tests).

    Raises ``LookupError`` naming every missing function, so a half-installed policy module fails at startup.
    """
    if isinstance(policies, str):
        module = importlib.import_module(policies)
        lookup: Mapping[str, PolicyFunction] = {r.policy: getattr(module, r.policy) for r in routes if hasattr(module, r.policy)}
    else:
        lookup = policies
    missing = [r.policy for r in routes if not callable(lookup.get(r.policy))]
    if missing:
        raise LookupError(f"policy functions not found: {', '.join(missing)}")
    return {r.path: BoundRoute(r, lookup[r.policy]) for r in routes}
