"""Local control planes wired for Kueue's MultiKueue, each with the real Kueue v0.17 manager and trainguard.

* The MANAGER: ``hack/e2e-cluster.sh`` with ``E2E_ROLE=manager`` (etcd, kube-apiserver, kube-controller-manager for
  garbage collection; no nodes), Kueue with the ``trainer.kubeflow.org/trainjob`` integration and MultiKueue (on by
  default in v0.17) with short timings (``multiKueue.gcInterval`` 5 s, ``workerLostTimeout`` 20 s), trainguard's
  webhook and controller. Kueue's namespace ``kueue-system`` holds each worker's kubeconfig Secret.
* WORKER ``worker-1``: ``hack/e2e-cluster.sh`` (kube-controller-manager, kube-scheduler, kwok with 4 fake nodes x 8
  ``nvidia.com/gpu``, the JobSet controller v0.12 and its webhooks), Kueue, trainguard's webhook and controller.
* WORKER ``worker-2`` (only when a test asks for it): ``hack/cluster.sh`` (etcd + kube-apiserver) and Kueue. It runs
  no pods; it is where Kueue re-dispatches a job whose worker went away.

What an admin sets up, side by side (``connect_worker``, ``manager_queue_objects``, ``worker_queue_objects``):

* on each worker: the users' namespace and a LocalQueue of the same name as the manager's (MultiKueue creates the
  copy in the same namespace and queue), a ClusterQueue with the quota the worker really has, the runtime the jobs
  name, and an identity for the manager (here user ``multikueue-manager``, a client certificate from the worker's
  CA) allowed to create, watch and delete Workloads and TrainJobs, nothing else;
* on the manager: that identity's kubeconfig with its certificates inline (``kubectl config view --raw --flatten``)
  in a Secret in Kueue's namespace, a MultiKueueCluster per worker, a MultiKueueConfig listing them, an
  AdmissionCheck whose controllerName is ``kueue.x-k8s.io/multikueue``, and a ClusterQueue using that check.

Kueue and trainguard's webhooks are registered by URL: Kueue's for the users' namespace only (as
``tests/e2e/kueue_harness.py`` does), trainguard's for the whole (private) cluster. Every wait has a timeout and
fails with ``diagnostics()``: Workload conditions on every side, AdmissionCheck and MultiKueueCluster states, the
logs' tails.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, TypeVar

import yaml

from tests.conftest import Cluster, upstream_crds, wait_for_crds
from tests.e2e.kueue_harness import KueueProcess, kueue_webhook_configurations
from tests.integration.conftest import WebhookProcess, start_webhook
from tests.integration.reconcile.reconcile_harness import ControllerProcess
from trainguard.webhook.admission.registration import Registration, webhook_configurations

REPO = Path(__file__).resolve().parents[2]
HACK = REPO / "hack"
T = TypeVar("T")

# kwok's Stage in hack/e2e-cluster.sh completes Job pods running this image (exit 0) after POD_RUN_MS; any other
# image keeps running.
SUCCEED_IMAGE = "trainguard.invalid/e2e/succeed:v1"
KEEPS_RUNNING_IMAGE = "trainguard.invalid/e2e/keeps-running:v1"
POD_RUN_MS = 2000
NODES, GPUS_PER_NODE = 4, 8
GPU = "nvidia.com/gpu"

TEAM_NS = "team-a"
SYSTEM_NS = "trainguard-system"
KUEUE_NS = "kueue-system"  # Kueue's Configuration.namespace default out of cluster: where it reads kubeconfig Secrets
QUEUE = "gpu"
CLUSTER_QUEUE = "gpu-cq"
FLAVOR = "gpu"
RUNTIME = "torch-multikueue"
CHECK = "multikueue"
MK_CONFIG = "workers"
MK_USER = "multikueue-manager"  # the identity the manager's Kueue uses on the workers
ORIGIN = "trainguard-e2e"  # multiKueue.origin: the value of kueue.x-k8s.io/multikueue-origin on remote objects
GC_INTERVAL_S, WORKER_LOST_TIMEOUT_S = 5, 20

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
ORIGIN_LABEL = "kueue.x-k8s.io/multikueue-origin"
PREBUILT_LABEL = "kueue.x-k8s.io/prebuilt-workload-name"
MULTIKUEUE_CONTROLLER = "kueue.x-k8s.io/multikueue"
KUEUE_MANAGER = "kueue.x-k8s.io/manager"
POLICY_MANAGER = "trainguard.io/policy"
STATE_LABEL = "trainguard.io/state"
VALIDATOR = "validator.trainjob.trainer.kubeflow.org"


def wait_for(what: str, probe: Callable[[], T], timeout: float = 60, interval: float = 0.5,
             diagnostics: Callable[[], str] | None = None) -> T:
    """Poll ``probe`` until it returns something truthy; the timeout bounds a failure, it is not a speed check."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    extra = f"\n{diagnostics()}" if diagnostics else ""
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last seen: {str(last)[:2000]}{extra}")


def condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any] | None:
    return next((c for c in ((obj or {}).get("status") or {}).get("conditions") or [] if c.get("type") == type_), None)


def is_true(obj: dict[str, Any] | None, type_: str) -> bool:
    c = condition(obj, type_)
    return bool(c and c["status"] == "True")


def runtime_patch(tj: dict[str, Any], manager: str) -> dict[str, Any] | None:
    return next((p for p in tj["spec"].get("runtimePatches") or [] if p.get("manager") == manager), None)


def check_state(wl: dict[str, Any] | None, name: str = CHECK) -> dict[str, Any] | None:
    """The Workload's state of one admission check (Pending, Ready, Retry, Rejected) with its message."""
    return next((c for c in ((wl or {}).get("status") or {}).get("admissionChecks") or [] if c["name"] == name), None)


# --------------------------------------------------------------------------------------------------- one plane


@dataclass
class Plane:
    """One control plane: its apiserver, the processes started against it, and typed-enough reads."""

    name: str
    cluster: Cluster
    state_dir: Path
    script: str  # the hack/ script that started it (and stops it)
    workdir: Path
    kueue: KueueProcess | None = None
    webhook: WebhookProcess | None = None
    controller: ControllerProcess | None = None
    timings: dict[str, float] = field(default_factory=dict)

    def k(self, *args: str, input: str | None = None, check: bool = True,
          timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return self.cluster.kubectl(*args, input=input, check=check, timeout=timeout)

    def apply(self, docs: list[dict[str, Any]]) -> None:
        self.k("apply", "--server-side", "--force-conflicts", "-f", "-", input=yaml.safe_dump_all(docs))

    def get(self, kind: str, name: str, namespace: str | None = TEAM_NS) -> dict[str, Any] | None:
        args = ["get", kind, name, "-o", "json", "--ignore-not-found"] + (["-n", namespace] if namespace else [])
        out = self.k(*args).stdout.strip()
        return json.loads(out) if out else None

    def items(self, kind: str, namespace: str | None = TEAM_NS, *selector: str) -> list[dict[str, Any]]:
        args = ["get", kind, "-o", "json", *selector] + (["-n", namespace] if namespace else [])
        return json.loads(self.k(*args).stdout)["items"]

    def trainjob(self, name: str) -> dict[str, Any] | None:
        return self.get("trainjobs.trainer.kubeflow.org", name)

    def jobset(self, name: str) -> dict[str, Any] | None:
        return self.get("jobsets.jobset.x-k8s.io", name)

    def workload_of(self, name: str) -> dict[str, Any] | None:
        """The Workload Kueue created for TrainJob ``name`` (on a worker: the manager's copy, same name)."""
        tj = self.trainjob(name)
        if tj is None:
            return None
        prebuilt = (tj["metadata"].get("labels") or {}).get(PREBUILT_LABEL)
        for wl in self.items("workloads.kueue.x-k8s.io"):
            if prebuilt and wl["metadata"]["name"] == prebuilt:
                return wl
            if any(o.get("uid") == tj["metadata"]["uid"] for o in wl["metadata"].get("ownerReferences") or []):
                return wl
        return None

    def pods_of(self, name: str) -> list[dict[str, Any]]:
        return self.items("pods", TEAM_NS, "-l", f"jobset.sigs.k8s.io/jobset-name={name}")

    def validator_log(self, name: str) -> list[dict[str, Any]]:
        """trainguard's validating webhook's answers about TrainJob ``name``, from its JSON log lines."""
        if self.webhook is None:
            return []
        out = []
        for line in self.webhook.log_path.read_text(errors="replace").splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("webhook") == VALIDATOR and rec.get("object") == name:
                out.append(rec)
        return out

    def diagnostics(self) -> str:
        parts = [f"===== {self.name} ====="]
        wls = self.k("get", "workloads.kueue.x-k8s.io", "-n", TEAM_NS, "-o", "json", check=False)
        if wls.returncode == 0:
            for wl in json.loads(wls.stdout)["items"]:
                st = wl.get("status") or {}
                conds = [f"{c['type']}={c['status']}({c.get('reason')}: {c.get('message', '')[:160]})"
                         for c in st.get("conditions") or []]
                checks = [f"{c['name']}={c['state']}({c.get('message', '')[:200]})" for c in st.get("admissionChecks") or []]
                parts.append(f"workload {wl['metadata']['name']}: clusterName={st.get('clusterName')} "
                             f"conditions={conds} checks={checks}")
        for kind in ("admissionchecks.kueue.x-k8s.io", "multikueueclusters.kueue.x-k8s.io",
                     "clusterqueues.kueue.x-k8s.io"):
            got = self.k("get", kind, "-o", "json", check=False)
            if got.returncode == 0:
                for obj in json.loads(got.stdout)["items"]:
                    conds = [f"{c['type']}={c['status']}({c.get('reason')}: {c.get('message', '')[:160]})"
                             for c in (obj.get("status") or {}).get("conditions") or []]
                    parts.append(f"{kind.split('.')[0]} {obj['metadata']['name']}: {conds}")
        tjs = self.k("get", "trainjobs.trainer.kubeflow.org", "-n", TEAM_NS, "-o", "json", check=False)
        if tjs.returncode == 0:
            for tj in json.loads(tjs.stdout)["items"]:
                parts.append(f"trainjob {tj['metadata']['name']}: labels={tj['metadata'].get('labels')} "
                             f"managedBy={tj['spec'].get('managedBy')} suspend={tj['spec'].get('suspend')} "
                             f"conditions={[(c['type'], c['status']) for c in (tj.get('status') or {}).get('conditions') or []]}")
        if self.kueue is not None:
            parts.append(f"--- kueue log\n{self.kueue.log_tail(20)}")
        if self.webhook is not None:
            parts.append(f"--- trainguard webhook log\n{self.webhook.log_tail(8)}")
        if self.controller is not None:
            parts.append(f"--- trainguard controller log\n{self.controller.log()[-1500:]}")
        for name in ("jobset-controller", "kube-scheduler", "kwok"):
            path = self.state_dir / "e2e" / f"{name}.log"
            if path.exists():
                lines = [ln for ln in path.read_text(errors="replace").splitlines() if "Syncing lease" not in ln]
                parts.append(f"--- {name}\n" + "\n".join(lines[-8:]))
        ev = self.k("get", "events", "-n", TEAM_NS, "--sort-by=.lastTimestamp", check=False).stdout
        parts.append("--- events\n" + "\n".join(ev.splitlines()[-15:]))
        return "\n".join(parts)

    def stop(self) -> list[str]:
        """Stop what was started here, then the control plane; returns what could not be stopped cleanly."""
        problems = []
        if self.controller is not None and self.controller.alive():
            try:
                self.controller.terminate()
            except subprocess.TimeoutExpired:
                self.controller.kill()
        for proc in (self.webhook, self.kueue):
            if proc is not None:
                proc.stop()
        env = {**os.environ, "TRAINGUARD_CLUSTER_DIR": str(self.state_dir)}
        down = subprocess.run([str(HACK / self.script), "down"], capture_output=True, text=True, env=env, timeout=120)
        if down.returncode != 0:
            problems.append(f"{self.name}: hack/{self.script} down failed:\n{down.stderr[-2000:]}")
        shutil.rmtree(self.state_dir, ignore_errors=True)
        return problems


# ---------------------------------------------------------------------------------------------- starting planes


def start_control_plane(role: str) -> tuple[subprocess.Popen[str], Path, str]:
    """Start (not wait for) a control plane: ``manager`` and ``worker`` through hack/e2e-cluster.sh (E2E_ROLE),
    ``bare`` through hack/cluster.sh. Returns the running script, its state directory and the script's name."""
    state_dir = Path(tempfile.mkdtemp(prefix=f"trainguard-mk-{role}-"))
    script = "cluster.sh" if role == "bare" else "e2e-cluster.sh"
    env = {**os.environ, "TRAINGUARD_CLUSTER_DIR": str(state_dir), "E2E_NODES": str(NODES),
           "E2E_GPUS_PER_NODE": str(GPUS_PER_NODE), "E2E_SUCCEED_IMAGE": SUCCEED_IMAGE,
           "E2E_POD_RUN_MS": str(POD_RUN_MS), "E2E_ROLE": "manager" if role == "manager" else "worker"}
    proc = subprocess.Popen([str(HACK / script), "up"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    return proc, state_dir, script


def finish_control_plane(name: str, started: tuple[subprocess.Popen[str], Path, str], workdir: Path,
                         timeout: float = 3600) -> Plane:
    proc, state_dir, script = started
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    if proc.returncode != 0:
        env = {**os.environ, "TRAINGUARD_CLUSTER_DIR": str(state_dir)}
        subprocess.run([str(HACK / script), "down"], capture_output=True, env=env, timeout=120)
        shutil.rmtree(state_dir, ignore_errors=True)
        raise AssertionError(f"hack/{script} up for {name} failed (exit {proc.returncode}):\n{err[-6000:]}")
    cluster = Cluster(out.strip().splitlines()[-1], Path((state_dir / "bin_dir").read_text().strip()))
    workdir.mkdir(parents=True, exist_ok=True)
    return Plane(name, cluster, state_dir, script, workdir)


def install_crds(plane: Plane, kueue_bin: Path) -> None:
    """Kueue's CRDs everywhere; the JobSet, PodGroup and trainguard CRDs where hack/cluster.sh alone started it
    (hack/e2e-cluster.sh installs those itself)."""
    manifests = upstream_crds(kueue_bin, "kueue")
    assert manifests, f"no Kueue CRDs under {kueue_bin}/crds/kueue"
    if plane.script == "cluster.sh":
        manifests += upstream_crds(plane.cluster.bin_dir, "jobset", "scheduler-plugins") + sorted((REPO / "crds").glob("*.yaml"))
    args = ["apply", "--server-side", "--force-conflicts"]
    for m in manifests:
        args += ["-f", str(m)]
    plane.k(*args, timeout=180)
    wait_for_crds(plane.cluster)


def create_namespaces(plane: Plane, *names: str) -> None:
    for name in names:
        plane.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}])


def start_kueue(plane: Plane, kueue_bin: Path, overrides: dict[str, Any] | None = None) -> KueueProcess:
    kueue = KueueProcess(kueue_bin / "kueue", plane.cluster.kubeconfig, plane.workdir / "kueue",
                         config_overrides=overrides or {})
    kueue.start(ready_timeout=180)
    plane.kueue = kueue
    plane.apply(kueue_webhook_configurations(kueue.url_base, kueue.ca_pem, TEAM_NS))
    return kueue


def start_trainguard(plane: Plane, webhook_extra: list[str] = (), controller_extra: list[str] = ()) -> None:  # type: ignore[assignment]
    """trainguard's webhook, registered for the whole private cluster, and its controller for the users' namespace."""
    plane.webhook = start_webhook(plane.cluster, plane.workdir / "webhook", extra=list(webhook_extra))
    reg = Registration(url_base=plane.webhook.url_base, ca_bundle=plane.webhook.ca_pem, own_namespace=SYSTEM_NS)
    plane.apply(webhook_configurations(reg))
    plane.controller = ControllerProcess(plane.cluster.kubeconfig, TEAM_NS, f"{plane.name}-controller", plane.workdir,
                                         workers=2, snapshot_namespace=SYSTEM_NS, extra=list(controller_extra)).start()


def wait_webhooks_called(plane: Plane, timeout: float = 90) -> None:
    """The apiserver picks webhook configurations up asynchronously: a server-side dry-run of a queued TrainJob must
    come back with Kueue's seeded runtimePatch (Kueue's webhook) and, where trainguard runs, be counted by it."""
    probe = yaml.safe_dump(trainjob_manifest("probe", gpus=1, labels={QUEUE_LABEL: QUEUE}))

    def called() -> bool:
        before = plane.webhook.metric("trainguard_admission_requests_total", webhook=VALIDATOR) if plane.webhook else 0
        out = plane.k("create", "--dry-run=server", "-o", "json", "-f", "-", input=probe, check=False)
        if out.returncode != 0 or runtime_patch(json.loads(out.stdout), KUEUE_MANAGER) is None:
            return False
        return plane.webhook is None or plane.webhook.metric(
            "trainguard_admission_requests_total", webhook=VALIDATOR) > before

    wait_for(f"{plane.name}: Kueue's and trainguard's webhooks to be called", called, timeout=timeout,
             diagnostics=plane.diagnostics)


# ------------------------------------------------------------------------------------- what the admin creates


def runtime() -> dict[str, Any]:
    """The ClusterTrainingRuntime the jobs name; MultiKueue needs it on every worker, the same as on the manager."""
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
        "metadata": {"name": RUNTIME, "labels": {"trainer.kubeflow.org/framework": "torch"}},
        "spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "template": {"spec": {"replicatedJobs": [{
            "name": "node",
            "template": {"metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                         "spec": {"template": {"spec": {"containers": [
                             {"name": "node", "image": "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"}]}}}},
        }]}}},
    }


def trainjob_manifest(name: str, *, nodes: int = 1, gpus: int = 4, image: str = SUCCEED_IMAGE,
                      labels: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": TEAM_NS}
    if labels:
        meta["labels"] = labels
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": meta,
        "spec": {
            "runtimeRef": {"name": RUNTIME},
            "trainer": {"image": image, "command": ["torchrun", "/app/train.py"], "numNodes": nodes,
                        "resourcesPerNode": {"requests": {"cpu": "8", "memory": "64Gi", GPU: str(gpus)},
                                             "limits": {GPU: str(gpus)}}},
        },
    }


def queue_objects(node_labels: dict[str, str] | None, gpus: int, check: str | None) -> list[dict[str, Any]]:
    flavor: dict[str, Any] = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                              "metadata": {"name": FLAVOR}, "spec": {}}
    if node_labels:
        flavor["spec"]["nodeLabels"] = node_labels
    cq_spec: dict[str, Any] = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": TEAM_NS}},
        "resourceGroups": [{"coveredResources": ["cpu", "memory", GPU], "flavors": [{"name": FLAVOR, "resources": [
            {"name": "cpu", "nominalQuota": "512"}, {"name": "memory", "nominalQuota": "8Ti"},
            {"name": GPU, "nominalQuota": str(gpus)}]}]}],
    }
    if check:
        cq_spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": check}]}
    return [flavor,
            {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": CLUSTER_QUEUE},
             "spec": cq_spec},
            {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": QUEUE, "namespace": TEAM_NS},
             "spec": {"clusterQueue": CLUSTER_QUEUE}}]


def manager_queue_objects(workers: list[str]) -> list[dict[str, Any]]:
    """The manager's Kueue objects: quota on the manager is what it may dispatch; the check sends it to a worker."""
    return [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "MultiKueueConfig", "metadata": {"name": MK_CONFIG},
         "spec": {"clusters": workers}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck", "metadata": {"name": CHECK},
         "spec": {"controllerName": MULTIKUEUE_CONTROLLER,
                  "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": MK_CONFIG}}},
        *queue_objects(None, NODES * GPUS_PER_NODE, CHECK),
    ]


def worker_queue_objects(node_labels: dict[str, str] | None = None) -> list[dict[str, Any]]:
    return queue_objects(node_labels, NODES * GPUS_PER_NODE, None)


def multikueue_rbac() -> list[dict[str, Any]]:
    """What the manager's Kueue does on a worker (pkg/controller/admissionchecks/multikueue and the TrainJob
    adapter): create, watch, update and delete Workloads (and their status), create, watch and delete the jobs of
    each integration the manager enables (TrainJobs and JobSets here)."""
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "multikueue-manager"},
         "rules": [
             {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"],
              "verbs": ["create", "delete", "get", "list", "watch", "update", "patch"]},
             {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads/status"], "verbs": ["get", "update", "patch"]},
             {"apiGroups": ["trainer.kubeflow.org"], "resources": ["trainjobs"],
              "verbs": ["create", "delete", "get", "list", "watch"]},
             {"apiGroups": ["trainer.kubeflow.org"], "resources": ["trainjobs/status"], "verbs": ["get"]},
             # Kueue watches every enabled integration's kind on each worker and counts the cluster inactive
             # ("cannot watch resource jobsets") without it, though only TrainJobs are dispatched here.
             {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": ["create", "delete", "get", "list", "watch"]},
             {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets/status"], "verbs": ["get"]},
         ]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "multikueue-manager"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "multikueue-manager"},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": MK_USER}]},
    ]


def multikueue_kubeconfig(worker: Plane) -> str:
    """A kubeconfig for user ``multikueue-manager`` on ``worker`` (client certificate from the worker's CA),
    flattened with kubectl so the certificates are inline: Kueue refuses file paths in a MultiKueue kubeconfig."""
    pki, out = worker.state_dir / "pki", worker.workdir / "multikueue"
    out.mkdir(parents=True, exist_ok=True)
    key, csr, crt, ext = (out / f"{MK_USER}.{s}" for s in ("key", "csr", "crt", "ext"))
    ext.write_text("extendedKeyUsage=clientAuth\n")
    for cmd in (["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={MK_USER}", "-keyout", str(key),
                 "-out", str(csr)],
                ["openssl", "x509", "-req", "-in", str(csr), "-CA", str(pki / "ca.crt"), "-CAkey", str(pki / "ca.key"),
                 "-CAcreateserial", "-days", "7", "-extfile", str(ext), "-out", str(crt)]):
        subprocess.run(cmd, check=True, capture_output=True, timeout=60)
    server = yaml.safe_load(Path(worker.cluster.kubeconfig).read_text())["clusters"][0]["cluster"]["server"]
    with_paths = out / "kubeconfig-paths"
    with_paths.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": worker.name,
        "clusters": [{"name": worker.name, "cluster": {"server": server, "certificate-authority": str(pki / "ca.crt")}}],
        "users": [{"name": MK_USER, "user": {"client-certificate": str(crt), "client-key": str(key)}}],
        "contexts": [{"name": worker.name, "context": {"cluster": worker.name, "user": MK_USER}}],
    }))
    flat = subprocess.run([str(worker.cluster.bin_dir / "kubectl"), "--kubeconfig", str(with_paths), "config", "view",
                           "--raw", "--flatten"], capture_output=True, text=True, check=True, timeout=60).stdout
    assert "certificate-authority-data" in flat and "client-key-data" in flat, "kubectl did not inline the certificates"
    return flat


def connect_worker(manager: Plane, worker: Plane) -> None:
    """Give the manager's Kueue access to ``worker``: RBAC for the MultiKueue identity on the worker, its flattened
    kubeconfig in a Secret in Kueue's namespace and a MultiKueueCluster on the manager."""
    worker.apply(multikueue_rbac())
    kubeconfig = multikueue_kubeconfig(worker)
    manager.apply([
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": f"{worker.name}-kubeconfig", "namespace": KUEUE_NS},
         "data": {"kubeconfig": base64.b64encode(kubeconfig.encode()).decode()}},
        multikueue_cluster(worker.name),
    ])


def multikueue_cluster(name: str) -> dict[str, Any]:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "MultiKueueCluster", "metadata": {"name": name},
            "spec": {"clusterSource": {"kubeConfig": {"locationType": "Secret", "location": f"{name}-kubeconfig"}}}}


def manager_kueue_config() -> dict[str, Any]:
    return {"multiKueue": {"gcInterval": f"{GC_INTERVAL_S}s", "origin": ORIGIN,
                           "workerLostTimeout": f"{WORKER_LOST_TIMEOUT_S}s"}}


def wait_cluster_active(manager: Plane, name: str, timeout: float = 90) -> dict[str, Any]:
    return wait_for(f"MultiKueueCluster {name} Active", lambda: (
        (c := manager.get("multikueueclusters.kueue.x-k8s.io", name, None)) and is_true(c, "Active") and c),
        timeout=timeout, diagnostics=manager.diagnostics)


__all__ = [
    "Plane", "start_control_plane", "finish_control_plane", "install_crds", "create_namespaces", "start_kueue",
    "start_trainguard", "wait_webhooks_called", "connect_worker", "manager_queue_objects", "worker_queue_objects",
    "runtime", "trainjob_manifest", "wait_for", "condition", "is_true", "runtime_patch", "check_state",
    "manager_kueue_config", "multikueue_cluster", "wait_cluster_active",
]
