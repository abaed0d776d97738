"""The Helm chart, checked with the real helm binary and the real apiserver.

- It lints, and `helm template` renders webhook configurations equal to ``webhook_configurations()`` for the same
  values (the chart's template is generated from that one function; this proves the generation is faithful).
- Security by default: non-root, read-only root filesystem, no capabilities, no wildcard or cluster-admin RBAC.
- Least privilege that is still enough: the rendered RBAC is installed for real, the controller runs with a token of
  its own ServiceAccount (not the admin certificate) and reconciles a TrainJob into a JobSet, and `kubectl auth
  can-i` confirms what it must not do.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

if TYPE_CHECKING:
    from tests.conftest import Cluster

from trainguard.webhook.admission.registration import Registration, ServiceRef, webhook_configurations

from tests.integration.reconcile.reconcile_harness import ControllerProcess, wait_for

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "charts" / "trainguard"
KUBE_VERSION = "1.35.4"


def helm(cluster: Cluster, *args: str) -> str:
    proc = subprocess.run([str(cluster.bin_dir / "helm"), *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"helm {' '.join(args)} failed:\n{proc.stderr}"
    return proc.stdout


def render(cluster: Cluster, release: str, namespace: str, *sets: str) -> list[dict[str, Any]]:
    args = ["template", release, str(CHART), "--namespace", namespace, "--kube-version", KUBE_VERSION]
    for s in sets:
        args += ["--set", s]
    # libyaml: the chart now renders its 2 MB of CRDs, which the pure-Python loader takes seconds to read.
    return [d for d in yaml.load_all(helm(cluster, *args), Loader=yaml.CSafeLoader) if d]


def test_chart_lints(cluster: Cluster) -> None:
    out = helm(cluster, "lint", "--strict", str(CHART), "--kube-version", KUBE_VERSION)
    assert "0 chart(s) failed" in out


CASES = [
    pytest.param([], Registration(failure_policy="Fail", timeout_seconds=5), id="defaults"),
    pytest.param(
        ["webhook.failurePolicy=Ignore", "webhook.mutatingFailurePolicy=Fail", "webhook.timeoutSeconds=12",
         "webhook.excludedNamespaces={team-x,team-y}"],
        Registration(failure_policy="Ignore", mutating_failure_policy="Fail", timeout_seconds=12,
                     excluded_namespaces=("team-x", "team-y")),
        id="ignore-timeout-excluded",
    ),
    pytest.param(
        ["webhook.certificates.mode=external", "webhook.certificates.existingSecret=tg-cert",
         "webhook.certificates.caInjectionAnnotation=cert-manager.io/inject-ca-from: tg-system/tg-cert"],
        Registration(annotations={"cert-manager.io/inject-ca-from": "tg-system/tg-cert"}),
        id="cert-manager",
    ),
]


@pytest.mark.parametrize("sets, expected", CASES)
def test_rendered_webhook_configurations_equal_the_registration_function(
    cluster: Cluster, sets: list[str], expected: Registration
) -> None:
    docs = render(cluster, "tg", "tg-system", *sets)
    rendered = {d["kind"]: d for d in docs if d["kind"].endswith("WebhookConfiguration")}
    want_mutating, want_validating = webhook_configurations(
        Registration(
            service=ServiceRef(name="tg-trainguard-webhook", namespace="tg-system"),
            failure_policy=expected.failure_policy,
            mutating_failure_policy=expected.mutating_failure_policy,
            timeout_seconds=expected.timeout_seconds,
            excluded_namespaces=expected.excluded_namespaces,
            mutating_name="tg-trainguard-mutating",
            validating_name="tg-trainguard-validating",
            annotations=expected.annotations,
        )
    )
    for kind, want in (("MutatingWebhookConfiguration", want_mutating),
                       ("ValidatingWebhookConfiguration", want_validating)):
        got = rendered[kind]
        # Helm adds its standard labels; the function's own label must be among them.
        assert want["metadata"]["labels"].items() <= got["metadata"]["labels"].items()
        assert (got["metadata"].get("annotations") or {}) == want["metadata"].get("annotations", {})
        assert got["webhooks"] == want["webhooks"], kind


def test_every_container_is_locked_down_and_rbac_has_no_wildcards(cluster: Cluster) -> None:
    docs = render(cluster, "tg", "tg-system")
    deployments = [d for d in docs if d["kind"] == "Deployment"]
    assert {d["metadata"]["name"] for d in deployments} == {"tg-trainguard-webhook", "tg-trainguard-controller"}
    for d in deployments:
        pod = d["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] != 0
        for c in pod["containers"]:
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"]["drop"] == ["ALL"]
            assert "readinessProbe" in c and "livenessProbe" in c
    for d in docs:
        if d["kind"] in ("ClusterRole", "Role"):
            for r in d["rules"]:
                assert "*" not in r["verbs"] and "*" not in r["resources"] and "*" not in r.get("apiGroups", []), d
        if d["kind"] in ("ClusterRoleBinding", "RoleBinding"):
            assert d["roleRef"]["name"] not in ("cluster-admin", "admin", "edit"), d


def test_rendered_chart_is_accepted_by_the_apiserver(cluster: Cluster, namespace: str) -> None:
    docs = render(cluster, "tg", namespace)
    # Server-side dry run: real schemas and admission, nothing stored (live webhook configurations with
    # failurePolicy Fail would otherwise intercept other tests' TrainJobs). Server-side apply, as for the CRDs the
    # chart now renders: client-side apply would put each into a last-applied annotation, over its 256 KiB limit.
    out = cluster.kubectl("apply", "--server-side", "--dry-run=server", "-f", "-",
                          input=yaml.dump_all(docs, Dumper=yaml.CSafeDumper))
    assert out.stdout.count("(server dry run)") == len(docs)


MPI_RUNTIME = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1",
    "kind": "TrainingRuntime",
    "spec": {
        "mlPolicy": {"numNodes": 1, "mpi": {"numProcPerNode": 1, "mpiImplementation": "OpenMPI",
                                            "sshAuthMountPath": "/root/.ssh", "runLauncherAsNode": False}},
        "template": {"spec": {"replicatedJobs": [
            {"name": "launcher", "template": {
                "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                "spec": {"template": {"spec": {"containers": [{"name": "node", "image": "mpioperator/openmpi:1"}]}}}}},
            {"name": "node", "template": {
                "spec": {"template": {"spec": {"containers": [{"name": "node", "image": "mpioperator/openmpi:1"}]}}}}},
        ]}},
    },
}

TRAINJOB_RUNTIME = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1",
    "kind": "TrainingRuntime",
    "metadata": {"name": "plain"},
    "spec": {
        "mlPolicy": {"numNodes": 1},
        "template": {"spec": {"replicatedJobs": [{
            "name": "node",
            "template": {
                "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                "spec": {"template": {"spec": {"containers": [{"name": "node", "image": "python:3.12"}]}}},
            },
        }]}},
    },
}


def kubeconfig_for_token(cluster: Cluster, token: str, path: Path) -> str:
    admin = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    c = admin["clusters"][0]["cluster"]
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "local", "cluster": c}],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "local", "user": "sa"}}],
        "current-context": "sa",
    }))
    return str(path)


def test_controller_reconciles_with_only_its_chart_rbac(cluster: Cluster, namespace: str, tmp_path: Path) -> None:
    rbac_kinds = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
    release = f"rb{namespace[-6:]}"  # cluster-scoped RBAC names carry the release: unique per test run
    docs = [d for d in render(cluster, release, namespace) if d["kind"] in rbac_kinds]
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))
    sa = f"{release}-trainguard-controller"
    try:
        as_sa = f"system:serviceaccount:{namespace}:{sa}"
        must = [("create", "jobsets.jobset.x-k8s.io"), ("patch", "trainjobs.trainer.kubeflow.org/status"),
                ("create", "secrets"), ("update", "leases.coordination.k8s.io"),
                ("list", "trainjobpolicies.trainguard.io"), ("patch", "trainjobpolicies.trainguard.io --subresource=status"),
                ("watch", "namespaces"),
                ("delete", "configmaps")]  # runtime snapshots, in its own namespace
        # Issue 10 item 10: no Secret anywhere can be read (create only, AlreadyExists meaning done); snapshots are
        # deleted only in the controller's own namespace; nothing is "update"d but the Lease.
        must_not = [("get", "secrets"), ("list", "secrets"), ("watch", "secrets"), ("list", "secrets -A"),
                    ("get", "secrets -n kube-system"), ("delete", "secrets"), ("patch", "secrets"),
                    ("delete", "configmaps -n default"), ("update", "configmaps"), ("update", "trainjobs.trainer.kubeflow.org"),
                    ("patch", "trainjobpolicies.trainguard.io"),  # the spec is the admin's: status only
                    ("create", "pods"), ("get", "nodes"),
                    ("create", "clusterrolebindings"), ("*", "*"), ("update", "leases.coordination.k8s.io -n default")]
        for verb, what in must:
            out = cluster.kubectl("auth", "can-i", verb, *what.split(), "-n", namespace, "--as", as_sa, check=False)
            assert out.stdout.strip() == "yes", (verb, what, out.stdout, out.stderr)
        for verb, what in must_not:
            args = what.split()
            ns_args = [] if "-n" in args else ["-n", namespace]
            out = cluster.kubectl("auth", "can-i", verb, *args, *ns_args, "--as", as_sa, check=False)
            assert out.stdout.strip() == "no", (verb, what, out.stdout, out.stderr)

        token = cluster.kubectl("create", "token", sa, "-n", namespace, "--duration", "1h").stdout.strip()
        kubeconfig = kubeconfig_for_token(cluster, token, tmp_path / "sa.kubeconfig")
        runtime = {**TRAINJOB_RUNTIME, "metadata": {"name": "plain", "namespace": namespace}}
        cluster.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(runtime))
        cluster.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(MPI_RUNTIME | {
            "metadata": {"name": "mpi", "namespace": namespace}}))
        controller = ControllerProcess(kubeconfig, namespace, "rbac-check", tmp_path).start()
        try:
            job = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                   "metadata": {"name": "rbac-job", "namespace": namespace},
                   "spec": {"runtimeRef": {"name": "plain", "kind": "TrainingRuntime"}, "trainer": {"numNodes": 2}}}
            cluster.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(job))

            def jobset() -> dict | None:
                out = cluster.kubectl("get", "jobset", "rbac-job", "-n", namespace, "-o", "json", check=False)
                return json.loads(out.stdout) if out.returncode == 0 else None

            js = wait_for("the JobSet built under the controller's own RBAC", jobset, timeout=60)
            assert js["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelism"] == 2

            # MPI still gets its SSH Secret though the controller cannot read Secrets: created once, and a
            # reconcile that finds it existing (AlreadyExists) leaves it as it was.
            mpi_job = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                       "metadata": {"name": "rbac-mpi", "namespace": namespace},
                       "spec": {"runtimeRef": {"name": "mpi", "kind": "TrainingRuntime"}, "trainer": {"numNodes": 2}}}
            cluster.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(mpi_job))

            def secret() -> dict | None:
                out = cluster.kubectl("get", "secret", "rbac-mpi-mpi-ssh-auth", "-n", namespace, "-o", "json", check=False)
                return json.loads(out.stdout) if out.returncode == 0 else None

            first = wait_for("the MPI SSH Secret", secret, timeout=60)
            assert first["type"] == "kubernetes.io/ssh-auth"
            wait_for("the MPI JobSet", lambda: cluster.kubectl("get", "jobset", "rbac-mpi", "-n", namespace,
                                                               check=False).returncode == 0, timeout=60)
            controller.terminate()
            controller = ControllerProcess(kubeconfig, namespace, "rbac-check-2", tmp_path).start()
            before = controller.reconciles()
            cluster.kubectl("label", "trainjob", "rbac-mpi", "-n", namespace, "poke=1")
            wait_for("a reconcile by a fresh controller", lambda: controller.reconciles() > before, timeout=60)
            assert secret()["data"] == first["data"]
            log = controller.log_path.read_text() + (tmp_path / "controller-rbac-check.log").read_text()
            assert "Forbidden" not in log, log[-2000:]
        finally:
            controller.terminate()
    finally:
        cluster.kubectl("delete", "-f", "-", "--ignore-not-found", input=yaml.safe_dump_all(docs), check=False)
