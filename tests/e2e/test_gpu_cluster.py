"""trainguard on a simulated GPU cluster: real JobSet controller, Job controller, scheduler; kwok plays the kubelets.

``hack/e2e-cluster.sh up`` starts etcd + kube-apiserver, kube-controller-manager, kube-scheduler, kwok (4 fake nodes
x 8 ``nvidia.com/gpu``, labelled ``kubernetes.io/hostname`` and ``nvidia.com/gpu.clique``, two nodes per clique) and
the JobSet controller v0.12.0 with its webhooks; this module runs ``trainguard webhook`` and ``trainguard
controller`` against it and checks what the apiserver-only suites cannot: that the JobSets trainguard builds pass
JobSet's own webhooks, and that a TrainJob runs through real Jobs, Pods and scheduling to Complete.

Nothing here is skipped: a piece that cannot be built or started fails the fixture with the reason. The cluster is
module-scoped (torn down after this file) so its idle controllers do not share the 2 cores with later suites.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

import pytest
import yaml

from tests.conftest import Cluster, upstream_crds, wait_for_crds
from trainguard.webhook.admission.certs import new_ca, new_serving_cert
from trainguard.webhook.admission.registration import Registration, webhook_configurations

REPO = Path(__file__).resolve().parents[2]
TRAINGUARD = str(Path(sys.executable).with_name("trainguard"))
# kwok's Stage in hack/e2e-cluster.sh completes Job pods running this image (exit 0) after E2E_POD_RUN_MS.
SUCCEED_IMAGE = "trainguard.invalid/e2e/succeed:v1"
POD_RUN_MS = 2000
NODES, GPUS_PER_NODE = 4, 8
SYSTEM_NS = "trainguard-system"
RUNTIME = "torch-distributed-e2e"
POLICY_LABEL = "trainguard.io/e2e-gpu-policy"
T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T], timeout: float = 60, interval: float = 0.25) -> T:
    """Poll ``probe`` until it returns something truthy; the timeout bounds a failure, it is not a speed check."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last seen: {last!r}")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


@dataclass
class Process:
    name: str
    args: list[str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> "Process":
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
                                         env={**os.environ, "PYTHONUNBUFFERED": "1"})
        return self

    def wait_ready(self, url: str, timeout: float = 60) -> None:
        def ready() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.name} exited with {self.proc.returncode}:\n{self.log_tail()}")
            return http_ok(url)

        try:
            wait_for(f"{self.name} {url}", ready, timeout)
        except AssertionError as err:
            raise AssertionError(f"{err}\n{self.name} log:\n{self.log_tail()}") from None

    def terminate(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


@dataclass
class GpuCluster:
    cluster: Cluster
    state_dir: Path
    webhook: Process
    webhook_health: int
    controller: Process
    timings: dict[str, float] = field(default_factory=dict)

    def kubectl(self, *args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
        return self.cluster.kubectl(*args, **kw)

    def get(self, *args: str) -> dict[str, Any]:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def apply(self, docs: list[dict[str, Any]], *extra: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.kubectl("apply", "--server-side", *extra, "-f", "-", input=yaml.safe_dump_all(docs), check=check)

    def admission_requests(self) -> float:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.webhook_health}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        return sum(
            float(line.rpartition(" ")[2])
            for line in text.splitlines()
            if line.startswith("trainguard_admission_requests_total{")
            and 'webhook="validator.trainjob.trainer.kubeflow.org"' in line
        )

    def diagnostics(self) -> str:
        """What to read when a wait fails: the components' log tails and the namespace's events."""
        parts = [f"--- trainguard controller ---\n{self.controller.log_tail(25)}",
                 f"--- trainguard webhook ---\n{self.webhook.log_tail(10)}"]
        for name in ("jobset-controller", "kube-controller-manager", "kube-scheduler", "kwok"):
            path = self.state_dir / "e2e" / f"{name}.log"
            if path.exists():
                lines = [ln for ln in path.read_text(errors="replace").splitlines() if "Syncing lease" not in ln]
                tail = "\n".join(lines[-15:])
                parts.append(f"--- {name} ---\n{tail}")
        ev = self.kubectl("get", "events", "-A", "--sort-by=.lastTimestamp", check=False).stdout
        parts.append("--- events ---\n" + "\n".join(ev.splitlines()[-25:]))
        return "\n".join(parts)


def run_e2e_cluster(action: str, state_dir: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TRAINGUARD_CLUSTER_DIR": str(state_dir), "E2E_NODES": str(NODES),
           "E2E_GPUS_PER_NODE": str(GPUS_PER_NODE), "E2E_SUCCEED_IMAGE": SUCCEED_IMAGE,
           "E2E_POD_RUN_MS": str(POD_RUN_MS)}
    return subprocess.run([str(REPO / "hack" / "e2e-cluster.sh"), action], capture_output=True, text=True, env=env,
                          timeout=timeout)


@pytest.fixture(scope="module")
def gpu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GpuCluster]:
    state_dir = Path(tempfile.mkdtemp(prefix="trainguard-e2e-"))
    work = tmp_path_factory.mktemp("gpu-cluster")
    t0 = time.monotonic()
    # Builds what is missing (hack/build-tools.sh e2e), then starts everything; 3600 s covers a cold Go build.
    proc = run_e2e_cluster("up", state_dir, timeout=3600)
    if proc.returncode != 0:
        shutil.rmtree(state_dir, ignore_errors=True)
        pytest.fail(f"hack/e2e-cluster.sh up failed (exit {proc.returncode}); the simulated GPU cluster is required "
                    f"for tests/e2e/test_gpu_cluster.py:\n{proc.stderr[-6000:]}", pytrace=False)
    procs: list[Process] = []
    try:
        kubeconfig = proc.stdout.strip().splitlines()[-1]
        cluster = Cluster(kubeconfig, Path((state_dir / "bin_dir").read_text().strip()))
        startup = time.monotonic() - t0
        manifests = upstream_crds(cluster.bin_dir, "jobset", "scheduler-plugins") + sorted((REPO / "crds").glob("*.yaml"))
        args = ["apply", "--server-side", "--force-conflicts"]
        for m in manifests:
            args += ["-f", str(m)]
        cluster.kubectl(*args, timeout=120)
        wait_for_crds(cluster)
        cluster.kubectl("create", "namespace", SYSTEM_NS)

        # trainguard webhook: certificates from a throwaway CA, registered by URL for the whole (private) cluster.
        now = datetime.now(timezone.utc)
        ca = new_ca(now=now, lifetime=timedelta(days=1), common_name="trainguard-e2e-ca")
        leaf = new_serving_cert(ca, dns_names=["localhost"], ip_addresses=["127.0.0.1"], now=now,
                                lifetime=timedelta(days=1))
        certs = work / "certs"
        certs.mkdir()
        (certs / "tls.crt").write_bytes(leaf.cert_pem)
        (certs / "tls.key").write_bytes(leaf.key_pem)
        port, health = free_port(), free_port()
        webhook = Process("trainguard webhook", [
            TRAINGUARD, "webhook", "--bind-address", "127.0.0.1", "--port", str(port), "--health-port", str(health),
            "--kubeconfig", kubeconfig, "--cert-dir", str(certs), "--log-level", "info"], work / "webhook.log")
        procs.append(webhook.start())
        webhook.wait_ready(f"http://127.0.0.1:{health}/readyz", timeout=90)
        reg = Registration(url_base=f"https://127.0.0.1:{port}", ca_bundle=ca.cert_pem, own_namespace=SYSTEM_NS)
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(webhook_configurations(reg)))

        metrics = free_port()
        controller = Process("trainguard controller", [
            TRAINGUARD, "controller", "--kubeconfig", kubeconfig, "--metrics-bind-address", f"127.0.0.1:{metrics}",
            "--leader-elect-namespace", SYSTEM_NS, "--log-level", "INFO"], work / "controller.log")
        procs.append(controller.start())
        controller.wait_ready(f"http://127.0.0.1:{metrics}/readyz", timeout=90)

        g = GpuCluster(cluster, state_dir, webhook, health, controller, {"cluster up (s)": startup})
        # The apiserver picks up webhook configurations asynchronously: probe until trainguard answers a review.
        probe = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                 "metadata": {"name": "probe", "namespace": "default"}, "spec": {"runtimeRef": {"name": "none"}}}
        before = g.admission_requests()

        def called() -> bool:
            cluster.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(probe), check=False)
            return g.admission_requests() > before

        wait_for("the apiserver to call trainguard's webhook", called, timeout=60)
        g.timings["ready for tests (s)"] = time.monotonic() - t0
        yield g
    finally:
        t_down = time.monotonic()
        for p in procs:
            p.terminate()
        for p in reversed(procs):
            p.stop()
        trainguard_stop = time.monotonic() - t_down
        print(f"teardown: trainguard processes stopped in {trainguard_stop:.1f}s")
        down = run_e2e_cluster("down", state_dir, timeout=120)
        print(f"teardown: e2e-cluster down after {time.monotonic() - t_down:.1f}s")
        shutil.rmtree(state_dir, ignore_errors=True)
        assert down.returncode == 0, f"hack/e2e-cluster.sh down failed:\n{down.stderr}"


def runtime() -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
        "metadata": {"name": RUNTIME, "labels": {"trainer.kubeflow.org/framework": "torch"}},
        "spec": {
            "mlPolicy": {"numNodes": 1, "torch": {}},
            "template": {"spec": {"replicatedJobs": [{
                "name": "node",
                "template": {
                    "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                    "spec": {"template": {"spec": {"containers": [
                        {"name": "node", "image": "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"}]}}},
                },
            }]}},
        },
    }


def trainjob(name: str, namespace: str, num_nodes: int, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "runtimeRef": {"name": RUNTIME},
            "trainer": {
                "image": SUCCEED_IMAGE, "command": ["torchrun", "/app/train.py"], "numNodes": num_nodes,
                "resourcesPerNode": {"requests": {"cpu": "32", "memory": "256Gi"},
                                     "limits": {"nvidia.com/gpu": gpus}},
            },
        },
    }


def new_namespace(g: GpuCluster, prefix: str, labels: dict[str, str] | None = None) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    g.kubectl("apply", "-f", "-", input=json.dumps(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}}))
    # kube-controller-manager's serviceaccount controller: without the default ServiceAccount no Pod is admitted.
    wait_for(f"ServiceAccount {name}/default", lambda: g.kubectl(
        "-n", name, "get", "serviceaccount", "default", check=False).returncode == 0, timeout=30)
    return name


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return c
    return None


class PodWatch:
    """Every phase each Pod of a namespace goes through, from a watch (a poll could miss a short Running). Short
    watch requests, resumed from the last resourceVersion, so no stream outlives the test (an open watch would hold
    up the apiserver's shutdown)."""

    def __init__(self, g: GpuCluster, namespace: str) -> None:
        from kubernetes import client

        self.core = client.CoreV1Api(g.cluster.api_client())
        self.phases: dict[str, list[str]] = {}
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.namespace = namespace
        self.error: str | None = None
        self.resource_version = self.core.list_namespaced_pod(namespace).metadata.resource_version
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        from kubernetes import watch

        try:
            while not self.stopped.is_set():
                for ev in watch.Watch().stream(self.core.list_namespaced_pod, self.namespace, timeout_seconds=2,
                                               resource_version=self.resource_version):
                    pod = ev["object"]
                    self.resource_version = pod.metadata.resource_version
                    with self.lock:
                        seen = self.phases.setdefault(pod.metadata.name, [])
                        if pod.status.phase and (not seen or seen[-1] != pod.status.phase):
                            seen.append(pod.status.phase)
        except Exception as err:  # reported by the assertions that read the phases
            self.error = repr(err)

    def snapshot(self) -> dict[str, list[str]]:
        with self.lock:
            return {k: list(v) for k, v in self.phases.items()}

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(timeout=10)


def test_trainjob_runs_to_complete_on_simulated_gpu_nodes(gpu: GpuCluster) -> None:
    """2 nodes x 8 GPUs: JobSet webhook admits trainguard's JobSet, Jobs and Pods are created, scheduled onto kwok GPU
    nodes, run and succeed; the JobSet completes and the TrainJob becomes Complete with jobsStatus."""
    ns = new_namespace(gpu, "e2e-torch")
    pods = PodWatch(gpu, ns)
    t0 = time.monotonic()
    gpu.apply([runtime(), trainjob("llm-ddp", ns, num_nodes=2, gpus=GPUS_PER_NODE)])
    try:
        js = wait_for("the JobSet", lambda: gpu.kubectl("-n", ns, "get", "jobset", "llm-ddp", "-o", "json",
                                                       check=False).stdout, timeout=30)
        jobset = json.loads(js)
        gpu.timings["apply -> JobSet (s)"] = time.monotonic() - t0
        # Fields only JobSet's mutating webhook sets (trainguard's JobSet and the CRD schema leave them out): the
        # apiserver sent trainguard's JobSet through JobSet's webhooks, and the validating one accepted it.
        spec = jobset["spec"]
        assert spec["startupPolicy"] == {"startupPolicyOrder": "AnyOrder"}, spec
        assert spec["successPolicy"]["operator"] == "All", spec
        assert spec["network"]["publishNotReadyAddresses"] is True, spec
        node_job = spec["replicatedJobs"][0]["template"]["spec"]
        assert node_job["completionMode"] == "Indexed" and node_job["parallelism"] == 2, node_job
        assert node_job["template"]["spec"]["restartPolicy"] == "OnFailure"

        # The JobSet controller creates the Job; the Job controller creates one Pod per completion index.
        jobs = wait_for("the JobSet's Job", lambda: gpu.get("jobs", "-n", ns, "-l",
                                                            "jobset.sigs.k8s.io/jobset-name=llm-ddp")["items"],
                        timeout=30)
        assert [j["metadata"]["name"] for j in jobs] == ["llm-ddp-node-0"]
        assert jobs[0]["spec"]["completions"] == 2

        def bound_pods() -> list[dict[str, Any]]:
            items = gpu.get("pods", "-n", ns)["items"]
            return items if len(items) == 2 and all(p["spec"].get("nodeName") for p in items) else []

        items = wait_for("2 pods bound to nodes", bound_pods, timeout=45)
        gpu.timings["apply -> pods bound (s)"] = time.monotonic() - t0
        ranks = set()
        for pod in items:
            meta, pspec = pod["metadata"], pod["spec"]
            index = meta["annotations"]["batch.kubernetes.io/job-completion-index"]
            ranks.add(index)
            assert meta["labels"]["jobset.sigs.k8s.io/jobset-name"] == "llm-ddp"
            assert pspec["nodeName"].startswith("kwok-gpu-"), pspec["nodeName"]
            assert pspec["hostname"] == f"llm-ddp-node-0-{index}" and pspec["subdomain"] == "llm-ddp"
            (container,) = pspec["containers"]
            assert container["resources"]["limits"]["nvidia.com/gpu"] == str(GPUS_PER_NODE)
            env = {e["name"]: e for e in container["env"]}
            assert env["PET_NNODES"]["value"] == "2"
            assert env["PET_MASTER_ADDR"]["value"] == "llm-ddp-node-0-0.llm-ddp"
            assert env["PET_MASTER_PORT"]["value"] == "29500"
            assert "PET_NPROC_PER_NODE" in env
            assert env["PET_NODE_RANK"]["valueFrom"]["fieldRef"]["fieldPath"] == \
                "metadata.annotations['batch.kubernetes.io/job-completion-index']"
        assert ranks == {"0", "1"}
        # 8 GPUs each on 8-GPU nodes: kube-scheduler had to put them on two different nodes.
        assert len({p["spec"]["nodeName"] for p in items}) == 2

        done = wait_for("the JobSet to complete", lambda: (c := condition(gpu.get("jobset", "-n", ns, "llm-ddp"),
                                                                            "Completed")) and c["status"] == "True",
                        timeout=90)
        assert done
        gpu.timings["apply -> JobSet Completed (s)"] = time.monotonic() - t0

        def complete() -> dict[str, Any] | None:
            tj = gpu.get("trainjob", "-n", ns, "llm-ddp")
            c = condition(tj, "Complete")
            return tj if c and c["status"] == "True" else None

        tj = wait_for("the TrainJob to become Complete", complete, timeout=60)
        gpu.timings["apply -> TrainJob Complete (s)"] = time.monotonic() - t0
        assert tj["status"]["jobsStatus"] == [
            {"name": "node", "ready": 0, "succeeded": 1, "failed": 0, "active": 0, "suspended": 0}], tj["status"]
        assert tj["metadata"]["labels"]["trainguard.io/state"] == "Complete"
        phases = pods.snapshot()
        assert len(phases) == 2 and all(p[-2:] == ["Running", "Succeeded"] for p in phases.values()), (
            phases, pods.error)
        for pod in gpu.get("pods", "-n", ns)["items"]:
            (status,) = pod["status"]["containerStatuses"]
            assert status["state"]["terminated"]["exitCode"] == 0, status
    except AssertionError as err:
        raise AssertionError(f"{err}\n{gpu.diagnostics()}") from None
    finally:
        pods.stop()
        print("e2e timings:", json.dumps({k: round(v, 1) for k, v in gpu.timings.items()}))


def test_jobset_webhook_rejects_an_invalid_jobset(gpu: GpuCluster) -> None:
    """JobSet's validating webhook is really in the apiserver's path (the schema alone would accept this)."""
    bad = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "bad", "namespace": "default"},
           "spec": {"successPolicy": {"operator": "All", "targetReplicatedJobs": ["missing"]},
                    "replicatedJobs": [{"name": "w", "template": {"spec": {"template": {"spec": {
                        "restartPolicy": "Never", "containers": [{"name": "c", "image": SUCCEED_IMAGE}]}}}}}]}}
    proc = gpu.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(bad), check=False)
    assert proc.returncode != 0
    # The message is JobSet's webhook's (pkg/webhooks/jobset_webhook.go); controller-runtime returns it as an
    # Invalid status, which the apiserver passes through without the "admission webhook ... denied" prefix.
    assert "invalid replicatedJob name 'missing' does not appear in .spec.ReplicatedJobs" in proc.stderr, proc.stderr


def test_too_many_gpus_pends_unschedulable_and_the_topology_policy_denies_it(gpu: GpuCluster) -> None:
    """1 node x 16 GPUs fits no 8-GPU node: without a policy it is admitted and its Pod stays Pending
    (Unschedulable); with a TrainJobPolicy whose topology levels describe this cluster (host = 8, clique = 16) the
    same TrainJob is denied at kubectl apply, while 2 x 8 GPUs (one clique) is still admitted."""
    ns = new_namespace(gpu, "e2e-wide")
    t0 = time.monotonic()
    gpu.apply([runtime(), trainjob("too-wide", ns, num_nodes=1, gpus=16)])
    policy = {
        "apiVersion": "trainguard.io/v1alpha1", "kind": "TrainJobPolicy", "metadata": {"name": f"e2e-topology-{ns}"},
        "spec": {"mode": "Enforce",
                 "selector": {"namespaceSelector": {"matchLabels": {POLICY_LABEL: ns}}},
                 "topology": {"placement": "Required", "target": "Kueue", "levels": [
                     {"nodeLabel": "kubernetes.io/hostname", "gpusPerDomain": GPUS_PER_NODE},
                     {"nodeLabel": "nvidia.com/gpu.clique", "gpusPerDomain": 2 * GPUS_PER_NODE}]}},
    }
    try:
        def unschedulable() -> dict[str, Any] | None:
            items = gpu.get("pods", "-n", ns)["items"]
            if len(items) != 1:
                return None
            c = condition(items[0], "PodScheduled")
            return items[0] if c and c["status"] == "False" and c.get("reason") == "Unschedulable" else None

        pod = wait_for("the 16-GPU pod to be marked Unschedulable", unschedulable, timeout=45)
        gpu.timings["apply -> Unschedulable (s)"] = time.monotonic() - t0
        message = condition(pod, "PodScheduled")["message"]
        assert f"0/{NODES} nodes are available" in message and "Insufficient nvidia.com/gpu" in message, message
        time.sleep(2)  # still Pending a little later, and the TrainJob is not finished
        pod = gpu.get("pod", "-n", ns, pod["metadata"]["name"])
        assert pod["status"]["phase"] == "Pending" and not pod["spec"].get("nodeName")
        tj = gpu.get("trainjob", "-n", ns, "too-wide")
        assert not condition(tj, "Complete") and not condition(tj, "Failed"), tj.get("status")

        # The policy variant: the same request is denied at apply, naming the level it does not fit.
        gpu.kubectl("label", "namespace", ns, f"{POLICY_LABEL}={ns}")
        gpu.apply([policy])

        def denied() -> str:
            proc = gpu.apply([trainjob("too-wide-2", ns, num_nodes=1, gpus=16)], "--dry-run=server", check=False)
            return proc.stderr if proc.returncode != 0 else ""

        stderr = wait_for("the policy to deny a 16-GPU node", denied, timeout=30)
        gpu.timings["apply -> policy denial (s)"] = time.monotonic() - t0
        assert 'admission webhook "validator.trainjob.trainer.kubeflow.org" denied the request' in stderr, stderr
        assert "16 GPUs per node exceed the 8 GPUs one kubernetes.io/hostname domain holds" in stderr, stderr
        proc = gpu.apply([trainjob("fits-a-clique", ns, num_nodes=2, gpus=GPUS_PER_NODE)], "--dry-run=server",
                         "-o", "json", check=False)
        assert proc.returncode == 0, proc.stderr
        annotations = json.loads(proc.stdout)["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"][
            "replicatedJobs"][0]["template"]["spec"]["template"]["metadata"]["annotations"]
        assert annotations["kueue.x-k8s.io/podset-required-topology"] == "nvidia.com/gpu.clique"

        # kube-controller-manager's garbage collector: deleting the TrainJob takes its JobSet, Job and Pod along.
        gpu.kubectl("-n", ns, "delete", "trainjob", "too-wide", "--wait=false")
        wait_for("the garbage collector to delete the JobSet, Job and Pod", lambda: not any(
            gpu.get(kind, "-n", ns)["items"] for kind in ("jobsets", "jobs", "pods")), timeout=60)
        gpu.timings["apply -> garbage collected (s)"] = time.monotonic() - t0
    except AssertionError as err:
        raise AssertionError(f"{err}\n{gpu.diagnostics()}") from None
    finally:
        gpu.kubectl("delete", "trainjobpolicy", policy["metadata"]["name"], "--ignore-not-found", check=False)
        print("e2e timings:", json.dumps({k: round(v, 1) for k, v in gpu.timings.items()}))
