"""Installing the chart with the real helm into a private local control plane, with host processes standing in for
the chart's pods (there is no kubelet here).

- ``chart_control_plane()``: etcd + kube-apiserver from ``hack/cluster.sh`` in a temporary state directory, started
  with ``--enable-aggregator-routing=true`` so that the apiserver reaches a webhook Service through its
  EndpointSlices (the endpoint's address and port), not through a ClusterIP that nothing here routes. Private, so
  that a release's CRDs, webhook configurations (failurePolicy Fail) and uninstall never touch the session's
  cluster. Nothing is pre-installed: the chart brings its own CRDs.
- ``PodStandIn``: one pod of a rendered Deployment as a host process: the container's own args and env (``$(VAR)``
  expanded, ``fieldRef`` metadata resolved), a token of the pod's ServiceAccount (so the chart's RBAC is what it
  runs with), and the container ports moved to free host ports (pods have a network namespace each, host processes
  share one: the ports are the only thing changed in the args). Readiness is the container's readinessProbe. A
  pod behind a Service gets an EndpointSlice of its own whose address is this machine's non-loopback IP (the
  apiserver refuses loopback endpoint addresses) and whose port is the process's, marked ready and not ready as the
  EndpointSlice controller would; the apiserver then calls the webhook by the Service's DNS name, and TLS verifies
  the certificate the webhook issued for that name from the chart's Secret, as in a cluster.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.conftest import HACK, REPO, Cluster, build_tools

CHART = REPO / "charts" / "trainguard"
TRAINGUARD = str(Path(sys.executable).parent / "trainguard")
ENDPOINT_SLICE_LABEL = "kubernetes.io/service-name"
TRAINER = ("trainer.kubeflow.org", "v1alpha1")
# The runtime a namespace user's TrainJob names in the chart tests: plain, one node.
PLAIN_RUNTIME = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
    "metadata": {"name": "plain"},
    "spec": {"mlPolicy": {"numNodes": 1}, "template": {"spec": {"replicatedJobs": [{
        "name": "node",
        "template": {"metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                     "spec": {"template": {"spec": {"containers": [{"name": "node", "image": "python:3.12"}]}}}},
    }]}}},
}


class ApplyLoop(threading.Thread):
    """TrainJobs created back to back by a namespace user's client, each one's outcome recorded (with its time).

    ``cluster`` is anything with ``api_client()`` (the chart's stand-in cluster, the real node's); ``make(name)``
    gives the TrainJob. A steady stream, not a flood: on two cores the same machine runs the control plane and the
    replicas under test.
    """

    def __init__(self, cluster: Any, namespace: str, make: Callable[[str], dict[str, Any]],
                 interval: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.interval = interval
        self.api = client.CustomObjectsApi(cluster.api_client())
        self.namespace, self.make = namespace, make
        self.halt = threading.Event()
        self.created: list[dict[str, Any]] = []
        self.failures: list[str] = []

    def run(self) -> None:
        i = 0
        while not self.halt.is_set():
            try:
                self.created.append(self.api.create_namespaced_custom_object(
                    *TRAINER, self.namespace, "trainjobs", self.make(f"loop-{i}")))
            except ApiException as err:
                at = time.strftime("%H:%M:%S", time.gmtime()) + f"{time.time() % 1:.3f}"[1:]
                self.failures.append(f"loop-{i} at {at} UTC: {err.status} {err.body}")
            except Exception as err:  # noqa: BLE001 - a connection error is a failed apply too
                self.failures.append(f"loop-{i}: {type(err).__name__}: {err}")
            i += 1
            time.sleep(self.interval)


def host_ip() -> str:
    """This machine's address on its default route (a UDP connect sends nothing); never loopback."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.254", 9))
            ip = s.getsockname()[0]
        except OSError:
            ip = ""
    if not ip or ip.startswith("127."):
        addresses = {a[4][0] for a in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)}
        ip = next((a for a in sorted(addresses) if not a.startswith("127.")), "")
    if not ip:
        raise AssertionError("no non-loopback IPv4 address on this machine: the apiserver refuses loopback "
                             "EndpointSlice addresses, so the chart's webhook Service cannot be reached")
    return ip


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        return s.getsockname()[1]


@dataclass
class ChartCluster(Cluster):
    state_dir: Path = Path()
    address: str = ""

    def helm(self, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([str(self.bin_dir / "helm"), "--kubeconfig", self.kubeconfig, *args],
                              capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
        return proc

    def manifest(self, release: str, namespace: str) -> list[dict[str, Any]]:
        """The objects of the release's current revision, as Helm rendered them."""
        out = self.helm("get", "manifest", release, "-n", namespace).stdout
        return [d for d in yaml.load_all(out, Loader=yaml.CSafeLoader) if d]

    def get(self, *args: str) -> dict[str, Any] | None:
        out = self.kubectl("get", *args, "-o", "json", check=False)
        return json.loads(out.stdout) if out.returncode == 0 else None

    def token(self, service_account: str, namespace: str) -> str:
        return self.kubectl("create", "token", service_account, "-n", namespace, "--duration", "2h").stdout.strip()

    def kubeconfig_for(self, token: str, path: Path) -> Path:
        admin = yaml.safe_load(Path(self.kubeconfig).read_text())
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "local", "cluster": admin["clusters"][0]["cluster"]}],
            "users": [{"name": "sa", "user": {"token": token}}],
            "contexts": [{"name": "sa", "context": {"cluster": "local", "user": "sa"}}],
            "current-context": "sa",
        }))
        path.chmod(0o600)
        return path


@contextmanager
def chart_control_plane() -> Iterator[ChartCluster]:
    bin_dir = build_tools("control-plane", "helm")
    state = Path(tempfile.mkdtemp(prefix="trainguard-chart-cluster-"))
    flags = f"{os.environ.get('TRAINGUARD_APISERVER_FLAGS', '')} --enable-aggregator-routing=true".strip()
    env = {**os.environ, "TRAINGUARD_CLUSTER_DIR": str(state), "TRAINGUARD_APISERVER_FLAGS": flags}
    proc = subprocess.run([str(HACK / "cluster.sh"), "up"], capture_output=True, text=True, env=env, timeout=600)
    if proc.returncode != 0:
        shutil.rmtree(state, ignore_errors=True)
        raise AssertionError(f"hack/cluster.sh up failed:\n{proc.stderr}")
    try:
        yield ChartCluster(proc.stdout.strip().splitlines()[-1], bin_dir, state_dir=state, address=host_ip())
    finally:
        subprocess.run([str(HACK / "cluster.sh"), "down"], env=env, capture_output=True, timeout=120)
        shutil.rmtree(state, ignore_errors=True)


_VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def expand(value: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion of args and env values; an unknown $(VAR) stays as written."""
    return _VAR.sub(lambda m: env.get(m.group(1), m.group(0)), value)


class PodStandIn:
    """One replica of a rendered Deployment, as a host process (see the module docstring)."""

    def __init__(self, c: ChartCluster, deployment: dict[str, Any], pod_name: str, log_dir: Path,
                 service: dict[str, Any] | None = None) -> None:
        self.c = c
        self.name = pod_name
        self.namespace = deployment["metadata"]["namespace"]
        self.service = service
        pod = deployment["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        self.container = container
        self.service_account = pod["serviceAccountName"]
        self.ports = {p["name"]: (p["containerPort"], free_port()) for p in container.get("ports", [])}
        env: dict[str, str] = {}
        for e in container.get("env", []):
            if "value" in e:
                env[e["name"]] = expand(e["value"], env)
            else:
                path = e["valueFrom"]["fieldRef"]["fieldPath"]
                env[e["name"]] = {"metadata.namespace": self.namespace, "metadata.name": pod_name}[path]
        self.env = env
        args = [expand(a, env) for a in container["args"]]
        for container_port, host_port in self.ports.values():
            args = [re.sub(rf"(=|=:){container_port}$", rf"\g<1>{host_port}", a) for a in args]
        self.args = args
        self.log_path = log_dir / f"{pod_name}.log"
        self.kubeconfig = log_dir / f"{pod_name}.kubeconfig"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def slice_name(self) -> str:
        return f"{self.service['metadata']['name']}-{self.name}" if self.service else ""

    def start(self, ready_timeout: float = 120) -> "PodStandIn":
        self.c.kubeconfig_for(self.c.token(self.service_account, self.namespace), self.kubeconfig)
        log = open(self.log_path, "ab")
        # In a pod the client uses the in-cluster config of its ServiceAccount; the same token, in a kubeconfig.
        self.proc = subprocess.Popen([TRAINGUARD, *self.args, "--kubeconfig", str(self.kubeconfig)],
                                     stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
                                     env={**os.environ, **self.env, "PYTHONUNBUFFERED": "1"})
        log.close()
        try:
            deadline = time.monotonic() + ready_timeout
            while not self.ready():
                if time.monotonic() > deadline:
                    raise AssertionError(f"{self.name} not ready after {ready_timeout}s:\n{self.log()}")
                time.sleep(0.3)
            if self.service:
                self.publish(ready=True)
        except BaseException:
            self.kill()  # not yet known to the Release: it must not outlive the test
            raise
        return self

    def ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"{self.name} exited {self.proc.returncode}:\n{self.log()}")
        probe = self.container["readinessProbe"]["httpGet"]
        port = probe["port"]
        host_port = self.ports[port][1] if isinstance(port, str) else next(
            h for cp, h in self.ports.values() if cp == port)
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{host_port}{probe['path']}", timeout=2) as resp:
                return resp.status == 200
        except OSError:
            return False

    def publish(self, ready: bool) -> None:
        """This pod's EndpointSlice for its Service, as the EndpointSlice controller keeps it."""
        assert self.service is not None
        svc_port = self.service["spec"]["ports"][0]
        target = svc_port["targetPort"]
        host_port = self.ports[target][1] if isinstance(target, str) else next(
            h for cp, h in self.ports.values() if cp == target)
        body = {
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": self.slice_name, "namespace": self.namespace,
                         "labels": {ENDPOINT_SLICE_LABEL: self.service["metadata"]["name"]}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [self.c.address], "conditions": {"ready": ready},
                           "targetRef": {"kind": "Pod", "name": self.name, "namespace": self.namespace}}],
            "ports": [{"name": svc_port["name"], "port": host_port, "protocol": "TCP"}],
        }
        self.c.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager", "endpointslice-controller",
                       "-f", "-", input=json.dumps(body))

    def terminate(self) -> None:
        """A pod's deletion as the kubelet and the EndpointSlice controller do it: out of the endpoints and SIGTERM
        at once (no preStop delay); the process drains on its own (``stop`` waits for it)."""
        if self.service:
            self.publish(ready=False)
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def stop(self, grace: float = 30) -> None:
        """``terminate``, then the process's own graceful exit, killed after ``grace`` seconds as the kubelet does
        at terminationGracePeriodSeconds; the EndpointSlice goes with the pod."""
        self.terminate()
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if self.service:
            self.c.kubectl("delete", "endpointslice", self.slice_name, "-n", self.namespace, "--ignore-not-found",
                           check=False)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:] if self.log_path.exists() else ""


class Release:
    """A helm release and its stand-in pods: ``webhooks`` behind the webhook Service, ``controllers``."""

    def __init__(self, c: ChartCluster, name: str, namespace: str, log_dir: Path) -> None:
        self.c, self.name, self.namespace, self.log_dir = c, name, namespace, log_dir
        self.webhooks: list[PodStandIn] = []
        self.controllers: list[PodStandIn] = []
        self.terminating: list[PodStandIn] = []  # SIGTERMed, draining
        self._generation = 0

    def helm(self, verb: str, chart: Path = CHART, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return self.c.helm(verb, self.name, str(chart), "-n", self.namespace, *args, timeout=timeout)

    def deployment(self, component: str) -> dict[str, Any]:
        """The live Deployment of a component (what a Deployment controller would read, also mid-upgrade)."""
        out = self.c.kubectl("get", "deployments", "-n", self.namespace, "-o", "json", "-l",
                             f"app.kubernetes.io/name=trainguard,app.kubernetes.io/instance={self.name},"
                             f"app.kubernetes.io/component={component}")
        (deployment,) = json.loads(out.stdout)["items"]
        return deployment

    def _pod(self, component: str) -> PodStandIn:
        deployment = self.deployment(component)
        service = None
        if component == "webhook":
            service = self.c.get("service", deployment["metadata"]["name"], "-n", self.namespace)
            assert service is not None, "the chart has no webhook Service"
        self._generation += 1
        return PodStandIn(self.c, deployment, f"{deployment['metadata']['name']}-{self._generation}", self.log_dir,
                          service)

    def report_rollout(self, component: str) -> None:
        """What the Deployment and ReplicaSet controllers would write once the stand-ins run: a ReplicaSet of the
        Deployment's current template and both statuses, with as many ready replicas as stand-ins are ready (this
        is what ``helm --wait`` reads)."""
        pods = self.webhooks if component == "webhook" else self.controllers
        ready = sum(1 for p in pods if p.proc is not None and p.proc.poll() is None)
        dep = self.deployment(component)
        template = json.loads(json.dumps(dep["spec"]["template"]))
        digest = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:10]
        template["metadata"].setdefault("labels", {})["pod-template-hash"] = digest
        name = f"{dep['metadata']['name']}-{digest}"
        selector = {"matchLabels": {**dep["spec"]["selector"]["matchLabels"], "pod-template-hash": digest}}
        rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet",
              "metadata": {"name": name, "namespace": self.namespace, "labels": template["metadata"]["labels"],
                           "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment",
                                                "name": dep["metadata"]["name"], "uid": dep["metadata"]["uid"],
                                                "controller": True, "blockOwnerDeletion": True}]},
              "spec": {"replicas": dep["spec"]["replicas"], "selector": selector, "template": template}}
        self.c.kubectl("apply", "--server-side", "--field-manager", "deployment-controller", "-f", "-",
                       input=json.dumps(rs))
        live = self.c.get("replicaset", name, "-n", self.namespace)
        assert live is not None
        status = {"replicas": ready, "readyReplicas": ready, "availableReplicas": ready,
                  "observedGeneration": live["metadata"]["generation"]}
        self.c.kubectl("patch", "replicaset", name, "-n", self.namespace, "--subresource=status", "--type=merge",
                       "-p", json.dumps({"status": status}))
        status = {**status, "updatedReplicas": ready, "observedGeneration": dep["metadata"]["generation"]}
        self.c.kubectl("patch", "deployment", dep["metadata"]["name"], "-n", self.namespace, "--subresource=status",
                       "--type=merge", "-p", json.dumps({"status": status}))

    def install_and_wait(self, chart: Path = CHART, *args: str, timeout: float = 420) -> subprocess.CompletedProcess[str]:
        """``helm install --wait``: the stand-ins start once Helm has created the Deployments, as pods would, and
        Helm's post-install hooks run once it sees them ready."""
        cmd = [str(self.c.bin_dir / "helm"), "--kubeconfig", self.c.kubeconfig, "install", self.name, str(chart),
               "-n", self.namespace, "--wait", "--timeout", f"{int(timeout) - 60}s", *args]
        helm = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 120
            while True:
                out = self.c.kubectl("get", "deployments", "-n", self.namespace, "-o", "name", "-l",
                                     f"app.kubernetes.io/name=trainguard,app.kubernetes.io/instance={self.name}",
                                     check=False)
                if len(out.stdout.split()) >= 2:
                    break
                if helm.poll() is not None or time.monotonic() > deadline:
                    stdout, stderr = helm.communicate()
                    raise AssertionError(f"helm install created no Deployments ({helm.returncode}):\n{stderr}")
                time.sleep(0.5)
            for component in ("webhook", "controller"):
                for _ in range(self.deployment(component)["spec"]["replicas"]):
                    (self.start_webhook if component == "webhook" else self.start_controller)()
                self.report_rollout(component)
            stdout, stderr = helm.communicate(timeout=timeout)
        finally:
            if helm.poll() is None:
                helm.kill()
                helm.communicate()
        return subprocess.CompletedProcess(cmd, helm.returncode, stdout, stderr)

    def start_webhook(self) -> PodStandIn:
        pod = self._pod("webhook").start()
        self.webhooks.append(pod)
        return pod

    def start_controller(self) -> PodStandIn:
        pod = self._pod("controller").start()
        self.controllers.append(pod)
        return pod

    def roll_webhooks(self) -> None:
        """A Deployment's rolling update (maxUnavailable 0): a new pod ready, then an old one out, one at a time,
        each new one from the release's current revision. Like the Deployment controller, the next step does not
        wait for a terminating pod to exit: it drains (up to minutes, until the apiserver closes the connections
        it kept alive) while the rollout goes on."""
        for old in list(self.webhooks):
            self.start_webhook()
            old.terminate()
            self.webhooks.remove(old)
            self.terminating.append(old)

    def stop_all(self, grace: float = 10) -> None:
        """Every pod deleted at once (SIGTERM to all, then one shared ``grace`` before the kills): a webhook drains
        until the apiserver closes its idle connections, which nothing here needs to wait out at the end."""
        pods = self.terminating + self.webhooks + self.controllers
        for pod in pods:
            try:
                pod.terminate()
            except Exception:  # noqa: BLE001 - the apiserver may already be gone; the processes must still go
                pod.kill()
        deadline = time.monotonic() + grace
        for pod in pods:
            try:
                pod.stop(max(0.1, deadline - time.monotonic()))
            except Exception:  # noqa: BLE001
                pod.kill()
        self.terminating, self.webhooks, self.controllers = [], [], []
