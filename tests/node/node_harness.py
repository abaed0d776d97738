"""What the node tests share: the chart installed with the images built here, the JobSet controller, waits.

The node itself (containerd + kubelet registered with a local control plane that runs the controllers pods need)
comes from ``tests/node/conftest.py``'s session fixture ``real_node`` (``hack/node.sh``); the images from
``hack/images.sh`` (``make test-node`` builds and loads them before pytest). Everything here talks to that cluster
the way a user does: ``helm``, ``kubectl``, the Kubernetes and Kubeflow Python clients.

- ``NodeCluster``: the node's control plane with the pinned ``kubectl``/``helm`` (``ChartCluster``'s helpers) and
  the real node's name.
- ``install_chart``: ``helm install --wait`` of ``charts/trainguard`` with ``image.repository/tag`` set to the image
  built from the project's ``Dockerfile`` and ``pullPolicy: Never`` (nothing can be pulled here: a pod that needs
  a pull fails instead of hanging), the dataset roots the cache tests write to allowed.
- ``JobSetController``: the JobSet controller v0.12.0 (the version Kubeflow Trainer v2.3 uses) as a host process,
  as ``hack/e2e-cluster.sh`` runs it: there is no JobSet image here. Its upstream ClusterRole is bound to a
  ServiceAccount whose token it uses; its webhooks are registered by loopback URL with a serving certificate made
  for the run. It creates the Jobs, the kubelet runs their pods for real.
- ``ApplyLoop``: TrainJobs created back to back by a namespace user's client, each outcome counted.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

import pytest
import yaml
from kubernetes import client

from tests.conftest import build_tools, upstream_crds, wait_for_crds
from tests.integration.chart.chart_harness import CHART, PLAIN_RUNTIME, ApplyLoop, ChartCluster  # noqa: F401 - for the node tests
from trainguard.webhook.runtime.dataset_cache import SOCKET_HOST_ROOT

# The image names hack/images.sh builds and loads into the node's containerd.
TRAINGUARD_REPOSITORY = "localhost/trainguard/trainguard"
TRAINGUARD_TAG = "dev"
TRAINGUARD_IMAGE = f"{TRAINGUARD_REPOSITORY}:{TRAINGUARD_TAG}"
TRAINER_IMAGE = "localhost/trainguard/trainer:dev"

RELEASE = "trainguard"
NAMESPACE = "trainguard-system"
TRAINGUARD_GROUP = ("trainguard.io", "v1alpha1")
HERE = Path(__file__).resolve().parent
# Node directories a DatasetCache of these tests may read: the chart's datasetCache.allowedHostPathRoots.
SHARD_ROOT = Path("/var/tmp/trainguard-node-tests")
# Where the agents' sockets live on the node: one directory per DatasetCache below it.
SOCKET_ROOT = Path(SOCKET_HOST_ROOT).parent

T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T], timeout: float = 120, every: float = 0.5,
             diagnose: Callable[[], str] | None = None) -> T:
    """Poll ``probe`` until it returns something truthy; on timeout fail naming ``what`` (and ``diagnose()``)."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            extra = f"\n{diagnose()}" if diagnose else ""
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}{extra}")
        time.sleep(every)


@dataclass
class NodeCluster(ChartCluster):
    node_name: str = ""

    def json(self, *args: str) -> dict[str, Any]:
        return json.loads(self.kubectl(*args, "-o", "json").stdout)

    def pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        return self.json("get", "pods", "-n", namespace, "-l", selector)["items"]

    def describe(self, namespace: str, selector: str = "") -> str:
        """Pods and recent events of a namespace, for a failure message."""
        args = ["-l", selector] if selector else []
        pods = self.kubectl("get", "pods", "-n", namespace, "-o", "wide", *args, check=False)
        events = self.kubectl("get", "events", "-n", namespace, "--sort-by=.lastTimestamp", check=False)
        return f"pods:\n{pods.stdout}{pods.stderr}\nevents:\n{events.stdout[-4000:]}"

    def api(self) -> client.ApiClient:
        return self.api_client()


def node_cluster(real_node: Any) -> NodeCluster:
    """The real node's cluster with the pinned kubectl and helm (and the JobSet controller's binary and manifests)."""
    bin_dir = build_tools("control-plane", "helm", "jobset")
    return NodeCluster(kubeconfig=str(real_node.kubeconfig), bin_dir=bin_dir, node_name=real_node.node_name)


def ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in (pod.get("status") or {}).get("conditions") or [])


def chart_sets(*extra: str) -> list[str]:
    sets = [f"image.repository={TRAINGUARD_REPOSITORY}", f"image.tag={TRAINGUARD_TAG}", "image.pullPolicy=Never",
            f"datasetCache.allowedHostPathRoots={{{SHARD_ROOT}}}", *extra]
    return [a for s in sets for a in ("--set", s)]


def install_chart(c: NodeCluster, *extra: str, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    """``helm install --wait`` of the chart with the built image: returns once both Deployments are rolled out (the
    webhook pods Ready behind the Service) and the post-install hooks ran."""
    return c.helm("install", RELEASE, str(CHART), "-n", NAMESPACE, "--create-namespace", "--wait",
                  "--timeout", f"{timeout}s", *chart_sets(*extra), timeout=timeout + 60)


def uninstall_chart(c: NodeCluster) -> None:
    c.helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout", "120s", check=False, timeout=180)


def component_selector(component: str) -> str:
    return f"app.kubernetes.io/name=trainguard,app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component={component}"


def webhook_configurations(c: NodeCluster) -> list[str]:
    out = c.kubectl("get", "mutatingwebhookconfigurations,validatingwebhookconfigurations", "-o", "name").stdout
    return sorted(n for n in out.split() if "jobset" not in n)


def container_pid(c: NodeCluster, pod: dict[str, Any], container: str) -> int:
    """The host pid of a running container's first process: the node is this machine, so /proc shows it. Found by
    the pod UID and container name in the container's cgroup path, which the kubelet (cgroupfs driver) names
    ``kubepods/.../pod<uid>/<container id>``."""
    statuses = pod["status"].get("containerStatuses", []) + pod["status"].get("initContainerStatuses", [])
    (status,) = [s for s in statuses if s["name"] == container]
    container_id = status["containerID"].split("://", 1)[1]
    uid = pod["metadata"]["uid"]
    candidates = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cgroup = (entry / "cgroup").read_text()
        except OSError:
            continue
        if container_id in cgroup and uid.replace("-", "_") in cgroup.replace("-", "_"):
            candidates.append(int(entry.name))
    if not candidates:
        raise AssertionError(f"no host process of container {container} ({container_id}) of pod "
                             f"{pod['metadata']['name']}")
    # The container's init process is the one whose parent is not in the container (the shim).
    return min(candidates)


def process_status(pid: int) -> dict[str, str]:
    return dict(line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":\t" in line)


def root_mount_options(pid: int) -> list[str]:
    """The mount options of the process's root filesystem, as its own mount namespace shows them."""
    for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[4] == "/":
            return fields[5].split(",")
    raise AssertionError(f"no root mount in /proc/{pid}/mountinfo")


def write_shards(directory: Path, sizes: list[int]) -> dict[str, str]:
    """Shard files with known content (mode 0644 in a 0755 directory: the agent runs as a non-root UID), returns
    ``{name: sha256}``."""
    directory.mkdir(parents=True, exist_ok=True)
    for d in (SHARD_ROOT, directory):
        d.chmod(0o755)
    expected = {}
    for i, size in enumerate(sizes):
        data = hashlib.shake_256(f"{directory.name}/{i}".encode()).digest(size)
        path = directory / f"shard-{i:02d}.bin"
        path.write_bytes(data)
        path.chmod(0o644)
        expected[path.name] = hashlib.sha256(data).hexdigest()
    os.sync()
    return expected


def dataset_cache(name: str, namespace: str, directory: Path, budget: str = "64Mi") -> dict[str, Any]:
    return {"apiVersion": "trainguard.io/v1alpha1", "kind": "DatasetCache",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"source": {"hostPath": {"path": str(directory)}, "shards": "*.bin"}, "memoryBudget": budget}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class JobSetController:
    """The JobSet controller v0.12.0 as a host process against the node's control plane (see the module docstring).

    Skipped when the cluster already serves JobSet's webhooks (a control plane that runs its own)."""

    WEBHOOKS = ("jobset-mutating-webhook-configuration", "jobset-validating-webhook-configuration")
    ACCOUNT, ACCOUNT_NAMESPACE = "jobset-controller", "jobset-system"

    def __init__(self, c: NodeCluster, work: Path) -> None:
        self.c, self.work = c, work
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = work / "jobset-controller.log"
        self.registered = False

    def already_running(self) -> bool:
        return self.c.get("mutatingwebhookconfiguration", "jobset-mutating-webhook-configuration") is not None

    def start(self) -> "JobSetController":
        c = self.c
        c.kubectl("apply", "--server-side", "--force-conflicts",
                  *[a for p in upstream_crds(c.bin_dir, "jobset") for a in ("-f", str(p))])
        wait_for_crds(c)
        if self.already_running():
            return self
        manifests = c.bin_dir / "jobset-manifests" / "config" / "components"
        role = yaml.safe_load((manifests / "rbac" / "role.yaml").read_text())
        role["metadata"] = {"name": "jobset-manager-role"}
        c.kubectl("create", "namespace", self.ACCOUNT_NAMESPACE, check=False)
        binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                   "metadata": {"name": "jobset-manager-rolebinding"},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                               "name": "jobset-manager-role"},
                   "subjects": [{"kind": "ServiceAccount", "name": self.ACCOUNT,
                                 "namespace": self.ACCOUNT_NAMESPACE}]}
        account = {"apiVersion": "v1", "kind": "ServiceAccount",
                   "metadata": {"name": self.ACCOUNT, "namespace": self.ACCOUNT_NAMESPACE}}
        c.kubectl("apply", "--server-side", "-f", "-",
                  input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [role, binding, account]}))
        kubeconfig = c.kubeconfig_for(c.token(self.ACCOUNT, self.ACCOUNT_NAMESPACE), self.work / "jobset.kubeconfig")

        certs = self.work / "jobset-certs"
        certs.mkdir(exist_ok=True)
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                        "-subj", "/CN=jobset-webhook", "-addext", "subjectAltName=IP:127.0.0.1",
                        "-keyout", str(certs / "tls.key"), "-out", str(certs / "tls.crt")],
                       check=True, capture_output=True)
        health, webhook = free_port(), free_port()
        config = self.work / "jobset-config.yaml"
        config.write_text(yaml.safe_dump({
            "apiVersion": "config.jobset.x-k8s.io/v1alpha1", "kind": "Configuration",
            "leaderElection": {"leaderElect": False},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{health}"}, "metrics": {"bindAddress": "0"},
            "webhook": {"host": "127.0.0.1", "port": webhook, "certDir": str(certs)},
            "internalCertManagement": {"enable": False},
        }))
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([str(c.bin_dir / "jobset-controller"), "--config", str(config),
                                      "--zap-log-level", "info"], stdout=log, stderr=subprocess.STDOUT,
                                     env={**os.environ, "KUBECONFIG": str(kubeconfig)}, start_new_session=True)
        log.close()

        rendered = c.kubectl("kustomize", str(manifests / "webhook")).stdout
        ca = base64.b64encode((certs / "tls.crt").read_bytes()).decode()
        items = []
        for o in yaml.safe_load_all(rendered):
            if not o or o["kind"] not in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
                continue
            o["metadata"] = {"name": "jobset-" + o["metadata"]["name"]}
            for w in o["webhooks"]:
                w["clientConfig"] = {"url": f"https://127.0.0.1:{webhook}{w['clientConfig']['service']['path']}",
                                     "caBundle": ca}
            items.append(o)
        assert sorted(o["metadata"]["name"] for o in items) == sorted(self.WEBHOOKS), items
        c.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
                  input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
        self.registered = True

        def readyz() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"jobset-controller exited {self.proc.returncode}:\n{self.log()}")
            probe = subprocess.run(["curl", "-sf", f"http://127.0.0.1:{health}/readyz"], capture_output=True)
            return probe.returncode == 0

        wait_for("the JobSet controller's /readyz", readyz, 90, diagnose=self.log)
        probe = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                 "metadata": {"name": "probe", "namespace": "default"},
                 "spec": {"replicatedJobs": [{"name": "w", "template": {"spec": {"template": {"spec": {
                     "restartPolicy": "Never", "containers": [{"name": "c", "image": TRAINER_IMAGE}]}}}}}]}}
        wait_for("the JobSet webhooks to answer the apiserver",
                 lambda: c.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(probe),
                                   check=False).returncode == 0, 60, diagnose=self.log)
        return self

    def stop(self) -> None:
        if self.registered:
            for name in self.WEBHOOKS:
                kind = "mutatingwebhookconfiguration" if "mutating" in name else "validatingwebhookconfiguration"
                self.c.kubectl("delete", kind, name, "--ignore-not-found", check=False)
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:] if self.log_path.exists() else ""


@contextmanager
def jobset_controller(c: NodeCluster) -> Iterator[JobSetController]:
    work = Path(tempfile.mkdtemp(prefix="trainguard-node-jobset-"))
    controller = JobSetController(c, work)
    try:
        yield controller.start()
    except BaseException:
        controller.stop()
        print(f"JobSet controller's log and config kept in {work}")
        raise
    controller.stop()
    # Its certificates, kubeconfig (a ServiceAccount token) and log: nothing to keep once the tests that used it ended.
    shutil.rmtree(work, ignore_errors=True)


def trainjob(name: str, namespace: str, runtime: str = "plain", gpus: int = 0, nodes: int = 1) -> dict[str, Any]:
    trainer: dict[str, Any] = {"numNodes": nodes}
    if gpus:
        trainer["resourcesPerNode"] = {"limits": {"nvidia.com/gpu": gpus}}
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"runtimeRef": {"name": runtime, "kind": "ClusterTrainingRuntime"}, "trainer": trainer}}



def trainer_script() -> str:
    return (HERE / "images" / "check_shards.py").read_text()


# -- fixtures shared by the node test modules (imported there) --------------------------------------------------

@pytest.fixture(scope="session")
def node_cluster_(real_node: Any) -> Iterator[NodeCluster]:
    """The node's cluster; at the end, the node directories these tests made go (shards, and the agents' socket
    directories the kubelet created for the hostPath volumes)."""
    made = [d for d in (SHARD_ROOT, SOCKET_ROOT) if not d.exists()]
    yield node_cluster(real_node)
    for d in made:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def jobset(node_cluster_: NodeCluster) -> Iterator[JobSetController]:
    """JobSet's CRD and controller. Before the chart: the chart's controller watches JobSets, and its pods are not
    Ready until the kind is served."""
    with jobset_controller(node_cluster_) as controller:
        yield controller


@pytest.fixture
def release(node_cluster_: NodeCluster, jobset: JobSetController) -> NodeCluster:
    """The chart installed with the built image (installed once; again after a test uninstalled it)."""
    c = node_cluster_
    if c.helm("status", RELEASE, "-n", NAMESPACE, check=False).returncode != 0:
        started = time.monotonic()
        install_chart(c)
        print(f"helm install --wait with the built image: {time.monotonic() - started:.1f} s")
    return c
