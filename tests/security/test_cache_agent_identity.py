"""The cache agent's identity cannot be borrowed (issue 10, same class as item 10).

Each DatasetCache's agents run as ServiceAccount ``trainguard-cache-<cache>`` with a Role allowing ``patch`` on every
pod of the namespace (RBAC cannot name the agent's generated Pod). A namespace user can borrow that identity:

a. with a token that is bound to no Pod: a ``kubernetes.io/service-account-token`` Secret annotated with the agent's
   ServiceAccount (users may create Secrets; kube-controller-manager fills it in). No kube-controller-manager runs
   here, so the test shows the user may create that Secret and then stands in for its token with an admin
   ``kubectl create token`` without ``--bound-object-kind`` (same claims: no Pod);
b. from a Pod running as the agent ServiceAccount (``serviceAccountName`` in a TrainJob runtimePatch or a
   TrainingRuntime the user writes): its projected token is bound to that Pod. No kubelet runs, so the admin creates
   the Pods (they stay Pending) and mints the Pod-bound token the kubelet would project
   (``--bound-object-kind Pod``, which carries the ``authentication.kubernetes.io/pod-name``/``pod-uid`` extra).

With ``trainguard.controller.reconcile.cache_agent_policy`` installed (the chart's ValidatingAdmissionPolicy, scoped
here to the test's namespace), every such attempt is denied by the apiserver itself, while the agent's real reporter
(``controller/cache/report.py`` ``pod_reporter``, run in a child process with the Pod-bound token as its in-cluster
credentials) still patches its own Pod. Each attack is first shown to succeed without the policy, so the denial is the
policy's doing, not RBAC's.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.rest import ApiException

from trainguard.controller.reconcile.cache_agent_policy import POLICY_NAME, agent_admission_policy
from trainguard.controller.reconcile.cache_daemonset import (
    ANNOTATION_BYTES_RESIDENT,
    ANNOTATION_SHARDS,
    ANNOTATION_WARM,
    agent_name,
    build_agent_rbac,
)
from tests.integration.reconcile.reconcile_harness import ControllerProcess, wait_for
from tests.security.conftest import NamespaceUser, kubeconfig_for_token

REPO = Path(__file__).resolve().parents[2]
CACHE = "imagenet"
GATE = "kueue.x-k8s.io/admission"
REPORT = {"metadata": {"annotations": {ANNOTATION_BYTES_RESIDENT: "4096", ANNOTATION_SHARDS: "2",
                                       ANNOTATION_WARM: "true"}}}


def dataset_cache(name: str, namespace: str, uid: str = "") -> dict:
    return {"apiVersion": "trainguard.io/v1alpha1", "kind": "DatasetCache",
            "metadata": {"name": name, "namespace": namespace, **({"uid": uid} if uid else {})},
            "spec": {"source": {"hostPath": {"path": "/data/datasets"}, "shards": "*.tar"}, "memoryBudget": "1Gi"}}


def pod(name: str, service_account: str) -> dict:
    """A gated Pod running as ``service_account`` (a trainer Pod that names the agent, or an agent Pod)."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": name}, "annotations": {"team": "vision"}},
            "spec": {"serviceAccountName": service_account, "schedulingGates": [{"name": GATE}],
                     "containers": [{"name": "node", "image": "registry.example.com/trainer:1"}]}}


def install_policy(cluster: Any, docs: list[dict]) -> Callable[[], None]:
    """Create the policy + binding and return their removal (``enforce`` waits until the apiserver applies them)."""
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))

    def remove() -> None:
        for doc in reversed(docs):
            cluster.kubectl("delete", doc["kind"].lower(), doc["metadata"]["name"], "--ignore-not-found")

    return remove


def scoped_policy(namespace: str) -> list[dict]:
    return agent_admission_policy(f"{POLICY_NAME}-{namespace}"[:253],
                                  namespace_selector={"matchLabels": {"kubernetes.io/metadata.name": namespace}})


@dataclass
class Agent:
    """A credential of the agent ServiceAccount and a CoreV1Api that uses nothing else."""

    token: str
    kubeconfig: str
    core: k8s.CoreV1Api
    last_error: str = ""

    def patch(self, namespace: str, name: str, body: Any, dry_run: bool = False) -> int:
        """Patch like the reporter does (no GET first: the Role grants ``patch`` only); the HTTP status."""
        try:
            self.core.patch_namespaced_pod(name, namespace, body, **({"dry_run": "All"} if dry_run else {}))
            return 200
        except ApiException as err:
            self.last_error = json.loads(err.body).get("message", err.body)
            return err.status


def agent_credential(cluster: Any, namespace: str, path: Path, *bound_to: str) -> Agent:
    token = cluster.kubectl("create", "token", agent_name(CACHE), "-n", namespace, "--duration", "1h",
                            *bound_to).stdout.strip()
    kubeconfig = kubeconfig_for_token(cluster.kubeconfig, token, path)
    configuration = k8s.Configuration()
    k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    return Agent(token, kubeconfig, k8s.CoreV1Api(k8s.ApiClient(configuration)))


def bound_to_pod(cluster: Any, namespace: str, name: str) -> tuple[str, ...]:
    uid = cluster.kubectl("get", "pod", name, "-n", namespace, "-o", "jsonpath={.metadata.uid}").stdout
    return ("--bound-object-kind", "Pod", "--bound-object-name", name, "--bound-object-uid", uid)


def read_pod(cluster: Any, namespace: str, name: str) -> dict:
    return json.loads(cluster.kubectl("get", "pod", name, "-n", namespace, "-o", "json").stdout)


@dataclass
class Borrowed:
    namespace: str
    unbound: Agent  # attack a
    agent_pod: Agent  # the agent's own Pod's projected token
    trainer_pod: Agent  # attack b: a trainer Pod running as the agent ServiceAccount
    policy: list[dict]


@pytest.fixture
def borrowed(cluster: Any, namespace: str, namespace_user: NamespaceUser, tmp_path: Path) -> Borrowed:
    # What the controller creates for the user's DatasetCache (the real controller's objects: test below).
    rbac = build_agent_rbac(dataset_cache(CACHE, namespace, uid="0"))
    for doc in rbac:
        doc["metadata"].pop("ownerReferences")  # no DatasetCache object here to own them
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(rbac))
    for name in ("agent-pod", "trainer-0", "victim-0"):
        sa = agent_name(CACHE) if name != "victim-0" else namespace_user.name  # the victim runs as anyone else
        cluster.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(pod(name, sa)))
    # The user has no pod rights; borrowing the agent is their only way to touch pods.
    assert not namespace_user.can_i("patch", "pods")
    return Borrowed(
        namespace,
        unbound=agent_credential(cluster, namespace, tmp_path / "unbound.kubeconfig"),
        agent_pod=agent_credential(cluster, namespace, tmp_path / "agent.kubeconfig",
                                   *bound_to_pod(cluster, namespace, "agent-pod")),
        trainer_pod=agent_credential(cluster, namespace, tmp_path / "trainer.kubeconfig",
                                     *bound_to_pod(cluster, namespace, "trainer-0")),
        policy=scoped_policy(namespace),
    )


def enforce(cluster: Any, borrowed: Borrowed) -> Callable[[], None]:
    remove = install_policy(cluster, borrowed.policy)
    # The apiserver loads policies from its informer: wait until a dry-run of attack a is refused by the policy.
    wait_for("the policy to be enforced", lambda: borrowed.unbound.patch(
        borrowed.namespace, "victim-0", {"metadata": {"annotations": {"probe": "1"}}}, dry_run=True) == 403)
    return remove


def ungate(agent: Agent, namespace: str, name: str) -> int:
    return agent.patch(namespace, name, [{"op": "remove", "path": "/spec/schedulingGates"}])


def test_without_the_policy_every_borrowed_token_patches_any_pod(cluster: Any, borrowed: Borrowed,
                                                                    namespace_user: NamespaceUser) -> None:
    """The hole, shown once (dry runs, nothing changes): both borrowed credentials pass RBAC for any Pod."""
    ns = borrowed.namespace
    # Attack a's first step is open to the user: a token Secret for the agent (filled by kube-controller-manager).
    secret = {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
              "metadata": {"name": "borrowed", "annotations": {"kubernetes.io/service-account.name": agent_name(CACHE)}}}
    namespace_user.kubectl("apply", "-f", "-", input=json.dumps(secret))
    for agent in (borrowed.unbound, borrowed.trainer_pod):
        assert agent.patch(ns, "victim-0", [{"op": "remove", "path": "/spec/schedulingGates"}], dry_run=True) == 200
        assert agent.patch(ns, "victim-0", [{"op": "replace", "path": "/spec/containers/0/image",
                                             "value": "evil.example.com/x:1"}], dry_run=True) == 200


def test_a_token_bound_to_no_pod_can_patch_nothing(cluster: Any, borrowed: Borrowed) -> None:
    remove = enforce(cluster, borrowed)
    try:
        ns = borrowed.namespace
        for target in ("victim-0", "trainer-0", "agent-pod"):
            assert ungate(borrowed.unbound, ns, target) == 403, target
            assert "not bound to a Pod" in borrowed.unbound.last_error
            # Not even the report annotations: a token without a Pod is not an agent.
            assert borrowed.unbound.patch(ns, target, REPORT) == 403, target
        assert read_pod(cluster, ns, "victim-0")["spec"]["schedulingGates"] == [{"name": GATE}]
    finally:
        remove()


# (what a Pod running as the agent sends about itself, what the denial names); one Pod and policy for the table.
OWN_POD_ATTACKS = [
    ("remove-scheduling-gate", [{"op": "remove", "path": "/spec/schedulingGates"}], "spec"),
    ("swap-image", [{"op": "replace", "path": "/spec/containers/0/image", "value": "evil.example.com/x:1"}], "spec"),
    ("add-label", {"metadata": {"labels": {"kueue.x-k8s.io/queue-name": "other"}}}, "labels"),
    ("remove-label", {"metadata": {"labels": {"app": None}}}, "labels"),
    ("add-finalizer", {"metadata": {"finalizers": ["example.com/block"]}}, "finalizers"),
    ("change-other-annotation", {"metadata": {"annotations": {"team": "other"}}}, "annotations"),
    ("remove-other-annotation", {"metadata": {"annotations": {"team": None}}}, "annotations"),
    ("add-other-annotation", {"metadata": {"annotations": {"kueue.x-k8s.io/x": "y"}}}, "annotations"),
    ("malformed-report", {"metadata": {"annotations": {ANNOTATION_BYTES_RESIDENT: "-1"}}}, ANNOTATION_BYTES_RESIDENT),
    ("stuffed-report", {"metadata": {"annotations": {ANNOTATION_WARM: "x" * 1000}}}, ANNOTATION_WARM),
]


def test_a_pod_running_as_the_agent_may_change_only_its_own_report(cluster: Any, borrowed: Borrowed) -> None:
    remove = enforce(cluster, borrowed)
    try:
        ns = borrowed.namespace
        before = read_pod(cluster, ns, "trainer-0")
        for attack, body, named in OWN_POD_ATTACKS:
            assert borrowed.trainer_pod.patch(ns, "trainer-0", body) in (403, 422), attack
            assert named in borrowed.trainer_pod.last_error, (attack, borrowed.trainer_pod.last_error)
        after = read_pod(cluster, ns, "trainer-0")
        assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
        # The legitimate neighbour: the same credential writes its own report, and may write it again.
        for _ in range(2):
            assert borrowed.trainer_pod.patch(ns, "trainer-0", REPORT) == 200, borrowed.trainer_pod.last_error
        got = read_pod(cluster, ns, "trainer-0")["metadata"]["annotations"]
        assert got == {"team": "vision", **REPORT["metadata"]["annotations"]}
    finally:
        remove()


def test_a_pod_bound_token_cannot_patch_another_pod(cluster: Any, borrowed: Borrowed) -> None:
    remove = enforce(cluster, borrowed)
    try:
        ns = borrowed.namespace
        for agent, own in ((borrowed.trainer_pod, "trainer-0"), (borrowed.agent_pod, "agent-pod")):
            for target in ("victim-0", "trainer-0", "agent-pod"):
                if target == own:
                    continue
                assert ungate(agent, ns, target) == 403, (own, target)
                assert f"running in Pod {own} may not patch Pod {ns}/{target}" in agent.last_error
                assert agent.patch(ns, target, REPORT) == 403, (own, target)  # not even another agent's report
        for target in ("victim-0", "trainer-0", "agent-pod"):
            assert read_pod(cluster, ns, target)["spec"]["schedulingGates"] == [{"name": GATE}]
    finally:
        remove()


REPORTER = textwrap.dedent("""
    import asyncio, sys
    from kubernetes.config import incluster_config
    incluster_config.SERVICE_TOKEN_FILENAME, incluster_config.SERVICE_CERT_FILENAME = sys.argv[1], sys.argv[2]
    from trainguard.cache.report import pod_reporter
    asyncio.run(pod_reporter()(123456789, 7, True))
""")


def run_reporter(cluster: Any, namespace: str, pod_name: str, token: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """The agent's real reporter, with ``token`` as its in-cluster credential (as the kubelet would project it)."""
    admin = yaml.safe_load(Path(cluster.kubeconfig).read_text())["clusters"][0]["cluster"]
    host, port = admin["server"].removeprefix("https://").rsplit(":", 1)
    (tmp_path / "token").write_text(token)
    env = {"PATH": "/usr/bin:/bin", "KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port,
           "POD_NAME": pod_name, "POD_NAMESPACE": namespace, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-c", REPORTER, str(tmp_path / "token"), admin["certificate-authority"]],
                          capture_output=True, text=True, timeout=60, cwd=REPO, env=env)


def test_the_agents_real_reporter_still_reports_under_the_policy(cluster: Any, borrowed: Borrowed, tmp_path: Path) -> None:
    remove = enforce(cluster, borrowed)
    try:
        ns = borrowed.namespace
        done = run_reporter(cluster, ns, "agent-pod", borrowed.agent_pod.token, tmp_path)
        assert done.returncode == 0, done.stderr
        annotations = read_pod(cluster, ns, "agent-pod")["metadata"]["annotations"]
        assert annotations == {"team": "vision", ANNOTATION_BYTES_RESIDENT: "123456789", ANNOTATION_SHARDS: "7",
                               ANNOTATION_WARM: "true"}
        # The same reporter with a borrowed token that is bound to no Pod is refused.
        denied = run_reporter(cluster, ns, "agent-pod", borrowed.unbound.token, tmp_path)
        assert denied.returncode != 0 and "not bound to a Pod" in denied.stderr
    finally:
        remove()


def test_the_controllers_agent_service_account_is_the_one_confined(cluster: Any, namespace: str,
                                                                    namespace_user: NamespaceUser,
                                                                    tmp_path: Path) -> None:
    """End to end: the ServiceAccount the real controller creates for a user's DatasetCache (a long name, so the
    hashed form of ``agent_name``) matches the policy, and its borrowed token can patch no pod."""
    cache = "c" * 52  # the longest name the CRD allows
    cluster.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(pod("victim-0", namespace_user.name)))
    remove = install_policy(cluster, scoped_policy(namespace))
    controller = ControllerProcess(cluster.kubeconfig, namespace, "a", tmp_path,
                                   extra=["--dataset-cache-allowed-host-path=/data"])
    try:
        namespace_user.kubectl("apply", "-f", "-", input=json.dumps(dataset_cache(cache, namespace)))
        controller.start()
        core = k8s.CoreV1Api(cluster.api_client())
        sa = wait_for("agent ServiceAccount", lambda: core.read_namespaced_service_account(agent_name(cache), namespace))
        assert sa.metadata.name != f"trainguard-cache-{cache}"  # hashed: the convention must hold for it too
        token = cluster.kubectl("create", "token", sa.metadata.name, "-n", namespace).stdout.strip()
        configuration = k8s.Configuration()
        k8s_config.load_kube_config(config_file=kubeconfig_for_token(cluster.kubeconfig, token,
                                                                     tmp_path / "borrowed.kubeconfig"),
                                    client_configuration=configuration)
        stolen = k8s.CoreV1Api(k8s.ApiClient(configuration))
        gate_removal = [{"op": "remove", "path": "/spec/schedulingGates"}]
        # RBAC lets it through (the controller's Role), so a 403 from the policy is the policy's doing.
        wait_for("the policy to be enforced", lambda: _status(lambda: stolen.patch_namespaced_pod(
            "victim-0", namespace, gate_removal, dry_run="All")) == 403, timeout=30)
        error = _status(lambda: stolen.patch_namespaced_pod("victim-0", namespace, gate_removal))
        assert error == 403
        assert read_pod(cluster, namespace, "victim-0")["spec"]["schedulingGates"] == [{"name": GATE}]
    finally:
        controller.kill()
        remove()


def _status(call: Callable[[], Any]) -> int:
    try:
        call()
        return 200
    except ApiException as err:
        return err.status

