"""The Mutating- and ValidatingWebhookConfiguration objects, from one function, for the chart, the tests and users.

``webhook_configurations`` is the single source: the Helm chart renders its output (``python -m
trainguard.webhook.admission.registration --service NAME --namespace NS``), the integration tests register it by URL, and the
certificate rotator injects the CA bundle into the objects it names.

Choices (upstream's ``manifests/base/webhook`` where it has one): sideEffects None (admission is pure; dry-run is safe);
admissionReviewVersions [v1]; timeoutSeconds 5 by default (a small timeout, well inside the apiserver's budget);
failurePolicy Fail by default (Kubeflow Trainer's own choice); the namespaceSelector skips kube-system,
kube-node-lease and trainguard's own namespace (no self-admission deadlock); reinvocationPolicy IfNeeded on the
mutating webhook (the mutation is idempotent, so a second call after another webhook's change is harmless).

Exemptions are decided by admins, never by the object being judged (issue 10: a ``trainguard.io/webhook:
disabled`` label on a TrainJob used to skip every webhook, so anyone who could create a TrainJob could skip the
policies). There is no objectSelector opt-out on namespaced webhooks. An admin exempts a namespace by labelling
the Namespace ``trainguard.io/webhook: disabled`` (namespaceSelector; labelling a Namespace takes cluster-scoped
rights a namespace user does not have), or narrows a TrainJobPolicy's own ``selector``. Upstream's
``trainer.kubeflow.org/webhook-validation: disabled`` is kept on the ClusterTrainingRuntime webhook only (parity:
only cluster admins write ClusterTrainingRuntimes, so the label is an admin's decision); on the TrainingRuntime
webhook it is dropped, a deliberate difference from upstream v2.3, because a namespace user writes
TrainingRuntimes and their validation is theirs to skip otherwise. The TrainJob-time policy checks do not depend on
a runtime having been validated: they measure the merged job, every container of every replicatedJob.
"""

from __future__ import annotations

import argparse
import base64
import sys
from dataclasses import dataclass, field
from typing import Any, Literal

import yaml

from trainguard.webhook.admission.routes import ROUTES, WebhookRoute

# On a Namespace (set by an admin): trainguard's namespaced webhooks skip that namespace.
EXEMPT_NAMESPACE_LABEL = "trainguard.io/webhook"
OPT_OUT_VALUE = "disabled"
ALWAYS_EXCLUDED_NAMESPACES = ("kube-system", "kube-node-lease")
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # set by the apiserver on every Namespace

FailurePolicy = Literal["Fail", "Ignore"]


@dataclass(frozen=True)
class ServiceRef:
    name: str
    namespace: str
    port: int = 443


@dataclass(frozen=True)
class Registration:
    """Everything that varies between installations; the rest is fixed by trainguard's design."""

    # Exactly one of service / url_base: in-cluster Service, or https://host:port for a webhook outside the cluster.
    service: ServiceRef | None = None
    url_base: str | None = None
    ca_bundle: bytes | None = None  # PEM; None leaves it for the rotator (or cert-manager's CA injector) to fill
    failure_policy: FailurePolicy = "Fail"
    mutating_failure_policy: FailurePolicy | None = None  # defaults to failure_policy
    timeout_seconds: int = 5
    own_namespace: str | None = None  # excluded from admission; defaults to the Service's namespace
    excluded_namespaces: tuple[str, ...] = ()
    mutating_name: str = "trainguard-mutating"
    validating_name: str = "trainguard-validating"
    labels: dict[str, str] = field(default_factory=lambda: {"app.kubernetes.io/name": "trainguard"})
    annotations: dict[str, str] = field(default_factory=dict)  # e.g. cert-manager.io/inject-ca-from


def _client_config(reg: Registration, route: WebhookRoute) -> dict[str, Any]:
    if (reg.service is None) == (reg.url_base is None):
        raise ValueError("give exactly one of a Service reference or a URL base")
    cc: dict[str, Any]
    if reg.service is not None:
        cc = {"service": {"name": reg.service.name, "namespace": reg.service.namespace, "path": route.path, "port": reg.service.port}}
    else:
        assert reg.url_base is not None
        if not reg.url_base.startswith("https://"):
            raise ValueError(f"webhook URLs must be https://, got {reg.url_base!r}")
        cc = {"url": reg.url_base.rstrip("/") + route.path}
    if reg.ca_bundle:
        cc["caBundle"] = base64.b64encode(reg.ca_bundle).decode()
    return cc


def _namespace_selector(reg: Registration) -> dict[str, Any]:
    own = reg.own_namespace or (reg.service.namespace if reg.service else None)
    excluded = list(dict.fromkeys([*ALWAYS_EXCLUDED_NAMESPACES, *([own] if own else []), *reg.excluded_namespaces]))
    return {"matchExpressions": [
        {"key": NAMESPACE_NAME_LABEL, "operator": "NotIn", "values": excluded},
        {"key": EXEMPT_NAMESPACE_LABEL, "operator": "NotIn", "values": [OPT_OUT_VALUE]},
    ]}


def _object_selector(route: WebhookRoute) -> dict[str, Any] | None:
    """Upstream's runtime opt-out, on cluster-scoped (admin-written) runtimes only; None: every object is judged."""
    if route.upstream_opt_out_label and route.scope == "Cluster":
        return {"matchExpressions": [{"key": route.upstream_opt_out_label, "operator": "NotIn", "values": [OPT_OUT_VALUE]}]}
    return None


def _webhook(reg: Registration, route: WebhookRoute, failure_policy: FailurePolicy) -> dict[str, Any]:
    if not 1 <= reg.timeout_seconds <= 30:
        raise ValueError(f"timeoutSeconds must be within 1..30, got {reg.timeout_seconds}")
    hook: dict[str, Any] = {
        "name": route.name,
        "admissionReviewVersions": ["v1"],
        "clientConfig": _client_config(reg, route),
        "failurePolicy": failure_policy,
        "matchPolicy": "Equivalent",
        "sideEffects": "None",
        "timeoutSeconds": reg.timeout_seconds,
        "rules": [
            {
                "apiGroups": [route.group],
                "apiVersions": [route.version],
                "operations": ["CREATE", "UPDATE"],
                "resources": [route.resource],
                "scope": route.scope,
            }
        ],
    }
    selector = _object_selector(route)
    if selector is not None:
        hook["objectSelector"] = selector
    # A namespaceSelector on a cluster-scoped resource is ignored by the apiserver; leave it off to say so.
    if route.scope == "Namespaced":
        hook["namespaceSelector"] = _namespace_selector(reg)
    if route.mutating:
        hook["reinvocationPolicy"] = "IfNeeded"
    return hook


def webhook_configurations(reg: Registration, routes: tuple[WebhookRoute, ...] = ROUTES) -> tuple[dict[str, Any], dict[str, Any]]:
    """(MutatingWebhookConfiguration, ValidatingWebhookConfiguration) as plain dicts, ready to apply."""
    metadata = lambda name: {"name": name, "labels": dict(reg.labels), **({"annotations": dict(reg.annotations)} if reg.annotations else {})}  # noqa: E731
    mutating = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": metadata(reg.mutating_name),
        "webhooks": [_webhook(reg, r, reg.mutating_failure_policy or reg.failure_policy) for r in routes if r.mutating],
    }
    validating = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": metadata(reg.validating_name),
        "webhooks": [_webhook(reg, r, reg.failure_policy) for r in routes if not r.mutating],
    }
    return mutating, validating


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m trainguard.webhook.admission.registration",
        description="Print trainguard's Mutating/ValidatingWebhookConfigurations as YAML (what the Helm chart renders).",
    )
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--service", help="Service name in front of the webhook pods")
    target.add_argument("--url", help="https://host:port of a webhook outside the cluster")
    p.add_argument("--namespace", help="namespace of the Service (also excluded from admission)")
    p.add_argument("--port", type=int, default=443, help="Service port (default 443)")
    p.add_argument("--ca-bundle-file", help="PEM file to put in caBundle (default: none; the rotator injects it)")
    p.add_argument("--failure-policy", choices=["Fail", "Ignore"], default="Fail")
    p.add_argument("--mutating-failure-policy", choices=["Fail", "Ignore"], default=None)
    p.add_argument("--timeout-seconds", type=int, default=5)
    p.add_argument("--exclude-namespace", action="append", default=[], help="another namespace to skip (repeatable)")
    p.add_argument("--mutating-name", default="trainguard-mutating")
    p.add_argument("--validating-name", default="trainguard-validating")
    args = p.parse_args(argv)
    if args.service and not args.namespace:
        p.error("--service needs --namespace")
    ca = open(args.ca_bundle_file, "rb").read() if args.ca_bundle_file else None
    reg = Registration(
        service=ServiceRef(args.service, args.namespace, args.port) if args.service else None,
        url_base=args.url,
        ca_bundle=ca,
        failure_policy=args.failure_policy,
        mutating_failure_policy=args.mutating_failure_policy,
        timeout_seconds=args.timeout_seconds,
        own_namespace=args.namespace,
        excluded_namespaces=tuple(args.exclude_namespace),
        mutating_name=args.mutating_name,
        validating_name=args.validating_name,
    )
    try:
        docs = webhook_configurations(reg)
    except ValueError as e:
        p.error(str(e))
    yaml.safe_dump_all(docs, sys.stdout, sort_keys=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
