"""A policy-queued TrainJob and Kueue's MultiKueue admission check, with the real Kueue v0.17.0 manager (issue 16).

Before trainguard set ``managedBy``, a TrainJob whose queue came from a TrainJobPolicy kept the trainer's
``managedBy``; MultiKueue's admission check answered ``Rejected`` ("The owner is not managed by Kueue") and the
Workload was deactivated. Here:

* MANAGER: the session apiserver, Kueue (out of cluster, webhooks by URL for one namespace), ``trainguard webhook``
  and ``trainguard controller``; a MultiKueueCluster for the worker (its kubeconfig, certificates and token inline,
  in a Secret in ``kueue-system``), a MultiKueueConfig, an AdmissionCheck with controllerName
  ``kueue.x-k8s.io/multikueue``, a ClusterQueue using it, a LocalQueue, and a TrainJobPolicy that gives the
  namespace's TrainJobs that queue. The TrainJob is applied with no Kueue label.
* WORKER: a second bare control plane (``hack/cluster.sh``: etcd + kube-apiserver) with Kueue's, JobSet's and
  trainguard's CRDs, the users' namespace, ServiceAccount ``kueue-system/multikueue`` (the identity of the
  manager's kubeconfig) and ``trainguard webhook --multikueue-dispatcher`` naming it. No Kueue runs on this worker,
  so the dispatched Workload is never admitted there: the test shows that the manager's check now WAITS for a worker
  (Pending, the remote Workload created, the local one active), not what happens after (``test_multikueue.py``
  runs a job to completion across two clusters).

The manager/worker policy rule is then played on the worker against its real apiserver: the dispatcher creates a
MultiKueue copy (the manager's ``trainguard.io/policy`` runtimePatch is kept; the worker's Enforce limits still
deny an oversized copy), and a namespace user who writes the same origin label gets the worker's policy.

If Kueue cannot be built or started, the tests fail with the reason: they never skip.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import shutil
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from tests.conftest import Cluster, upstream_crds, wait_for_crds
from tests.e2e.kueue_harness import KueueProcess, build_kueue, kueue_webhook_configurations
from tests.integration.conftest import WebhookProcess, register, start_webhook, unregister
from tests.integration.reconcile.reconcile_harness import ControllerProcess, wait_for

REPO = Path(__file__).resolve().parents[2]
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
ORIGIN_LABEL = "kueue.x-k8s.io/multikueue-origin"
STATE_LABEL = "trainguard.io/state"
MULTIKUEUE = "kueue.x-k8s.io/multikueue"
POLICY_MANAGER = "trainguard.io/policy"
KUEUE_NS = "kueue-system"  # Kueue's Configuration.namespace default: where MultiKueue reads kubeconfig Secrets
DISPATCHER_SA = "multikueue"
DISPATCHER = f"system:serviceaccount:{KUEUE_NS}:{DISPATCHER_SA}"
MANAGER_SELECTOR = {"trainguard.io/e2e-pool": "manager-decided"}
WORKER_SELECTOR = {"trainguard.io/e2e-pool": "worker-decided"}


@dataclass
class Env:
    manager: Cluster
    worker: Cluster
    namespace: str
    queue: str
    check: str
    kueue: KueueProcess
    webhook: WebhookProcess
    worker_webhook: WebhookProcess
    controller: ControllerProcess
    worker_dir: Path

    def get(self, cluster: Cluster, kind: str, name: str, namespaced: bool = True) -> dict[str, Any] | None:
        args = ["get", kind, name, "-o", "json", "--ignore-not-found"] + (["-n", self.namespace] if namespaced else [])
        out = cluster.kubectl(*args).stdout.strip()
        return json.loads(out) if out else None

    def workload_of(self, cluster: Cluster, name: str) -> dict[str, Any] | None:
        items = json.loads(cluster.kubectl("get", "workloads.kueue.x-k8s.io", "-n", self.namespace, "-o", "json").stdout)["items"]
        return next((w for w in items if any(o.get("name") == name and o.get("kind") == "TrainJob"
                                             for o in w["metadata"].get("ownerReferences") or [])), None)

    def diagnostics(self) -> str:
        ac = self.get(self.manager, "admissionchecks.kueue.x-k8s.io", self.check, namespaced=False)
        workloads = json.loads(self.manager.kubectl("get", "workloads.kueue.x-k8s.io", "-n", self.namespace, "-o", "json",
                                                    check=False).stdout or '{"items": []}')["items"]
        states = {w["metadata"]["name"]: {"active": w["spec"].get("active", True),
                                          "checks": (w.get("status") or {}).get("admissionChecks"),
                                          "conditions": [(c["type"], c["status"], c.get("reason"))
                                                         for c in (w.get("status") or {}).get("conditions") or []]}
                  for w in workloads}
        return (f"--- admission check status\n{json.dumps((ac or {}).get('status'))}\n"
                f"--- manager workloads\n{json.dumps(states)}\n"
                f"--- kueue log\n{self.kueue.log_tail(30)}\n--- webhook log\n{self.webhook.log_tail(10)}\n"
                f"--- controller log\n{self.controller.log()[-2000:]}")


def trainjob(name: str, namespace: str, nodes: int = 2, labels: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": meta,
            "spec": {"runtimeRef": {"name": "torch-mk", "kind": "TrainingRuntime", "apiGroup": "trainer.kubeflow.org"},
                     "trainer": {"image": "ghcr.io/acme/train:1.0", "numNodes": nodes,
                                 "resourcesPerNode": {"requests": {"cpu": "1", "nvidia.com/gpu": "1"},
                                                      "limits": {"nvidia.com/gpu": "1"}}}}}


def runtime(namespace: str) -> dict[str, Any]:
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
            "metadata": {"name": "torch-mk", "namespace": namespace},
            "spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "template": {"spec": {"replicatedJobs": [{
                "name": "node",
                "template": {"metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                             "spec": {"template": {"spec": {"containers": [{"name": "node", "image": "pytorch/pytorch:2"}]}}}},
            }]}}}}


def policy(name: str, namespace: str, *, queue: str | None, selector: dict[str, str], max_nodes: int | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"mode": "Enforce",
                            "selector": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}},
                            "defaults": {"nodeSelector": selector}}
    if queue:
        spec["scheduling"] = {"kueue": {"queueName": queue}}
    if max_nodes is not None:
        spec["limits"] = {"maxNodes": max_nodes}
    return {"apiVersion": "trainguard.io/v1alpha1", "kind": "TrainJobPolicy", "metadata": {"name": name}, "spec": spec}


def dispatcher_rbac() -> list[dict[str, Any]]:
    """What the manager's Kueue does on a worker: Workloads (and status), TrainJobs and JobSets (every enabled
    integration is watched there); and, for this test, nothing more."""
    rules = [
        {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads", "workloads/status"],
         "verbs": ["create", "delete", "get", "list", "watch", "update", "patch"]},
        {"apiGroups": ["trainer.kubeflow.org", "jobset.x-k8s.io"], "resources": ["trainjobs", "trainjobs/status", "jobsets", "jobsets/status"],
         "verbs": ["create", "delete", "get", "list", "watch"]},
    ]
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KUEUE_NS}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": DISPATCHER_SA, "namespace": KUEUE_NS}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "multikueue-dispatcher"},
         "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "multikueue-dispatcher"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "multikueue-dispatcher"},
         "subjects": [{"kind": "ServiceAccount", "name": DISPATCHER_SA, "namespace": KUEUE_NS}]},
    ]


def namespace_user_rbac(namespace: str) -> list[dict[str, Any]]:
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "alice", "namespace": namespace}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "trainjobs", "namespace": namespace},
         "rules": [{"apiGroups": ["trainer.kubeflow.org"], "resources": ["trainjobs"],
                    "verbs": ["create", "delete", "get", "list", "watch", "update", "patch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "alice", "namespace": namespace},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "trainjobs"},
         "subjects": [{"kind": "ServiceAccount", "name": "alice", "namespace": namespace}]},
    ]


def token_kubeconfig(cluster: Cluster, sa: str, namespace: str, path: Path) -> Path:
    """A kubeconfig for ServiceAccount ``namespace/sa`` with the CA and token inline (MultiKueue refuses paths)."""
    token = cluster.kubectl("create", "token", sa, "-n", namespace, "--duration", "2h").stdout.strip()
    flat = yaml.safe_load(cluster.kubectl("config", "view", "--raw", "--flatten").stdout)
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "worker",
        "clusters": [{"name": "worker", "cluster": flat["clusters"][0]["cluster"]}],
        "users": [{"name": sa, "user": {"token": token}}],
        "contexts": [{"name": "worker", "context": {"cluster": "worker", "user": sa}}],
    }))
    return path


def as_user(cluster: Cluster, kubeconfig: Path, *args: str, input: str | None = None, check: bool = True):
    return subprocess.run([str(cluster.bin_dir / "kubectl"), "--kubeconfig", str(kubeconfig), *args], input=input,
                          capture_output=True, text=True, timeout=60, check=check)


def apply_crds(cluster: Cluster, manifests: list[Path]) -> None:
    args = ["apply", "--server-side", "--force-conflicts"]
    for m in manifests:
        args += ["-f", str(m)]
    cluster.kubectl(*args, timeout=120)
    wait_for_crds(cluster)


def start_worker(state_dir: Path) -> Cluster:
    env = {**os.environ, "TRAINGUARD_CLUSTER_DIR": str(state_dir)}
    proc = subprocess.run([str(REPO / "hack" / "cluster.sh"), "up"], capture_output=True, text=True, env=env, timeout=600)
    if proc.returncode != 0:
        raise AssertionError(f"hack/cluster.sh up (worker) failed:\n{proc.stderr[-3000:]}")
    kubeconfig = proc.stdout.strip().splitlines()[-1]
    return Cluster(kubeconfig, Path((state_dir / "bin_dir").read_text().strip()))


def stop_worker(state_dir: Path) -> None:
    subprocess.run([str(REPO / "hack" / "cluster.sh"), "down"], env={**os.environ, "TRAINGUARD_CLUSTER_DIR": str(state_dir)},
                   capture_output=True, timeout=120)
    shutil.rmtree(state_dir, ignore_errors=True)


def manager_objects(namespace: str, suffix: str, worker: str, queue: str, check: str) -> list[dict[str, Any]]:
    config = f"mk-{suffix}"
    return [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "MultiKueueCluster", "metadata": {"name": worker},
         "spec": {"clusterSource": {"kubeConfig": {"locationType": "Secret", "location": f"{worker}-kubeconfig"}}}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "MultiKueueConfig", "metadata": {"name": config},
         "spec": {"clusters": [worker]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck", "metadata": {"name": check},
         "spec": {"controllerName": MULTIKUEUE,
                  "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": config}}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": f"gpu-{suffix}"}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": f"cq-{suffix}"},
         "spec": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                  "admissionChecksStrategy": {"admissionChecks": [{"name": check}]},
                  "resourceGroups": [{"coveredResources": ["cpu", "nvidia.com/gpu"], "flavors": [{
                      "name": f"gpu-{suffix}", "resources": [{"name": "cpu", "nominalQuota": "32"},
                                                             {"name": "nvidia.com/gpu", "nominalQuota": "32"}]}]}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": queue, "namespace": namespace},
         "spec": {"clusterQueue": f"cq-{suffix}"}},
        runtime(namespace),
        policy(f"manager-{suffix}", namespace, queue=queue, selector=MANAGER_SELECTOR),
    ]


CLUSTER_SCOPED = {"MultiKueueCluster": "multikueueclusters.kueue.x-k8s.io", "MultiKueueConfig": "multikueueconfigs.kueue.x-k8s.io",
                  "AdmissionCheck": "admissionchecks.kueue.x-k8s.io", "ResourceFlavor": "resourceflavors.kueue.x-k8s.io",
                  "ClusterQueue": "clusterqueues.kueue.x-k8s.io", "TrainJobPolicy": "trainjobpolicies.trainguard.io"}


def _condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any] | None:
    return next((c for c in ((obj or {}).get("status") or {}).get("conditions") or [] if c["type"] == type_), None)


def _true(obj: dict[str, Any] | None, type_: str) -> bool:
    c = _condition(obj, type_)
    return bool(c and c["status"] == "True")


def _check_state(wl: dict[str, Any] | None, check: str) -> dict[str, Any] | None:
    return next((a for a in ((wl or {}).get("status") or {}).get("admissionChecks") or [] if a["name"] == check), None)


def _policy_patch(tj: dict[str, Any]) -> dict[str, Any] | None:
    return next((p for p in tj["spec"].get("runtimePatches") or [] if p["manager"] == POLICY_MANAGER), None)


def _patch_selector(patch: dict[str, Any]) -> dict[str, str]:
    rjob = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
    return rjob["template"]["spec"]["template"]["spec"]["nodeSelector"]


@pytest.fixture(scope="module")
def mk_env(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    try:
        bin_dir = build_kueue()
    except Exception as e:  # noqa: BLE001 - say why, never skip
        pytest.fail(f"cannot build the Kueue manager (hack/build-tools.sh kueue): {e}", pytrace=False)
    apply_crds(cluster, upstream_crds(bin_dir, "kueue"))
    suffix = uuid.uuid4().hex[:6]
    namespace, queue, check, worker_name = f"mk-admission-{suffix}", "team-gpu", f"multikueue-{suffix}", f"worker-{suffix}"
    work = tmp_path_factory.mktemp("multikueue")
    worker_dir = Path(tempfile.mkdtemp(prefix="trainguard-mk-worker-"))
    started: list[Any] = []
    registered: list[tuple[Cluster, Any]] = []
    objects = manager_objects(namespace, suffix, worker_name, queue, check)
    worker: Cluster | None = None
    try:
        worker = start_worker(worker_dir)
        apply_crds(worker, upstream_crds(bin_dir, "kueue", "jobset") + sorted((REPO / "crds").glob("*.yaml")))
        worker.kubectl("create", "namespace", namespace)
        worker.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(
            dispatcher_rbac() + namespace_user_rbac(namespace) + [runtime(namespace)]
            + [policy(f"worker-{suffix}", namespace, queue=None, selector=WORKER_SELECTOR, max_nodes=4)]))
        kubeconfig = token_kubeconfig(worker, DISPATCHER_SA, KUEUE_NS, work / "dispatcher.kubeconfig")

        cluster.kubectl("create", "namespace", namespace)
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KUEUE_NS}},
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": f"{worker_name}-kubeconfig", "namespace": KUEUE_NS},
             "data": {"kubeconfig": base64.b64encode(kubeconfig.read_bytes()).decode()}}]))

        webhook = start_webhook(cluster, work / "webhook")
        started.append(webhook)
        registered.append((cluster, register(cluster, webhook, namespace)))
        worker_webhook = start_webhook(worker, work / "worker-webhook", extra=["--multikueue-dispatcher", DISPATCHER])
        started.append(worker_webhook)
        registered.append((worker, register(worker, worker_webhook, namespace)))
        kueue = KueueProcess(bin_dir / "kueue", cluster.kubeconfig, work / "kueue")
        try:
            kueue.start()
        except AssertionError as e:
            pytest.fail(f"the real Kueue manager did not start: {e}", pytrace=False)
        started.append(kueue)
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(kueue_webhook_configurations(kueue.url_base, kueue.ca_pem, namespace)))
        controller = ControllerProcess(cluster.kubeconfig, namespace, "mk-admission", work, workers=2).start()
        started.append(controller)
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects))
        env = Env(cluster, worker, namespace, queue, check, kueue, webhook, worker_webhook, controller, worker_dir)
        try:
            wait_for("the MultiKueue AdmissionCheck to be Active (worker connected)",
                     lambda: _true(env.get(cluster, "admissionchecks.kueue.x-k8s.io", check, namespaced=False), "Active"),
                     timeout=90)
            # Kueue's and trainguard's webhooks both answer, and trainguard's snapshot knows the queue dispatches.
            probe = yaml.safe_dump(trainjob("probe", namespace))
            wait_for("the manager's webhooks to set the queue and managedBy", lambda: (
                (out := cluster.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=probe, check=False)).returncode == 0
                and json.loads(out.stdout)["spec"].get("managedBy") == MULTIKUEUE
                and any(p["manager"] == "kueue.x-k8s.io/manager" for p in json.loads(out.stdout)["spec"].get("runtimePatches") or [])),
                timeout=60)
        except AssertionError as e:
            raise AssertionError(f"{e}\n{env.diagnostics()}") from None
        yield env
    finally:
        for proc in reversed(started):
            if isinstance(proc, ControllerProcess):
                if proc.proc is not None and proc.proc.poll() is None:
                    proc.terminate()
            else:
                proc.stop()
        for where, r in registered:
            unregister(where, r)
        cluster.kubectl("delete", "mutatingwebhookconfiguration", "kueue-mutating-webhook-configuration", "--ignore-not-found", check=False)
        cluster.kubectl("delete", "validatingwebhookconfiguration", "kueue-validating-webhook-configuration", "--ignore-not-found", check=False)
        for obj in objects:
            if obj["kind"] in CLUSTER_SCOPED:
                cluster.kubectl("delete", CLUSTER_SCOPED[obj["kind"]], obj["metadata"]["name"], "--ignore-not-found",
                                "--wait=false", check=False)
        cluster.kubectl("delete", "secret", f"{worker_name}-kubeconfig", "-n", KUEUE_NS, "--ignore-not-found", check=False)
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        if worker is not None:
            stop_worker(worker_dir)
        else:
            shutil.rmtree(worker_dir, ignore_errors=True)


def test_policy_queued_trainjob_waits_for_a_worker(mk_env: Env) -> None:
    """Issue 16 item 1: the policy's queue dispatches, so the job is stored with MultiKueue's managedBy and suspended;
    the MultiKueue check is not rejected, the Workload stays active and is sent to the worker; the manager's
    controller builds nothing and shows the phase."""
    env, name = mk_env, "dispatched"
    created = json.loads(env.manager.kubectl("apply", "-f", "-", "-o", "json", input=yaml.safe_dump(
        trainjob(name, env.namespace))).stdout)
    assert created["metadata"]["labels"][QUEUE_LABEL] == env.queue
    assert created["spec"]["managedBy"] == MULTIKUEUE
    assert created["spec"]["suspend"] is True
    assert _patch_selector(_policy_patch(created)) == MANAGER_SELECTOR
    try:
        wl = wait_for("the Workload to reserve quota and its MultiKueue check to be evaluated", lambda: (
            (w := env.workload_of(env.manager, name)) and _true(w, "QuotaReserved") and _check_state(w, env.check) and w),
            timeout=90)
        remote = wait_for("MultiKueue to create the Workload on the worker",
                          lambda: env.get(env.worker, "workloads.kueue.x-k8s.io", wl["metadata"]["name"]), timeout=60)
        assert remote["spec"]["queueName"] == env.queue
        wl = env.workload_of(env.manager, name)
        state = _check_state(wl, env.check)
        assert state and state["state"] == "Pending", state
        assert "not managed by Kueue" not in state.get("message", ""), state
        assert wl["spec"].get("active", True) is True, wl["spec"]
        assert not _true(wl, "Evicted") and not _true(wl, "Finished"), wl["status"]
        wait_for("the manager's controller to label the phase",
                 lambda: (env.get(env.manager, "trainjobs.trainer.kubeflow.org", name)["metadata"].get("labels") or {})
                 .get(STATE_LABEL) == "Suspended", timeout=30)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{env.diagnostics()}") from None
    # Item 2: nothing was built on the manager for a MultiKueue job.
    assert env.get(env.manager, "jobsets.jobset.x-k8s.io", name) is None
    assert env.manager.kubectl("get", "configmaps", "-n", env.namespace, "-o", "name").stdout.count("runtime-snapshot") == 0


def test_manager_phase_follows_the_copied_status(mk_env: Env) -> None:
    """Issue 16 item 3: MultiKueue copies only ``.status`` back; the manager's controller labels the phase from it.
    The copy is written here as MultiKueue's SyncJob writes it (the whole status, from the worker's TrainJob; no
    worker runs the job in this module). The other states are unit-tested (test_multikueue_phase.py)."""
    env, name = mk_env, "reported"
    env.manager.kubectl("apply", "-f", "-", input=yaml.safe_dump(trainjob(name, env.namespace)))
    now = "2026-01-01T12:00:00Z"
    status = {"conditions": [{"type": "Complete", "status": "True", "reason": "JobSetCompleted", "message": "done",
                              "lastTransitionTime": now}],
              "jobsStatus": [{"name": "node", "ready": 0, "succeeded": 2, "failed": 0, "active": 0, "suspended": 0}]}
    env.manager.kubectl("patch", "trainjobs.trainer.kubeflow.org", name, "-n", env.namespace, "--subresource", "status",
                        "--type", "merge", "-p", json.dumps({"status": status}))
    try:
        wait_for("the phase Complete", lambda: (env.get(env.manager, "trainjobs.trainer.kubeflow.org", name)["metadata"]
                                                .get("labels") or {}).get(STATE_LABEL) == "Complete", timeout=30)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{env.diagnostics()}") from None
    assert env.get(env.manager, "jobsets.jobset.x-k8s.io", name) is None


def _copy_of(env: Env, name: str, nodes: int) -> dict[str, Any]:
    """What MultiKueue creates on the worker from a manager job (origin and prebuilt-workload labels, managedBy
    cleared, Kueue's own runtimePatch removed, the manager's trainguard.io/policy patch kept)."""
    admitted = json.loads(env.manager.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=yaml.safe_dump(
        trainjob(name, env.namespace, nodes))).stdout)
    body = {"apiVersion": admitted["apiVersion"], "kind": "TrainJob",
            "metadata": {"name": name, "namespace": env.namespace,
                         "labels": {**admitted["metadata"]["labels"], ORIGIN_LABEL: "multikueue",
                                    "kueue.x-k8s.io/prebuilt-workload-name": f"trainjob-{name}-0"}},
            "spec": copy.deepcopy(admitted["spec"])}
    body["spec"].pop("managedBy", None)
    body["spec"]["runtimePatches"] = [p for p in body["spec"]["runtimePatches"] if p["manager"] == POLICY_MANAGER]
    assert _patch_selector(body["spec"]["runtimePatches"][0]) == MANAGER_SELECTOR
    return body


@pytest.mark.parametrize(("who", "nodes", "outcome"), [
    ("dispatcher", 2, "copy kept"),
    ("dispatcher", 8, "denied"),  # over the worker's maxNodes 4: the worker's Enforce limits still hold
    ("namespace user", 2, "worker policy"),  # the user writes the origin label: it switches nothing
])
def test_worker_policy_rule_on_copies(mk_env: Env, tmp_path: Path, who: str, nodes: int, outcome: str) -> None:
    """Issue 16 item 2, against the worker's real apiserver (the requester's identity is the apiserver's)."""
    env = mk_env
    name = f"copy-{uuid.uuid4().hex[:6]}"
    body = _copy_of(env, name, nodes)
    sa, sa_ns = (DISPATCHER_SA, KUEUE_NS) if who == "dispatcher" else ("alice", env.namespace)
    kubeconfig = token_kubeconfig(env.worker, sa, sa_ns, tmp_path / f"{sa}.kubeconfig")
    out = as_user(env.worker, kubeconfig, "create", "-o", "json", "-f", "-", input=json.dumps(body), check=False)
    if outcome == "denied":
        assert out.returncode != 0
        assert "spec.trainer.numNodes" in out.stderr and 'TrainJobPolicy "worker-' in out.stderr, out.stderr
        return
    assert out.returncode == 0, out.stderr
    stored = json.loads(out.stdout)
    patch = _policy_patch(stored)
    if outcome == "copy kept":
        assert patch == body["spec"]["runtimePatches"][0]
        assert stored["metadata"]["labels"] == body["metadata"]["labels"]
    else:
        assert _patch_selector(patch) == {**WORKER_SELECTOR}
