"""The ValidatingAdmissionPolicy that confines a dataset cache agent's identity to its own Pod's report annotations.

Each DatasetCache's agents run as their own ServiceAccount (``agent_name()``: ``trainguard-cache-<cache>``) bound to a
Role allowing ``patch`` on pods in the cache's namespace, because an agent reports residency by patching annotations
on its own Pod and RBAC cannot name a generated Pod. On its own that Role lets anyone who can borrow the identity
patch *any* Pod of the namespace: remove Kueue's or trainguard's scheduling gates, swap a running container's image
past ``allowedImagePrefixes``. A namespace user can borrow it two ways:

* a token without a Pod: a Secret of type ``kubernetes.io/service-account-token`` annotated with the agent's
  ServiceAccount (users may create Secrets; the token controller fills it), or a TokenRequest;
* a Pod running as the agent: ``serviceAccountName`` in a TrainJob's runtimePatch / podTemplateOverride or in a
  TrainingRuntime the user writes; its projected token carries the agent's rights.

This policy is enforced by the apiserver itself (no webhook, so no availability to attack) for every request on
pods whose user is ``system:serviceaccount:<namespace>:trainguard-cache-*``. Such a request is allowed only if it is
an UPDATE (patch) of the main resource, its token is bound to a Pod (``authentication.kubernetes.io/pod-name`` and
``pod-uid`` in ``userInfo.extra``, which only Pod-bound tokens carry) and that Pod is the one being patched (same
name, UID and namespace), and nothing changes but the agent's report annotations (``REPORT_ANNOTATIONS``, each a
well-formed value): spec, labels, finalizers, ownerReferences and every other annotation stay as they were.

So a token without a Pod can do nothing, and a trainer Pod running as the agent can only write three numbers onto
itself (which ``compute_status`` ignores: it counts only Ready pods carrying the cache's agent labels). The Helm
chart ships the objects (``charts/trainguard/templates/cache-agent-admission-policy.yaml``, generated from
``agent_admission_policy()`` by ``python -m trainguard.controller.reconcile.cache_agent_policy``; a test renders and compares); tests
that run the controller without the chart create the same objects.

Upstream Kubeflow Trainer v2.3 has no dataset cache, so this is no difference from upstream. Requires Kubernetes
>= 1.30 (ValidatingAdmissionPolicy GA), as the chart does.

usage: python -m trainguard.controller.reconcile.cache_agent_policy [--check]   (writes or checks the chart template)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from trainguard.cache.report import ANNOTATION_BYTES_RESIDENT, ANNOTATION_SHARDS, ANNOTATION_WARM
from trainguard.controller.reconcile.cache_daemonset import agent_name

POLICY_NAME = "trainguard-cache-agent-identity"
# The agent ServiceAccounts' naming convention (agent_name()), as an RE2 pattern on the authenticated username.
AGENT_USERNAME_PATTERN = "^system:serviceaccount:[^:]+:" + agent_name("").rstrip("-") + "-[^:]+$"
POD_NAME_EXTRA = "authentication.kubernetes.io/pod-name"
POD_UID_EXTRA = "authentication.kubernetes.io/pod-uid"
# The annotations the agent reports (``trainguard.cache.report``) and the values it may write.
REPORT_ANNOTATIONS = {
    ANNOTATION_BYTES_RESIDENT: "^[0-9]{1,20}$",
    ANNOTATION_SHARDS: "^[0-9]{1,20}$",
    ANNOTATION_WARM: "^(true|false)$",
}
CHART_TEMPLATE = Path(__file__).resolve().parents[2] / "charts" / "trainguard" / "templates" / (
    "cache-agent-admission-policy.yaml"
)


def _cel_string(text: str) -> str:
    assert "'" not in text and "\\" not in text, text  # constants only; nothing to escape
    return f"'{text}'"


def _validations() -> list[dict]:
    keys = "[" + ", ".join(_cel_string(k) for k in REPORT_ANNOTATIONS) + "]"
    value_checks = " && ".join(
        f"(!({_cel_string(k)} in variables.annotations) || variables.annotations[{_cel_string(k)}].matches("
        f"{_cel_string(pattern)}))"
        for k, pattern in REPORT_ANNOTATIONS.items()
    )

    # CREATE and DELETE have no object or no oldObject; the first rule denies them, the others skip them.
    both = "object == null || oldObject == null || "

    def unchanged(field: str, empty: str) -> str:
        return f"object.metadata.?{field}.orValue({empty}) == oldObject.metadata.?{field}.orValue({empty})"

    return [
        {
            "expression": "request.operation == 'UPDATE' && request.?subResource.orValue('') == ''",
            "messageExpression": (
                "'dataset cache agent ' + request.userInfo.username + ' may only patch its own Pod, not ' + "
                "request.operation + ' pods' + (request.?subResource.orValue('') == '' ? '' : '/' + request.subResource)"
            ),
            "reason": "Forbidden",
        },
        {
            "expression": "variables.boundPodName != '' && variables.boundPodUID != ''",
            "messageExpression": (
                "'dataset cache agent ' + request.userInfo.username + ': its token is not bound to a Pod "
                "(no " + POD_NAME_EXTRA + " claim); only the agent Pod itself may report'"
            ),
            "reason": "Forbidden",
        },
        {
            "expression": both + (
                "variables.boundPodName == request.name && variables.boundPodUID == oldObject.metadata.uid && "
                "request.userInfo.username.split(':')[2] == request.namespace"
            ),
            "messageExpression": (
                "'dataset cache agent ' + request.userInfo.username + ' running in Pod ' + variables.boundPodName"
                " + ' may not patch Pod ' + request.namespace + '/' + request.name"
            ),
            "reason": "Forbidden",
        },
        {
            "expression": both + "object.spec == oldObject.spec",
            "message": "a dataset cache agent may not change a Pod's spec (only its report annotations)",
            "reason": "Forbidden",
        },
        {
            "expression": both + " && ".join(
                unchanged(f, e)
                for f, e in (("labels", "{}"), ("finalizers", "[]"), ("ownerReferences", "[]"))
            ),
            "message": (
                "a dataset cache agent may not change a Pod's metadata.labels, metadata.finalizers or "
                "metadata.ownerReferences (only its report annotations)"
            ),
            "reason": "Forbidden",
        },
        {
            "expression": (
                f"variables.annotations.all(k, k in {keys} || "
                "(k in variables.oldAnnotations && variables.oldAnnotations[k] == variables.annotations[k])) && "
                f"variables.oldAnnotations.all(k, k in {keys} || k in variables.annotations)"
            ),
            "message": (
                "a dataset cache agent may change only the metadata.annotations "
                + ", ".join(REPORT_ANNOTATIONS) + " of its Pod"
            ),
            "reason": "Forbidden",
        },
        {
            "expression": value_checks,
            "message": (
                "metadata.annotations: " + ", ".join(f"{k} must match {p}" for k, p in REPORT_ANNOTATIONS.items())
            ),
            "reason": "Invalid",
        },
    ]


def agent_admission_policy(
    name: str = POLICY_NAME, *, labels: dict[str, str] | None = None, namespace_selector: dict | None = None
) -> list[dict]:
    """The ValidatingAdmissionPolicy and its binding (cluster-scoped; ``name`` names both).

    ``namespace_selector`` narrows where the binding applies (tests scope it to their namespace so parallel
    sessions on one apiserver do not see each other's policies); the chart applies it everywhere.
    """
    meta: dict = {"name": name}
    if labels:
        meta["labels"] = dict(labels)
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": dict(meta),
        "spec": {
            # A broken expression must not open the hole it closes.
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE", "DELETE"],
                        "resources": ["pods", "pods/*"],
                    }
                ],
                "matchPolicy": "Equivalent",
            },
            "matchConditions": [
                {
                    "name": "dataset-cache-agent",
                    "expression": f"request.userInfo.username.matches({_cel_string(AGENT_USERNAME_PATTERN)})",
                }
            ],
            "variables": [
                {
                    "name": "boundPodName",
                    "expression": (
                        f"has(request.userInfo.extra) && {_cel_string(POD_NAME_EXTRA)} in request.userInfo.extra && "
                        f"size(request.userInfo.extra[{_cel_string(POD_NAME_EXTRA)}]) == 1 ? "
                        f"request.userInfo.extra[{_cel_string(POD_NAME_EXTRA)}][0] : ''"
                    ),
                },
                {
                    "name": "boundPodUID",
                    "expression": (
                        f"has(request.userInfo.extra) && {_cel_string(POD_UID_EXTRA)} in request.userInfo.extra && "
                        f"size(request.userInfo.extra[{_cel_string(POD_UID_EXTRA)}]) == 1 ? "
                        f"request.userInfo.extra[{_cel_string(POD_UID_EXTRA)}][0] : ''"
                    ),
                },
                {
                    "name": "annotations",
                    "expression": "object == null ? {} : object.metadata.?annotations.orValue({})",
                },
                {
                    "name": "oldAnnotations",
                    "expression": "oldObject == null ? {} : oldObject.metadata.?annotations.orValue({})",
                },
            ],
            "validations": _validations(),
        },
    }
    binding_spec: dict = {"policyName": name, "validationActions": ["Deny"]}
    if namespace_selector is not None:
        binding_spec["matchResources"] = {"namespaceSelector": namespace_selector}
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": dict(meta),
        "spec": binding_spec,
    }
    return [policy, binding]


# The chart's template is the function's output with these placeholders replaced by Helm expressions.
_NAME = "@@NAME@@"
_LABELS = "@@LABELS@@"


def chart_template() -> str:
    docs = agent_admission_policy(_NAME, labels={_LABELS: "x"})
    text = yaml.safe_dump_all(docs, sort_keys=False, width=1_000_000)
    text = text.replace(_NAME, '{{ include "trainguard.fullname" . }}-cache-agent-identity')
    text = text.replace(f"    '{_LABELS}': x\n", '{{- include "trainguard.labels" . | nindent 4 }}\n')
    header = (
        "# GENERATED by `python -m trainguard.controller.reconcile.cache_agent_policy` from trainguard.controller.reconcile.cache_agent_policy; do not edit.\n"
        "# Confines each dataset cache agent's ServiceAccount to patching its own Pod's report annotations.\n"
    )
    return header + text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the chart template is stale")
    args = parser.parse_args(argv)
    want = chart_template()
    if args.check:
        if not CHART_TEMPLATE.exists() or CHART_TEMPLATE.read_text() != want:
            print(f"{CHART_TEMPLATE} is stale: run python -m trainguard.controller.reconcile.cache_agent_policy", file=sys.stderr)
            return 1
        return 0
    CHART_TEMPLATE.write_text(want)
    return 0


if __name__ == "__main__":
    sys.exit(main())
