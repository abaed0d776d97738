"""The webhook configuration objects: one function for chart, tests and users; checked field by field."""

from __future__ import annotations

import base64
import subprocess
import sys

import pytest
import yaml

from trainguard.webhook.admission.registration import Registration, ServiceRef, main, webhook_configurations
from trainguard.webhook.admission.routes import ROUTES

SVC = Registration(service=ServiceRef("trainguard-webhook", "trainguard-system"))


def test_every_route_is_registered_once_in_the_right_configuration() -> None:
    mutating, validating = webhook_configurations(SVC)
    assert [w["name"] for w in mutating["webhooks"]] == [r.name for r in ROUTES if r.mutating]
    assert [w["name"] for w in validating["webhooks"]] == [r.name for r in ROUTES if not r.mutating]
    paths = [w["clientConfig"]["service"]["path"] for w in mutating["webhooks"] + validating["webhooks"]]
    assert sorted(paths) == sorted(r.path for r in ROUTES)


def test_fixed_choices() -> None:
    mutating, validating = webhook_configurations(SVC)
    for w in mutating["webhooks"] + validating["webhooks"]:
        assert w["sideEffects"] == "None"
        assert w["admissionReviewVersions"] == ["v1"]
        assert w["timeoutSeconds"] == 5
        assert w["failurePolicy"] == "Fail"
        assert w["rules"][0]["operations"] == ["CREATE", "UPDATE"]
    assert mutating["webhooks"][0]["reinvocationPolicy"] == "IfNeeded"
    assert all("reinvocationPolicy" not in w for w in validating["webhooks"])


def test_namespace_selector_excludes_system_and_own_namespace_on_namespaced_webhooks() -> None:
    mutating, validating = webhook_configurations(Registration(service=ServiceRef("s", "tg"), excluded_namespaces=("infra",)))
    by_name = {w["name"]: w for w in mutating["webhooks"] + validating["webhooks"]}
    expr = by_name["validator.trainjob.trainer.kubeflow.org"]["namespaceSelector"]["matchExpressions"]
    assert expr == [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "kube-node-lease", "tg", "infra"]},
                    {"key": "trainguard.io/webhook", "operator": "NotIn", "values": ["disabled"]}]
    assert "namespaceSelector" not in by_name["validator.clustertrainingruntime.trainer.kubeflow.org"]


# Issue 10: exemptions are an admin's decision (a Namespace label, a policy's selector), never a label on the object
# being judged. Only ClusterTrainingRuntimes, which only cluster admins write, keep upstream's opt-out label.
OPT_OUT_CASES = [
    ("defaulter.trainjob.trainer.kubeflow.org", None),
    ("validator.trainjob.trainer.kubeflow.org", None),
    ("validator.trainingruntime.trainer.kubeflow.org", None),
    ("validator.datasetcache.trainguard.io", None),
    ("validator.trainjobpolicy.trainguard.io", None),
    ("validator.clustertrainingruntime.trainer.kubeflow.org",
     {"matchExpressions": [{"key": "trainer.kubeflow.org/webhook-validation", "operator": "NotIn", "values": ["disabled"]}]}),
]


@pytest.mark.parametrize(("name", "object_selector"), OPT_OUT_CASES, ids=[c[0] for c in OPT_OUT_CASES])
def test_no_object_can_opt_itself_out_except_admin_written_cluster_runtimes(name: str, object_selector) -> None:
    mutating, validating = webhook_configurations(SVC)
    hook = next(w for w in mutating["webhooks"] + validating["webhooks"] if w["name"] == name)
    assert hook.get("objectSelector") == object_selector


def test_url_mode_with_ca_bundle_and_failure_policies() -> None:
    reg = Registration(url_base="https://127.0.0.1:9443/", ca_bundle=b"PEM", failure_policy="Ignore", mutating_failure_policy="Fail", timeout_seconds=2)
    mutating, validating = webhook_configurations(reg)
    m = mutating["webhooks"][0]
    assert m["clientConfig"] == {"url": "https://127.0.0.1:9443/mutate-trainer-kubeflow-org-v1alpha1-trainjob", "caBundle": base64.b64encode(b"PEM").decode()}
    assert m["failurePolicy"] == "Fail" and {w["failurePolicy"] for w in validating["webhooks"]} == {"Ignore"}
    assert m["timeoutSeconds"] == 2


@pytest.mark.parametrize(
    "reg",
    [
        Registration(),
        Registration(service=ServiceRef("s", "n"), url_base="https://x"),
        Registration(url_base="http://plain:80"),
        Registration(service=ServiceRef("s", "n"), timeout_seconds=31),
    ],
    ids=["no-target", "both-targets", "http-url", "timeout-out-of-range"],
)
def test_bad_registrations_are_refused(reg: Registration) -> None:
    with pytest.raises(ValueError):
        webhook_configurations(reg)


def test_command_line_prints_the_same_objects(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--service", "trainguard-webhook", "--namespace", "trainguard-system"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert docs == list(webhook_configurations(Registration(service=ServiceRef("trainguard-webhook", "trainguard-system"), own_namespace="trainguard-system")))


def test_module_is_runnable() -> None:
    out = subprocess.run([sys.executable, "-m", "trainguard.webhook.admission.registration", "--url", "https://127.0.0.1:9443"], capture_output=True, text=True, check=True)
    kinds = [d["kind"] for d in yaml.safe_load_all(out.stdout)]
    assert kinds == ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"]
