"""The chart's cache-agent ValidatingAdmissionPolicy (templates/cache-agent-admission-policy.yaml), checked with the
real helm binary and the real apiserver: ``helm template`` renders exactly ``agent_admission_policy()`` under the
release's name and labels, the apiserver accepts it, and the rendered objects, once installed (their binding
narrowed to the test's namespace so other tests of the session are untouched), enforce: a dataset cache agent's
token bound to no Pod is refused, the same agent's Pod-bound token writes its own report.
tests/security/test_cache_agent_identity.py performs every attack; this file proves the chart ships the same policy.
"""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.rest import ApiException

from trainguard.controller.reconcile.cache_agent_policy import agent_admission_policy
from trainguard.controller.reconcile.cache_daemonset import ANNOTATION_BYTES_RESIDENT, agent_name, build_agent_rbac
from tests.integration.reconcile.reconcile_harness import wait_for

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "charts" / "trainguard"
KUBE_VERSION = "1.35.4"
KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")


def rendered_policy(cluster: Any, release: str, namespace: str) -> list[dict]:
    proc = subprocess.run([str(cluster.bin_dir / "helm"), "template", release, str(CHART), "--namespace", namespace,
                           "--kube-version", KUBE_VERSION], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    # The chart's other policy (the controller's, test_controller_policy.py) is not this one.
    docs = [d for d in yaml.safe_load_all(proc.stdout)
            if d and d["kind"] in KINDS and d["metadata"]["name"].endswith("-cache-agent-identity")]
    return sorted(docs, key=lambda d: KINDS.index(d["kind"]))


def test_rendered_policy_equals_the_function(cluster: Any) -> None:
    for release, fullname in (("tg", "tg-trainguard"), ("trainguard", "trainguard")):
        docs = rendered_policy(cluster, release, "tg-system")
        labels = docs[0]["metadata"]["labels"]
        assert labels["app.kubernetes.io/instance"] == release
        assert docs == agent_admission_policy(f"{fullname}-cache-agent-identity", labels=labels)


def test_rendered_policy_is_accepted_and_enforced(cluster: Any, namespace: str, tmp_path: Path) -> None:
    rendered = rendered_policy(cluster, "tg", namespace)
    out = cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump_all(rendered))
    assert out.stdout.count("(server dry run)") == 2

    # Installed for real, bound to this namespace only, under a name of its own.
    docs = copy.deepcopy(rendered)
    name = f"{namespace}-agent-identity"
    for doc in docs:
        doc["metadata"]["name"] = name
    docs[1]["spec"]["policyName"] = name
    docs[1]["spec"]["matchResources"] = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}}
    rbac = build_agent_rbac({"apiVersion": "trainguard.io/v1alpha1", "kind": "DatasetCache",
                             "metadata": {"name": "imagenet", "namespace": namespace, "uid": "0"},
                             "spec": {"source": {"hostPath": {"path": "/data"}, "shards": "*"}, "memoryBudget": "1Gi"}})
    for doc in rbac:
        doc["metadata"].pop("ownerReferences")
    sa = agent_name("imagenet")
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(rbac))
    cluster.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "agent"},
        "spec": {"serviceAccountName": sa, "containers": [{"name": "agent", "image": "trainguard:0.1.0"}]}}))
    uid = cluster.kubectl("get", "pod", "agent", "-n", namespace, "-o", "jsonpath={.metadata.uid}").stdout

    def core_as(token_args: tuple[str, ...], file: str) -> k8s.CoreV1Api:
        token = cluster.kubectl("create", "token", sa, "-n", namespace, *token_args).stdout.strip()
        admin = yaml.safe_load(Path(cluster.kubeconfig).read_text())
        path = tmp_path / file
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "clusters": [{"name": "c", "cluster": admin["clusters"][0]["cluster"]}],
            "users": [{"name": "u", "user": {"token": token}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}], "current-context": "c"}))
        configuration = k8s.Configuration()
        k8s_config.load_kube_config(config_file=str(path), client_configuration=configuration)
        return k8s.CoreV1Api(k8s.ApiClient(configuration))

    unbound = core_as((), "unbound.kubeconfig")
    own = core_as(("--bound-object-kind", "Pod", "--bound-object-name", "agent", "--bound-object-uid", uid),
                  "bound.kubeconfig")
    report = {"metadata": {"annotations": {ANNOTATION_BYTES_RESIDENT: "42"}}}

    def status(api: k8s.CoreV1Api, **kw: Any) -> int:
        try:
            api.patch_namespaced_pod("agent", namespace, report, **kw)
            return 200
        except ApiException as err:
            return err.status

    assert status(unbound, dry_run="All") == 200  # RBAC alone lets a borrowed token through
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))
    try:
        wait_for("the chart's policy to be enforced", lambda: status(unbound, dry_run="All") == 403, timeout=30)
        assert status(unbound) == 403
        assert status(own) == 200
        got = cluster.kubectl("get", "pod", "agent", "-n", namespace, "-o", "json").stdout
        assert json.loads(got)["metadata"]["annotations"] == {ANNOTATION_BYTES_RESIDENT: "42"}
    finally:
        for doc in reversed(docs):
            cluster.kubectl("delete", doc["kind"].lower(), name, "--ignore-not-found")
