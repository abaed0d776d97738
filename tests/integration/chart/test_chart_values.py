"""The chart's values as the cluster admin's interface, checked with the real helm binary.

- ``helm template`` and ``helm lint`` work offline, without ``--kube-version``.
- A matrix of values (defaults, a policy list, the short-form ``defaultPolicy``, each runtime, external certificates,
  ServiceMonitor, no CRDs): the rendered objects are the ones the values ask for, and the apiserver accepts them
  (server-side dry run).
- A typo, a wrong type or a duplicate name fails ``helm template`` with a message naming the value.
- Every rendered runtime and policy passes trainguard's own admission rules (``trainguard.webhook.render``: the same pipeline
  the webhook runs), and a TrainJob on each runtime is admitted and built into a JobSet.
- Policies and runtimes are post-install hooks on the first install, admitted by the webhook once it serves (a bad
  one fails the install with the webhook's message); the first upgrade takes them over unchanged (one that would
  change them fails, naming the object), later upgrades patch them in place (same object), and uninstall removes
  them: with the real helm against a private control plane, where a release's webhook configurations touch no
  other test.
"""

from __future__ import annotations

import json
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import pytest
import yaml

if TYPE_CHECKING:
    from tests.conftest import Cluster

from trainguard.webhook.render import Denied, Doc, render as render_admission

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "charts" / "trainguard"

NOW = datetime(2026, 9, 1, 12, tzinfo=timezone.utc)
HOOK = "helm.sh/hook"
RUNTIMES = {  # values key -> ClusterTrainingRuntime name, framework label, mlPolicy key (as upstream's chart)
    "torchDistributed": ("torch-distributed", "torch", "torch"),
    "deepspeedDistributed": ("deepspeed-distributed", "deepspeed", "mpi"),
    "mlxDistributed": ("mlx-distributed", "mlx", "mpi"),
    "jaxDistributed": ("jax-distributed", "jax", "jax"),
    "xgboostDistributed": ("xgboost-distributed", "xgboost", "xgboost"),
}
GPU_POLICY = {
    "mode": "Enforce",
    "selector": {"namespaceSelector": {"matchLabels": {"trainguard.io/tier": "gpu"}}},
    "scheduling": {"kueue": {"queueName": "team-gpu", "priorityClass": "standard"}},
    "limits": {"maxGpusPerNode": 8, "maxTotalGpus": 64},
}
SHORT_FORM = {
    "enabled": True, "name": "gpu-teams", "mode": "Audit", "priority": 5,
    "namespaceSelector": {"matchLabels": {"trainguard.io/tier": "gpu"}},
    "kueue": {"queueName": "team-gpu", "allowedQueueNames": ["team-gpu-burst"], "priorityClass": "standard",
              "allowedPriorityClasses": ["low", "high"]},
    "topologyLevels": [{"nodeLabel": "kubernetes.io/hostname", "gpusPerDomain": 8},
                       {"nodeLabel": "nvidia.com/gpu.clique", "gpusPerDomain": 72}],
    "limits": {"maxGpusPerNode": 8, "maxTotalGpus": 512},
}


def helm_run(cluster: Cluster, *args: str, values: dict[str, Any] | None = None) -> subprocess.CompletedProcess[str]:
    """The real helm; ``values``, when given, is its standard input (``-f -``)."""
    return subprocess.run([str(cluster.bin_dir / "helm"), *args], capture_output=True, text=True, timeout=120,
                          input=None if values is None else yaml.safe_dump(values))


def template(cluster: Cluster, values: dict[str, Any], *extra: str, release: str = "tg",
             namespace: str = "tg-system", crds: bool = False) -> list[dict[str, Any]]:
    """``helm template`` with ``values`` as a values file and no ``--kube-version``: what a GitOps tool renders. The
    CRD templates (2 MB, H2's tests) are left out unless ``crds`` or the values say otherwise."""
    if not crds and "crds" not in values:
        values = values | {"crds": {"enabled": False}}
    proc = helm_run(cluster, "template", release, str(CHART), "--namespace", namespace, "-f", "-", *extra,
                    values=values)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.load_all(proc.stdout, Loader=yaml.CSafeLoader) if d]


def objects(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    """The rendered objects of ``kind`` by name, leaving out the pre-delete clean-up copies."""
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind
            and (d["metadata"].get("annotations") or {}).get(HOOK) != "pre-delete"}


def cleanups(docs: list[dict[str, Any]], kind: str) -> set[str]:
    """Names of the pre-delete hooks of ``kind``. Each is a stand-in the webhook always admits (a policy that sets
    nothing, a runtime labelled out of the webhook's review), so that an uninstall after a refused upgrade (whose
    hooks it runs) cannot be refused."""
    found = {d["metadata"]["name"]: d for d in docs if d["kind"] == kind
             and (d["metadata"].get("annotations") or {}).get(HOOK) == "pre-delete"}
    for d in found.values():
        assert d["metadata"]["annotations"]["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
        if kind == "TrainJobPolicy":
            assert d["spec"] == {"mode": "Audit"}
        else:
            assert d["metadata"]["labels"]["trainer.kubeflow.org/webhook-validation"] == "disabled"
    return set(found)


# --- offline render -------------------------------------------------------------------------------------------------


def test_template_and_lint_work_offline_without_kube_version(cluster: Cluster) -> None:
    """Helm's offline default is Kubernetes v1.20.0: a kubeVersion constraint in Chart.yaml would refuse it."""
    assert "kubeVersion" not in yaml.safe_load((CHART / "Chart.yaml").read_text())
    docs = template(cluster, {}, crds=True)
    assert {"Deployment", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} <= {d["kind"] for d in docs}
    lint = helm_run(cluster, "lint", "--strict", str(CHART))
    assert lint.returncode == 0 and "0 chart(s) failed" in lint.stdout, lint.stdout + lint.stderr


# --- the values matrix ----------------------------------------------------------------------------------------------


def expect_defaults(docs: list[dict[str, Any]]) -> None:
    assert objects(docs, "TrainJobPolicy") == {} and objects(docs, "ClusterTrainingRuntime") == {}
    assert objects(docs, "ServiceMonitor") == {}
    assert not [d for d in docs if d["kind"] == "Service" and d["metadata"]["name"].endswith("-metrics")]


def expect_policies(docs: list[dict[str, Any]]) -> None:
    policies = objects(docs, "TrainJobPolicy")
    assert set(policies) == {"gpu-teams", "audit-all"}
    assert policies["gpu-teams"]["spec"] == GPU_POLICY
    assert policies["gpu-teams"]["metadata"]["labels"]["team"] == "platform"
    assert policies["audit-all"]["spec"] == {"mode": "Audit", "limits": {"maxNodes": 16}}
    assert cleanups(docs, "TrainJobPolicy") == {"gpu-teams", "audit-all"}


def expect_short_form(docs: list[dict[str, Any]]) -> None:
    (policy,) = objects(docs, "TrainJobPolicy").values()
    assert policy["metadata"]["name"] == "gpu-teams"
    assert policy["spec"] == {
        "mode": "Audit", "priority": 5,
        "selector": {"namespaceSelector": SHORT_FORM["namespaceSelector"]},
        "scheduling": {"kueue": SHORT_FORM["kueue"]},
        "topology": {"levels": SHORT_FORM["topologyLevels"], "placement": "Required", "target": "Kueue"},
        "limits": SHORT_FORM["limits"],
    }


def expect_short_form_minimal(docs: list[dict[str, Any]]) -> None:
    """Unset parts of the short form are left out of the spec, not written as empty values."""
    (policy,) = objects(docs, "TrainJobPolicy").values()
    assert policy["metadata"]["name"] == "default"
    assert policy["spec"] == {"mode": "Enforce", "priority": 0, "limits": {"maxNodes": 4}}


def expect_runtime(key: str) -> Callable[[list[dict[str, Any]]], None]:
    name, framework, ml_key = RUNTIMES[key]

    def check(docs: list[dict[str, Any]]) -> None:
        runtimes = objects(docs, "ClusterTrainingRuntime")
        assert set(runtimes) == {name}
        rt = runtimes[name]
        assert rt["metadata"]["labels"]["trainer.kubeflow.org/framework"] == framework
        assert "trainer.kubeflow.org/webhook-validation" not in rt["metadata"]["labels"]  # validated, unlike upstream
        assert ml_key in rt["spec"]["mlPolicy"]
        for rjob in rt["spec"]["template"]["spec"]["replicatedJobs"]:
            (container,) = rjob["template"]["spec"]["template"]["spec"]["containers"]
            assert container["image"] == "registry.example.com/ml/custom:1.0"
            assert container["resources"] == {"limits": {"nvidia.com/gpu": 8}}
        assert cleanups(docs, "ClusterTrainingRuntime") == {name}
    return check


def expect_all_runtimes(docs: list[dict[str, Any]]) -> None:
    runtimes = objects(docs, "ClusterTrainingRuntime")
    assert set(runtimes) == {n for n, _, _ in RUNTIMES.values()}
    images = {n: rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
              ["containers"][0]["image"] for n, rt in runtimes.items()}
    assert images == {  # upstream's defaults; docker.io images without the registry, as upstream writes them
        "torch-distributed": "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime",
        "deepspeed-distributed": "ghcr.io/kubeflow/trainer/deepspeed-runtime:v2.3.0",
        "mlx-distributed": "ghcr.io/kubeflow/trainer/mlx-runtime:v2.3.0",
        "jax-distributed": "nvcr.io/nvidia/jax:25.10-py3",
        "xgboost-distributed": "ghcr.io/kubeflow/trainer/xgboost-runtime:v2.3.0",
    }
    assert all(rt["metadata"]["labels"]["org"] == "acme" for rt in runtimes.values())


def expect_external_certs(docs: list[dict[str, Any]]) -> None:
    (deployment,) = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("-webhook")]
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["certs"]["secret"]["secretName"] == "tg-cert"
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        (config,) = objects(docs, kind).values()
        assert config["metadata"]["annotations"] == {"cert-manager.io/inject-ca-from": "tg-system/tg-cert"}


def expect_service_monitor(docs: list[dict[str, Any]]) -> None:
    (monitor,) = objects(docs, "ServiceMonitor").values()
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert monitor["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "15s",
                                             "scrapeTimeout": "5s"}]
    services = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"
                and d["metadata"].get("labels", {}).get("trainguard.io/metrics") == "true"}
    assert set(services) == {"tg-trainguard-webhook-metrics", "tg-trainguard-controller-metrics"}
    # Each Service reaches its component's metrics port by the container port's name.
    deployments = {d["metadata"]["labels"]["app.kubernetes.io/component"]: d for d in docs if d["kind"] == "Deployment"}
    for name, svc in services.items():
        component = svc["spec"]["selector"]["app.kubernetes.io/component"]
        (container,) = deployments[component]["spec"]["template"]["spec"]["containers"]
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        (port,) = svc["spec"]["ports"]
        assert ports[port["targetPort"]] == port["port"], name
        assert monitor["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()


def expect_policy_rescan_every_ten_minutes(docs: list[dict[str, Any]]) -> None:
    from trainguard.controller.reconcile.main import seconds_or_never

    (controller,) = [d for d in docs if d["kind"] == "Deployment"
                     and d["metadata"]["labels"]["app.kubernetes.io/component"] == "controller"]
    (container,) = controller["spec"]["template"]["spec"]["containers"]
    (flag,) = [a for a in container["args"] if a.startswith("--policy-rescan-interval=")]
    assert seconds_or_never(flag.split("=", 1)[1]) == 600


def expect_no_crds(docs: list[dict[str, Any]]) -> None:
    assert not [d for d in docs if d["kind"] == "CustomResourceDefinition"]


def custom_runtime(key: str) -> dict[str, Any]:
    return {"runtimes": {key: {"enabled": True, "image": {"registry": "registry.example.com", "repository": "ml/custom",
                                                          "tag": "1.0"},
                               "resources": {"limits": {"nvidia.com/gpu": 8}}}}}


MATRIX = [
    pytest.param({}, expect_defaults, id="defaults"),
    pytest.param({"policies": [{"name": "gpu-teams", "labels": {"team": "platform"}, "spec": GPU_POLICY},
                               {"name": "audit-all", "spec": {"mode": "Audit", "limits": {"maxNodes": 16}}}]},
                 expect_policies, id="policies"),
    pytest.param({"defaultPolicy": SHORT_FORM}, expect_short_form, id="short-form-policy"),
    pytest.param({"defaultPolicy": {"enabled": True, "limits": {"maxNodes": 4}}}, expect_short_form_minimal,
                 id="short-form-minimal"),
    *[pytest.param(custom_runtime(key), expect_runtime(key), id=f"runtime-{key}") for key in RUNTIMES],
    pytest.param({"runtimes": {"defaultEnabled": True, "commonLabels": {"org": "acme"}}}, expect_all_runtimes,
                 id="all-runtimes"),
    pytest.param({"webhook": {"certificates": {"mode": "external", "existingSecret": "tg-cert",
                                               "caInjectionAnnotation": "cert-manager.io/inject-ca-from: tg-system/tg-cert"}}},
                 expect_external_certs, id="external-certificates"),
    pytest.param({"serviceMonitor": {"enabled": True, "interval": "15s", "scrapeTimeout": "5s",
                                     "labels": {"release": "prometheus"}}}, expect_service_monitor, id="servicemonitor"),
    pytest.param({"crds": {"enabled": False}}, expect_no_crds, id="crds-off"),
    pytest.param({"controller": {"policyRescanInterval": 600}}, expect_policy_rescan_every_ten_minutes,
                 id="policy-rescan-interval"),
]


@pytest.mark.parametrize("values, expect", MATRIX)
def test_values_render_the_objects_they_ask_for_and_the_apiserver_accepts_them(
    cluster: Cluster, namespace: str, values: dict[str, Any], expect: Callable[[list[dict[str, Any]]], None]
) -> None:
    # The CRD templates (2 MB) are rendered and dry-run with the defaults; the other cases leave them out.
    docs = template(cluster, values, namespace=namespace, crds=not values)
    expect(docs)
    # Server-side dry run in a namespace of this test: real schemas (CRDs included), nothing stored; the pre-delete
    # stand-ins too. The ServiceMonitor's CRD belongs to the Prometheus Operator, not installed here; its shape is
    # checked above.
    docs = [d for d in docs if d["kind"] != "ServiceMonitor"]
    out = cluster.kubectl("apply", "--server-side", "--force-conflicts", "--dry-run=server", "-f", "-",
                          input=yaml.safe_dump_all(docs), check=False, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("(server dry run)") == len(docs), out.stdout


# --- bad values -----------------------------------------------------------------------------------------------------


BAD_VALUES = [
    pytest.param({"webhook": {"failurPolicy": "Fail"}}, "at '/webhook': additional properties 'failurPolicy' not allowed",
                 id="typo"),
    pytest.param({"webhook": {"replicas": "two"}}, "at '/webhook/replicas': got string, want integer", id="wrong-type"),
    pytest.param({"webhook": {"failurePolicy": "Deny"}}, "at '/webhook/failurePolicy': value must be one of 'Fail', 'Ignore'",
                 id="bad-enum"),
    pytest.param({"runtimes": {"torchDistributed": {"enabeld": True}}},
                 "at '/runtimes/torchDistributed': additional properties 'enabeld' not allowed", id="runtime-typo"),
    pytest.param({"policies": [{"name": "Team_A", "spec": {}}]}, "at '/policies/0/name': 'Team_A' does not match pattern",
                 id="policy-name"),
    pytest.param({"policies": [{"name": "a"}]}, "at '/policies/0': missing property 'spec'", id="policy-without-spec"),
    pytest.param({"defaultPolicy": {"mode": "enforce"}}, "at '/defaultPolicy/mode': value must be one of 'Enforce', 'Audit'",
                 id="short-form-mode"),
    pytest.param({"defaultPolicy": {"kueue": {"allowedQueueNames": "team-b"}}},
                 "at '/defaultPolicy/kueue/allowedQueueNames': got string, want array", id="short-form-queues"),
    pytest.param({"defaultPolicy": {"kueue": {"allowedPriorityClasses": ["low", "low"]}}},
                 "at '/defaultPolicy/kueue/allowedPriorityClasses': items at 0 and 1 are equal",
                 id="short-form-priority-classes"),
    pytest.param({"policies": [{"name": "default", "spec": {}}], "defaultPolicy": {"enabled": True}},
                 'TrainJobPolicy "default" is defined twice', id="duplicate-policy"),
    pytest.param({"controller": {"policyRescanInterval": -1}},
                 "at '/controller/policyRescanInterval': minimum: got -1, want 0", id="policy-rescan-interval"),
    pytest.param({"serviceMonitor": {"interval": "often"}}, "at '/serviceMonitor/interval': 'often' does not match pattern",
                 id="servicemonitor-interval"),
]


@pytest.mark.parametrize("values, message", BAD_VALUES)
def test_bad_values_fail_template_naming_the_value(cluster: Cluster, values: dict[str, Any], message: str) -> None:
    proc = helm_run(cluster, "template", "tg", str(CHART), "-f", "-", values=values)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr


# --- trainguard's own rules -----------------------------------------------------------------------------------------


def admission_docs(docs: list[dict[str, Any]], *extra: dict[str, Any]) -> list[Doc]:
    kept = [d for d in docs if d["kind"] in ("ClusterTrainingRuntime", "TrainJobPolicy")
            and (d["metadata"].get("annotations") or {}).get(HOOK) != "pre-delete"]
    return [Doc(d, f"chart:{d['kind']}/{d['metadata']['name']}") for d in kept + list(extra)]


def trainjob(name: str, runtime: str, namespace: str = "team-a", **trainer: Any) -> dict[str, Any]:
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"runtimeRef": {"name": runtime}, **({"trainer": trainer} if trainer else {})}}


@pytest.mark.parametrize("values", [
    pytest.param({"runtimes": {"defaultEnabled": True}}, id="upstream-defaults"),
    pytest.param({"runtimes": {k: custom_runtime(k)["runtimes"][k] for k in RUNTIMES}}, id="overridden"),
])
def test_every_rendered_runtime_passes_trainguards_runtime_rules_and_builds(cluster: Cluster, values: dict[str, Any]) -> None:
    """The chart's runtimes are validated like any runtime (no webhook-validation opt-out label): each must pass the
    webhook's ClusterTrainingRuntime rules, and a TrainJob on it must be admitted and built into a JobSet."""
    docs = template(cluster, values)
    runtimes = objects(docs, "ClusterTrainingRuntime")
    assert len(runtimes) == len(RUNTIMES)
    for name in runtimes:
        result = render_admission(admission_docs(docs, trainjob(f"job-{name}", name, numNodes=2)), now=NOW)
        kinds = [o["kind"] for o in result.objects]
        assert kinds[0] == "TrainJob" and "JobSet" in kinds, (name, kinds)
        (jobset,) = [o for o in result.objects if o["kind"] == "JobSet"]
        assert {r["name"] for r in jobset["spec"]["replicatedJobs"]} >= {"node"}, name


def test_rendered_policies_are_what_the_webhook_enforces(cluster: Cluster) -> None:
    """The short form and the list render policies that pass the webhook's policy rules and act: a TrainJob in a
    selected namespace gets the policy's Kueue labels, one over the limit is denied naming the field."""
    docs = template(cluster, {"defaultPolicy": SHORT_FORM | {"mode": "Enforce"},
                              "runtimes": {"torchDistributed": {"enabled": True}}})
    namespace = {"apiVersion": "v1", "kind": "Namespace",
                 "metadata": {"name": "team-a", "labels": {"trainguard.io/tier": "gpu"}}}
    ok = render_admission(admission_docs(docs, namespace, trainjob(
        "fits", "torch-distributed", numNodes=2, resourcesPerNode={"limits": {"nvidia.com/gpu": 8}})), now=NOW)
    admitted = ok.objects[0]
    assert admitted["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-gpu"
    assert admitted["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "standard"
    # The short form's alternatives: a listed queue and priority class are kept, another queue is denied.
    burst = trainjob("burst", "torch-distributed", numNodes=1, resourcesPerNode={"limits": {"nvidia.com/gpu": 8}})
    burst["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "team-gpu-burst", "kueue.x-k8s.io/priority-class": "high"}
    labels = render_admission(admission_docs(docs, namespace, burst), now=NOW).objects[0]["metadata"]["labels"]
    assert labels["kueue.x-k8s.io/queue-name"] == "team-gpu-burst" and labels["kueue.x-k8s.io/priority-class"] == "high"
    burst["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "team-cpu"
    with pytest.raises(Denied, match=r"team-cpu(.|\n)*team-gpu-burst"):
        render_admission(admission_docs(docs, namespace, burst), now=NOW)
    with pytest.raises(Denied, match=r"maxGpusPerNode|GPUs per node"):
        render_admission(admission_docs(docs, namespace, trainjob(
            "too-wide", "torch-distributed", numNodes=1, resourcesPerNode={"limits": {"nvidia.com/gpu": 16}})), now=NOW)


def test_a_policy_the_webhook_refuses_renders_but_is_denied_by_the_webhooks_rules(cluster: Cluster) -> None:
    """The chart does not judge policies (its schema checks the short form's shape only): the webhook does, at
    install. Here its rules, in process; the install itself is below."""
    docs = template(cluster, {"defaultPolicy": {"enabled": True, "limits": {"maxGpusPerNode": 16, "maxTotalGpus": 8}}})
    with pytest.raises(Denied, match=r"spec\.limits\.maxGpusPerNode"):
        render_admission(admission_docs(docs), now=NOW)


# --- install, upgrade, uninstall: when policies and runtimes are created ----------------------------------------------


def helm_with_webhook(release: Any, verb: str, values: dict[str, Any], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``helm <verb> --wait`` as in a cluster: while helm waits, the chart's webhook comes up (a host process behind
    the chart's Service) and the Deployments are reported rolled out (no controller replica here); then helm runs
    the hooks. (chart_harness's ``install_and_wait`` does this for an install with every replica.)"""
    import time

    values_file = tmp_path / f"values-{verb}-{time.monotonic_ns()}.yaml"
    values_file.write_text(yaml.safe_dump(values))
    c = release.c
    args = [str(c.bin_dir / "helm"), "--kubeconfig", c.kubeconfig, verb, release.name, str(CHART), "-n",
            release.namespace, "--create-namespace", "--wait", "--timeout", "3m", "-f", str(values_file)]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while c.get("deployment", f"{release.name}-trainguard-webhook", "-n", release.namespace) is None:
            assert proc.poll() is None, f"helm {verb} ended before creating the webhook:\n{proc.communicate()[1]}"
            assert time.monotonic() < deadline, "no webhook Deployment"
            time.sleep(0.3)
        if not release.webhooks:
            release.start_webhook()
        # Until helm is done: an upgrade may patch a Deployment (a new generation) after this first look.
        while proc.poll() is None and time.monotonic() < deadline + 120:
            for component in ("webhook", "controller"):
                release.report_rollout(component)
            time.sleep(1)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def test_values_policies_and_runtimes_are_created_once_the_webhook_serves_and_go_with_the_release(tmp_path: Path) -> None:
    from tests.conftest import upstream_crds, wait_for_crds
    from tests.integration.chart.chart_harness import Release, chart_control_plane

    good = {"crds": {"enabled": True}, "controller": {"replicas": 0}, "webhook": {"replicas": 1},
            "defaultPolicy": {"enabled": True, "name": "gpu-teams",
                              "namespaceSelector": {"matchLabels": {"trainguard.io/tier": "gpu"}},
                              "limits": {"maxGpusPerNode": 8}},
            "runtimes": {"torchDistributed": {"enabled": True}}}
    with chart_control_plane() as c:
        # The cluster runs JobSet, whose objects the webhook watches (its CRD is not this chart's by default).
        c.kubectl("apply", "--server-side", *[a for p in upstream_crds(c.bin_dir, "jobset") for a in ("-f", str(p))])
        wait_for_crds(c)
        release = Release(c, "tg", "trainguard-system", tmp_path)
        try:
            # Install: the policy and the runtime are post-install hooks, admitted by the webhook once it serves.
            proc = helm_with_webhook(release, "install", good, tmp_path)
            assert proc.returncode == 0, proc.stderr
            policy = c.get("trainjobpolicy", "gpu-teams")
            runtime = c.get("clustertrainingruntime", "torch-distributed")
            assert policy is not None and runtime is not None
            assert policy["metadata"]["annotations"]["helm.sh/hook"] == "post-install,post-rollback"
            (webhook,) = release.webhooks
            health = webhook.ports["health"][1]
            metrics = urllib_get(f"http://127.0.0.1:{health}/metrics")
            assert 'webhook="validator.trainjobpolicy.trainguard.io"' in metrics
            assert 'webhook="validator.clustertrainingruntime.trainer.kubeflow.org"' in metrics

            # The policy is enforced through the chart's Service.
            c.kubectl("create", "namespace", "team-a")
            c.kubectl("label", "namespace", "team-a", "trainguard.io/tier=gpu")
            wide = trainjob("wide", "torch-distributed", numNodes=1,
                            resourcesPerNode={"limits": {"nvidia.com/gpu": 16}})
            out = c.kubectl("apply", "-f", "-", input=json.dumps(wide), check=False)
            assert out.returncode != 0 and 'denied the request' in out.stderr and "maxGpusPerNode" in out.stderr, out.stderr

            # The first upgrade takes the install's objects over, and Helm would apply no change to them then: an
            # upgrade that changes one fails before touching anything, naming it.
            changed = good | {"defaultPolicy": good["defaultPolicy"] | {"limits": {"maxGpusPerNode": 4}}}
            proc = helm_with_webhook(release, "upgrade", changed, tmp_path)
            assert proc.returncode != 0
            assert ('TrainJobPolicy "gpu-teams" was created by this release\'s install and this upgrade takes it over'
                    in proc.stderr), proc.stderr
            assert c.get("trainjobpolicy", "gpu-teams")["spec"]["limits"] == {"maxGpusPerNode": 8}

            # Upgrade with the objects as installed: the same objects (no delete and recreate) become release
            # resources; from then on a change is a patch in place.
            proc = helm_with_webhook(release, "upgrade", good, tmp_path)
            assert proc.returncode == 0, proc.stderr
            manifest = {(d["kind"], d["metadata"]["name"]) for d in c.manifest("tg", "trainguard-system")}
            assert {("TrainJobPolicy", "gpu-teams"), ("ClusterTrainingRuntime", "torch-distributed")} <= manifest
            proc = helm_with_webhook(release, "upgrade", changed, tmp_path)
            assert proc.returncode == 0, proc.stderr
            after = c.get("trainjobpolicy", "gpu-teams")
            assert after["metadata"]["uid"] == policy["metadata"]["uid"]
            assert after["spec"]["limits"] == {"maxGpusPerNode": 4}
            assert c.get("clustertrainingruntime", "torch-distributed")["metadata"]["uid"] == runtime["metadata"]["uid"]
            # A change the webhook refuses fails the upgrade with its message and changes nothing.
            refused = good | {"defaultPolicy": good["defaultPolicy"] | {"limits": {"maxGpusPerNode": 16,
                                                                                    "maxTotalGpus": 8}}}
            proc = helm_with_webhook(release, "upgrade", refused, tmp_path)
            assert proc.returncode != 0
            assert ('admission webhook "validator.trainjobpolicy.trainguard.io" denied the request: '
                    "spec.limits.maxGpusPerNode") in proc.stderr, proc.stderr
            assert c.get("trainjobpolicy", "gpu-teams")["spec"]["limits"] == {"maxGpusPerNode": 4}

            # Uninstall: gone with the release, as are the webhook configurations.
            c.helm("uninstall", "tg", "-n", "trainguard-system", "--wait")
            assert c.get("trainjobpolicy", "gpu-teams") is None
            assert c.get("clustertrainingruntime", "torch-distributed") is None
            assert json.loads(c.kubectl("get", "validatingwebhookconfigurations", "-o", "json").stdout)["items"] == []
            release.stop_all()

            # A policy the webhook refuses fails the install with the webhook's message.
            bad = good | {"defaultPolicy": good["defaultPolicy"] | {"limits": {"maxGpusPerNode": 16, "maxTotalGpus": 8}}}
            release = Release(c, "tg", "trainguard-system", tmp_path)
            proc = helm_with_webhook(release, "install", bad, tmp_path)
            assert proc.returncode != 0
            assert "failed post-install" in proc.stderr, proc.stderr
            assert ('admission webhook "validator.trainjobpolicy.trainguard.io" denied the request: '
                    "spec.limits.maxGpusPerNode") in proc.stderr, proc.stderr
            assert c.get("trainjobpolicy", "gpu-teams") is None
        finally:
            release.stop_all()


def urllib_get(url: str) -> str:
    import urllib.request

    with urllib.request.urlopen(url, timeout=5) as resp:
        return resp.read().decode()
