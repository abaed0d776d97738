"""trainguard's topology hints, honoured by the REAL Kueue Topology-Aware Scheduling, on real (kwok) pods.

The two e2e harnesses combined: ``hack/e2e-cluster.sh`` (kube-controller-manager, kube-scheduler, kwok with 4 fake
nodes x 8 ``nvidia.com/gpu`` = 2 NVLink cliques (``nvidia.com/gpu.clique``) x 2 nodes, the JobSet controller) plus the
Kueue v0.17.0 manager out of cluster (``tests/e2e/kueue_harness.py``, TopologyAwareScheduling on), ``trainguard
webhook`` and ``trainguard controller``. Kueue gets a ``Topology`` [clique, hostname], a ResourceFlavor with that
``topologyName`` and the GPU nodes' label, a ClusterQueue with quota for all 32 GPUs and a LocalQueue; trainguard a
TrainJobPolicy (topology host = 8, clique = 16, Required, target Kueue; the Kueue queue by default).

What the tests show, each through the whole chain TrainJob -> trainguard's runtimePatch -> Kueue Workload (PodSet
topology request) -> TopologyAssignment -> Kueue's patch (scheduling gate) -> JobSet -> Job -> Pods ungated by Kueue
with a hostname nodeSelector -> kube-scheduler -> kwok -> Complete:

* 1 x 8 GPUs gets the host level and one host;
* 2 x 8 GPUs gets ``podset-required-topology: nvidia.com/gpu.clique``; with one node of each clique taken by a
  pod Kueue does not manage, Kueue keeps it pending although quota and 16 free GPUs exist (a job the user declared
  unconstrained is admitted across the cliques at the same moment), and admits it into the clique that frees up;
* 4 x 4 GPUs gets the clique level plus host slices of 2 pods (``podset-slice-*``), which Kueue places as 2 pods per
  host in one clique;
* 3 x 8 GPUs (more than a clique) is denied at apply in Enforce; in Audit it is admitted with the warning, gets no
  hint, and Kueue spreads it over both cliques;
* a user's own multi-layer slice annotation (Kueue 0.17, gate TASMultiLayerTopology, on here) gets no trainguard
  hint beside it (Kueue's webhook denies it next to two-level slice annotations) and Kueue places it.

Nothing is skipped: a piece that cannot be built or started fails the fixture with the reason. Everything started
here is stopped at module teardown.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from tests.conftest import Cluster, upstream_crds, wait_for_crds
from tests.e2e.kueue_harness import KueueProcess, build_kueue, kueue_webhook_configurations
from tests.e2e.test_gpu_cluster import (
    GPUS_PER_NODE,
    NODES,
    SUCCEED_IMAGE,
    condition,
    run_e2e_cluster,
    wait_for,
)
from tests.integration.conftest import register, start_webhook
from tests.integration.reconcile.reconcile_harness import ControllerProcess

CLIQUE = "nvidia.com/gpu.clique"
HOST = "kubernetes.io/hostname"
GPU = "nvidia.com/gpu"
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
UNCONSTRAINED = "kueue.x-k8s.io/podset-unconstrained-topology"
SLICE_LEVEL = "kueue.x-k8s.io/podset-slice-required-topology"
SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"
SLICE_CONSTRAINTS = "kueue.x-k8s.io/podset-slice-required-topology-constraints"
TOPOLOGY_GATE = "kueue.x-k8s.io/topology"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
POLICY_MANAGER = "trainguard.io/policy"
KUEUE_MANAGER = "kueue.x-k8s.io/manager"
RUNTIME = "torch-tas-e2e"
# Node label a ResourceFlavor selects (hack/e2e-cluster.sh labels every fake GPU node with it).
GPU_NODE_LABEL = {"nvidia.com/gpu.present": "true"}


@dataclass
class TasEnv:
    cluster: Cluster
    state_dir: Path
    namespace: str
    queue: str
    policy: str
    webhook: Any  # tests.integration.conftest.WebhookProcess
    kueue: KueueProcess
    controller: ControllerProcess
    node_clique: dict[str, str]

    def k(self, *args: str, input: str | None = None, check: bool = True):
        return self.cluster.kubectl(*args, input=input, check=check)

    def get(self, kind: str, name: str | None = None) -> Any:
        args = ["get", kind] + ([name] if name else []) + ["-n", self.namespace, "-o", "json"]
        return json.loads(self.k(*args).stdout)

    def apply_trainjob(self, body: dict[str, Any]) -> tuple[dict[str, Any], str]:
        """kubectl apply: the object as stored at CREATE (after every mutating webhook) and kubectl's stderr."""
        proc = self.k("apply", "-f", "-", "-o", "json", input=yaml.safe_dump(body))
        return json.loads(proc.stdout), proc.stderr

    def workload_of(self, name: str) -> dict[str, Any] | None:
        uid = self.get("trainjobs.trainer.kubeflow.org", name)["metadata"]["uid"]
        return next((w for w in self.get("workloads.kueue.x-k8s.io")["items"]
                     if any(o.get("uid") == uid for o in w["metadata"].get("ownerReferences") or [])), None)

    def pods_of(self, name: str) -> list[dict[str, Any]]:
        return json.loads(self.k("get", "pods", "-n", self.namespace, "-l", f"jobset.sigs.k8s.io/jobset-name={name}",
                                 "-o", "json").stdout)["items"]

    def diagnostics(self) -> str:
        parts = [f"--- kueue log\n{self.kueue.log_tail(30)}", f"--- webhook log\n{self.webhook.log_tail(10)}",
                 f"--- controller log\n{self.controller.log()[-2000:]}"]
        for name in ("jobset-controller", "kube-scheduler", "kwok"):
            path = self.state_dir / "e2e" / f"{name}.log"
            if path.exists():
                lines = [ln for ln in path.read_text(errors="replace").splitlines() if "Syncing lease" not in ln]
                parts.append(f"--- {name}\n" + "\n".join(lines[-10:]))
        wls = self.k("get", "workloads.kueue.x-k8s.io", "-n", self.namespace, "-o", "yaml", check=False).stdout
        parts.append("--- workloads\n" + wls[-4000:])
        ev = self.k("get", "events", "-n", self.namespace, "--sort-by=.lastTimestamp", check=False).stdout
        parts.append("--- events\n" + "\n".join(ev.splitlines()[-20:]))
        return "\n".join(parts)


KEEPS_RUNNING_IMAGE = "trainguard.invalid/e2e/keeps-running:v1"  # kwok runs any image but the succeed one forever


def trainjob(name: str, namespace: str, num_nodes: int, gpus: int,
             user_annotations: dict[str, str] | None = None, image: str = SUCCEED_IMAGE) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "runtimeRef": {"name": RUNTIME, "kind": "TrainingRuntime", "apiGroup": "trainer.kubeflow.org"},
            "trainer": {"image": image, "command": ["torchrun", "/app/train.py"], "numNodes": num_nodes,
                        "resourcesPerNode": {"requests": {"cpu": "8", "memory": "64Gi", GPU: str(gpus)},
                                             "limits": {GPU: str(gpus)}}},
        },
    }
    if user_annotations:
        # The user's own patch: trainguard writes no hint where another manager already declared a topology.
        body["spec"]["runtimePatches"] = [{"manager": "e2e.example.com/user", "trainingRuntimeSpec": {"template": {
            "spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": {
                "metadata": {"annotations": user_annotations}}}}}]}}}}]
    return body


def setup_objects(namespace: str, queue: str, suffix: str) -> list[dict[str, Any]]:
    runtime = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
        # The framework label: the kubeflow SDK refuses a runtime without it.
        "metadata": {"name": RUNTIME, "namespace": namespace, "labels": {"trainer.kubeflow.org/framework": "torch"}},
        "spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "template": {"spec": {"replicatedJobs": [{
            "name": "node",
            "template": {"metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                         "spec": {"template": {"spec": {"containers": [{"name": "node", "image": "pytorch/pytorch:2"}]}}}},
        }]}}},
    }
    topology = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Topology", "metadata": {"name": f"nvlink-{suffix}"},
                "spec": {"levels": [{"nodeLabel": CLIQUE}, {"nodeLabel": HOST}]}}
    flavor = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": f"gpu-{suffix}"},
              "spec": {"nodeLabels": GPU_NODE_LABEL, "topologyName": f"nvlink-{suffix}"}}
    total = NODES * GPUS_PER_NODE
    cluster_queue = {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": f"cq-{suffix}"},
        "spec": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "resourceGroups": [{"coveredResources": ["cpu", "memory", GPU], "flavors": [{
                "name": f"gpu-{suffix}", "resources": [
                    {"name": "cpu", "nominalQuota": "512"}, {"name": "memory", "nominalQuota": "8Ti"},
                    {"name": GPU, "nominalQuota": str(total)}]}]}],
        },
    }
    local_queue = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                   "metadata": {"name": queue, "namespace": namespace}, "spec": {"clusterQueue": f"cq-{suffix}"}}
    policy = {
        "apiVersion": "trainguard.io/v1alpha1", "kind": "TrainJobPolicy", "metadata": {"name": f"tas-{suffix}"},
        "spec": {"mode": "Enforce",
                 "selector": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}},
                 "scheduling": {"kueue": {"queueName": queue}},
                 "topology": {"placement": "Required", "target": "Kueue", "levels": [
                     {"nodeLabel": HOST, "gpusPerDomain": GPUS_PER_NODE},
                     {"nodeLabel": CLIQUE, "gpusPerDomain": 2 * GPUS_PER_NODE}]}},
    }
    return [runtime, topology, flavor, cluster_queue, local_queue, policy]


CLUSTER_SCOPED = {"Topology": "topologies.kueue.x-k8s.io", "ResourceFlavor": "resourceflavors.kueue.x-k8s.io",
                  "ClusterQueue": "clusterqueues.kueue.x-k8s.io", "TrainJobPolicy": "trainjobpolicies.trainguard.io"}


def _policy_pod_annotations(tj: dict[str, Any]) -> dict[str, str]:
    patch = next((p for p in tj["spec"].get("runtimePatches") or [] if p["manager"] == POLICY_MANAGER), None)
    if patch is None:
        return {}
    rjobs = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    (node,) = [r for r in rjobs if r["name"] == "node"]
    return node["template"]["spec"]["template"]["metadata"]["annotations"]


def _true(obj: dict[str, Any] | None, type_: str) -> bool:
    c = condition(obj or {}, type_)
    return bool(c and c["status"] == "True")


def topology_assignment(wl: dict[str, Any]) -> tuple[list[str], dict[tuple[str, ...], int]]:
    """Kueue v1beta2's compressed TopologyAssignment expanded: its levels and pods per domain (values per level)."""
    (psa,) = wl["status"]["admission"]["podSetAssignments"]
    ta = psa.get("topologyAssignment")
    assert ta, f"Kueue admitted without a TopologyAssignment: {psa}"
    out: dict[tuple[str, ...], int] = {}
    for s in ta["slices"]:
        n = s["domainCount"]

        def values(v: dict[str, Any]) -> list[str]:
            if "universal" in v:
                return [v["universal"]] * n
            ind = v["individual"]
            return [(ind.get("prefix") or "") + r + (ind.get("suffix") or "") for r in ind["roots"]]

        per_level = [values(v) for v in s["valuesPerLevel"]]
        counts = s["podCounts"]
        pods = [counts["universal"]] * n if "universal" in counts else counts["individual"]
        for i in range(n):
            key = tuple(level[i] for level in per_level)
            out[key] = out.get(key, 0) + pods[i]
    return ta["levels"], out


def assigned_hosts(env: TasEnv, wl: dict[str, Any]) -> dict[str, int]:
    """Pods per node of a Workload's TopologyAssignment (Kueue records only the hostname level when the Topology's
    lowest level is kubernetes.io/hostname; the node names the clique)."""
    levels, domains = topology_assignment(wl)
    assert levels[-1] == HOST, levels
    return {values[-1]: pods for values, pods in domains.items()}


@pytest.fixture(scope="module")
def tas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TasEnv]:
    try:
        kueue_bin = build_kueue()
    except Exception as e:  # noqa: BLE001 - say why, never skip
        pytest.fail(f"cannot build the Kueue manager (hack/build-tools.sh kueue): {e}", pytrace=False)
    state_dir = Path(tempfile.mkdtemp(prefix="trainguard-tas-"))
    proc = run_e2e_cluster("up", state_dir, timeout=3600)
    if proc.returncode != 0:
        shutil.rmtree(state_dir, ignore_errors=True)
        pytest.fail(f"hack/e2e-cluster.sh up failed (exit {proc.returncode}); the simulated GPU cluster is required "
                    f"for tests/e2e/test_kueue_topology.py:\n{proc.stderr[-6000:]}", pytrace=False)
    work = tmp_path_factory.mktemp("kueue-tas")
    started: list[Any] = []
    try:
        cluster = Cluster(proc.stdout.strip().splitlines()[-1], Path((state_dir / "bin_dir").read_text().strip()))
        crds = upstream_crds(kueue_bin, "kueue")
        assert crds, f"no Kueue CRDs under {kueue_bin}/crds/kueue"
        args = ["apply", "--server-side", "--force-conflicts"]
        for m in crds:
            args += ["-f", str(m)]
        cluster.kubectl(*args, timeout=120)
        wait_for_crds(cluster)

        suffix = uuid.uuid4().hex[:6]
        namespace, queue = f"tas-e2e-{suffix}", "gpu"
        cluster.kubectl("create", "namespace", namespace)
        wait_for(f"ServiceAccount {namespace}/default", lambda: cluster.kubectl(
            "-n", namespace, "get", "serviceaccount", "default", check=False).returncode == 0, timeout=30)

        webhook = start_webhook(cluster, work / "webhook")
        started.append(webhook)
        register(cluster, webhook, namespace)
        # TopologyAwareScheduling is Beta and on by default in v0.17 (pkg/features/kube_features.go); set it
        # explicitly so a later default cannot silently turn this test into a non-TAS one. TASMultiLayerTopology
        # (Alpha, off by default) admits the multi-layer slice annotation a user may declare instead of trainguard's.
        kueue = KueueProcess(kueue_bin / "kueue", cluster.kubeconfig, work / "kueue",
                             feature_gates={"TopologyAwareScheduling": True, "TASMultiLayerTopology": True})
        try:
            kueue.start()
        except AssertionError as e:
            pytest.fail(f"the real Kueue manager did not start: {e}", pytrace=False)
        started.append(kueue)
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(
            kueue_webhook_configurations(kueue.url_base, kueue.ca_pem, namespace)))
        controller = ControllerProcess(cluster.kubeconfig, namespace, "tas-e2e", work, workers=2).start()
        started.append(controller)
        objects = setup_objects(namespace, queue, suffix)
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects))
        nodes = json.loads(cluster.kubectl("get", "nodes", "-l", "type=kwok", "-o", "json").stdout)["items"]
        node_clique = {n["metadata"]["name"]: n["metadata"]["labels"][CLIQUE] for n in nodes}
        assert len(node_clique) == NODES and len(set(node_clique.values())) == NODES // 2, node_clique
        env = TasEnv(cluster, state_dir, namespace, queue, f"tas-{suffix}", webhook, kueue, controller, node_clique)
        started.append(env)

        def cq_active() -> bool:
            cq = json.loads(cluster.kubectl("get", "clusterqueues.kueue.x-k8s.io", f"cq-{suffix}", "-o", "json").stdout)
            return _true(cq, "Active")

        try:
            wait_for("the ClusterQueue to become Active (Topology + TAS ResourceFlavor)", cq_active, timeout=60)
        except AssertionError as e:
            raise AssertionError(f"{e}\n{env.diagnostics()}") from None
        # Webhook configurations and the policy reach the apiserver and trainguard's cache asynchronously: a server-side
        # dry run must come back with Kueue's seeded patch, the policy's queue and its topology hint.
        probe = yaml.safe_dump(trainjob("probe", namespace, 1, GPUS_PER_NODE))

        def ready() -> bool:
            out = cluster.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=probe, check=False)
            if out.returncode != 0:
                return False
            tj = json.loads(out.stdout)
            return (any(p["manager"] == KUEUE_MANAGER for p in tj["spec"].get("runtimePatches") or [])
                    and (tj["metadata"].get("labels") or {}).get(QUEUE_LABEL) == queue
                    and _policy_pod_annotations(tj).get(REQUIRED) == HOST)

        wait_for("Kueue's and trainguard's webhooks (with the policy) to answer", ready, timeout=60)
        yield env
    finally:
        for proc_ in reversed(started):
            if isinstance(proc_, TasEnv):
                proc_.k("delete", "pods", "-n", proc_.namespace, "-l", "e2e.trainguard.io/blocker", "--wait=false",
                        check=False)
            elif isinstance(proc_, ControllerProcess):
                if proc_.proc is not None and proc_.proc.poll() is None:
                    proc_.terminate()
            else:
                proc_.stop()
        down = run_e2e_cluster("down", state_dir, timeout=120)
        shutil.rmtree(state_dir, ignore_errors=True)
        assert down.returncode == 0, f"hack/e2e-cluster.sh down failed:\n{down.stderr}"


def run_to_bound(env: TasEnv, name: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Wait for Kueue's admission and the pods (gated, then ungated by Kueue with a host nodeSelector, bound);
    returns the admitted Workload and the pods as bound."""
    wl = wait_for(f"Kueue to admit {name}", lambda: (w := env.workload_of(name)) and _true(w, "Admitted") and w,
                  timeout=60)
    hosts = assigned_hosts(env, wl)
    print(f"{name}: Kueue TopologyAssignment {topology_assignment(wl)}")
    count = sum(hosts.values())

    def bound() -> list[dict[str, Any]]:
        pods = env.pods_of(name)
        return pods if len(pods) == count and all(p["spec"].get("nodeName") for p in pods) else []

    pods = wait_for(f"{count} pods of {name} bound", bound, timeout=60)
    for pod in pods:
        # Kueue's TAS: created with its scheduling gate, released by Kueue's ungater onto the assigned host.
        assert not pod["spec"].get("schedulingGates"), pod["spec"]
        assert pod["spec"]["nodeSelector"].get(HOST) == pod["spec"]["nodeName"], pod["spec"]
        assert pod["metadata"]["annotations"].get("kueue.x-k8s.io/workload") == wl["metadata"]["name"]
    placed: dict[str, int] = {}
    for pod in pods:
        placed[pod["spec"]["nodeName"]] = placed.get(pod["spec"]["nodeName"], 0) + 1
    assert placed == hosts, f"pods bound {placed}, Kueue assigned {hosts}"
    return wl, pods


def run_to_complete(env: TasEnv, name: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``run_to_bound``, then the TrainJob's Complete and its Workload's Finished."""
    wl, pods = run_to_bound(env, name)
    wait_for(f"TrainJob {name} Complete", lambda: _true(env.get("trainjobs.trainer.kubeflow.org", name), "Complete"),
             timeout=60)
    wait_for(f"{name}'s Workload Finished", lambda: _true(env.workload_of(name), "Finished"), timeout=30)
    return wl, pods


def gated_pod_template(env: TasEnv, name: str) -> dict[str, Any]:
    js = json.loads(env.k("get", "jobsets.jobset.x-k8s.io", name, "-n", env.namespace, "-o", "json").stdout)
    (node,) = [r for r in js["spec"]["replicatedJobs"] if r["name"] == "node"]
    return node["template"]["spec"]["template"]


def test_one_host_job_gets_the_host_level(tas: TasEnv) -> None:
    env, name = tas, "one-host"
    created, _ = env.apply_trainjob(trainjob(name, env.namespace, 1, GPUS_PER_NODE))
    assert created["spec"]["suspend"] is True and created["metadata"]["labels"][QUEUE_LABEL] == env.queue
    assert _policy_pod_annotations(created) == {REQUIRED: HOST}
    try:
        wl, pods = run_to_complete(env, name)
        (ps,) = wl["spec"]["podSets"]
        assert ps["topologyRequest"]["required"] == HOST, ps["topologyRequest"]
        assert len(assigned_hosts(env, wl)) == 1
        template = gated_pod_template(env, name)
        assert {"name": TOPOLOGY_GATE} in template["spec"]["schedulingGates"], template["spec"]
        assert template["metadata"]["annotations"][REQUIRED] == HOST
    except AssertionError as e:
        raise AssertionError(f"{e}\n{env.diagnostics()}") from None


def blocker(env: TasEnv, node: str) -> dict[str, Any]:
    """A pod Kueue does not manage that takes all GPUs of ``node`` (Kueue's TAS counts it as non-TAS usage)."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"blocker-{node}", "namespace": env.namespace, "labels": {"e2e.trainguard.io/blocker": "1"}},
            "spec": {"nodeName": node, "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "c", "image": "trainguard.invalid/e2e/keeps-running:v1",
                                     "resources": {"requests": {GPU: str(GPUS_PER_NODE)},
                                                   "limits": {GPU: str(GPUS_PER_NODE)}}}]}}


def test_two_node_job_waits_for_and_lands_in_one_clique(tas: TasEnv) -> None:
    env, name, control = tas, "two-nodes", "unconstrained"
    by_clique: dict[str, list[str]] = {}
    for node, clique in sorted(env.node_clique.items()):
        by_clique.setdefault(clique, []).append(node)
    (a_nodes, b_nodes) = sorted(by_clique.values())
    # One node of each clique busy: 16 GPUs free in total, but no clique with 2 free nodes.
    blockers = [a_nodes[0], b_nodes[1]]
    env.k("apply", "-f", "-", input=yaml.safe_dump_all([blocker(env, n) for n in blockers]))
    try:
        wait_for("the blocker pods Running", lambda: all(
            p["status"].get("phase") == "Running"
            for p in [env.get("pod", f"blocker-{n}") for n in blockers]), timeout=30)

        created, _ = env.apply_trainjob(trainjob(name, env.namespace, 2, GPUS_PER_NODE))
        assert _policy_pod_annotations(created) == {REQUIRED: CLIQUE}
        wl = wait_for(f"Kueue to evaluate {name}", lambda: (w := env.workload_of(name))
                      and (c := condition(w, "QuotaReserved")) and c["status"] == "False" and w, timeout=60)
        (ps,) = wl["spec"]["podSets"]
        assert ps["topologyRequest"]["required"] == CLIQUE and ps["count"] == 2, ps
        message = condition(wl, "QuotaReserved")["message"]
        print(f"{name} pending: {message}")
        assert "topology" in message.lower(), message

        # The same shape with the user's own unconstrained declaration (trainguard leaves it alone): Kueue admits it
        # now, across the two cliques -- the capacity was there, only the clique requirement held the first back.
        # It keeps running, so that its end below is the event that makes Kueue look at the waiting job again.
        created_c, _ = env.apply_trainjob(trainjob(control, env.namespace, 2, GPUS_PER_NODE,
                                                   user_annotations={UNCONSTRAINED: "true"}, image=KEEPS_RUNNING_IMAGE))
        assert _policy_pod_annotations(created_c) == {}, created_c["spec"]["runtimePatches"]
        wl_c, _ = run_to_bound(env, control)
        spread = assigned_hosts(env, wl_c)
        assert set(spread) == {a_nodes[1], b_nodes[0]}, spread
        assert len({env.node_clique[h] for h in spread}) == 2, spread
        assert not _true(env.workload_of(name), "Admitted")
        assert env.get("trainjobs.trainer.kubeflow.org", name)["spec"]["suspend"] is True
        assert env.pods_of(name) == []

        # Clique B frees up: the pod Kueue does not manage goes, then the control job ends. Kueue v0.17 updates its
        # non-TAS usage when such a pod goes but re-examines waiting workloads only on its own events (a workload
        # finishing or deleted, a ClusterQueue or node change: pkg/controller/tas/non_tas_usage_controller.go), so on
        # a real cluster too the waiting job moves at the next such event; the control job's end is that event here.
        env.k("delete", "pod", f"blocker-{b_nodes[1]}", "-n", env.namespace, "--grace-period=0", "--force")
        wait_for("the blocker pod gone", lambda: not env.k("get", "pod", f"blocker-{b_nodes[1]}", "-n", env.namespace,
                                                           "--ignore-not-found", "-o", "name").stdout.strip(), timeout=30)
        env.k("delete", "trainjobs.trainer.kubeflow.org", control, "-n", env.namespace, "--wait=false")
        t_freed = time.monotonic()
        wait_for(f"Kueue to admit {name} once clique {env.node_clique[b_nodes[1]]} is free",
                 lambda: _true(env.workload_of(name), "Admitted"), timeout=60)
        print(f"{name} admitted {time.monotonic() - t_freed:.1f}s after the blocker and the control job went")
        wl, pods = run_to_complete(env, name)
        hosts = assigned_hosts(env, wl)
        assert hosts == {b_nodes[0]: 1, b_nodes[1]: 1}, hosts
        assert {env.node_clique[p["spec"]["nodeName"]] for p in pods} == {env.node_clique[b_nodes[0]]}
    except AssertionError as e:
        raise AssertionError(f"{e}\n{env.diagnostics()}") from None
    finally:
        env.k("delete", "pods", "-n", env.namespace, "-l", "e2e.trainguard.io/blocker", "--grace-period=0", "--force",
              check=False)


def test_sliced_job_gets_two_pods_per_host_in_one_clique(tas: TasEnv) -> None:
    env, name = tas, "sliced"
    created, _ = env.apply_trainjob(trainjob(name, env.namespace, 4, GPUS_PER_NODE // 2))
    assert _policy_pod_annotations(created) == {REQUIRED: CLIQUE, SLICE_LEVEL: HOST, SLICE_SIZE: "2"}
    try:
        wl, pods = run_to_complete(env, name)
        (ps,) = wl["spec"]["podSets"]
        request = ps["topologyRequest"]
        assert request["required"] == CLIQUE, request
        assert request["podSetSliceRequiredTopology"] == HOST and request["podSetSliceSize"] == 2, request
        hosts = assigned_hosts(env, wl)
        assert sorted(hosts.values()) == [2, 2], hosts
        assert len({env.node_clique[h] for h in hosts}) == 1, hosts
    except AssertionError as e:
        raise AssertionError(f"{e}\n{env.diagnostics()}") from None


def test_job_wider_than_a_clique_is_denied_in_enforce_and_spread_in_audit(tas: TasEnv) -> None:
    env, name = tas, "three-nodes"
    body = yaml.safe_dump(trainjob(name, env.namespace, 3, GPUS_PER_NODE))
    proc = env.k("apply", "-f", "-", input=body, check=False)
    assert proc.returncode != 0, proc.stdout
    reason = ("the job needs 24 GPUs (3 nodes x 8 GPUs) but the widest topology level nvidia.com/gpu.clique holds "
              "16 GPUs (2 such nodes) per domain")
    assert 'admission webhook "validator.trainjob.trainer.kubeflow.org" denied the request' in proc.stderr, proc.stderr
    assert reason in proc.stderr, proc.stderr
    assert env.k("get", "trainjobs.trainer.kubeflow.org", name, "-n", env.namespace, check=False).returncode != 0

    env.k("patch", "trainjobpolicies.trainguard.io", env.policy, "--type", "merge", "-p", '{"spec":{"mode":"Audit"}}')
    try:
        wait_for("trainguard to see the policy in Audit", lambda: env.k(
            "create", "--dry-run=server", "-f", "-", input=body, check=False).returncode == 0, timeout=30)
        created, stderr = env.apply_trainjob(trainjob(name, env.namespace, 3, GPUS_PER_NODE))
        assert reason in stderr and f'TrainJobPolicy "{env.policy}" is in Audit mode: allowed' in stderr, stderr
        assert created["metadata"]["labels"][QUEUE_LABEL] == env.queue and created["spec"]["suspend"] is True
        assert _policy_pod_annotations(created) == {}
        try:
            wl, _ = run_to_complete(env, name)
        except AssertionError as e:
            raise AssertionError(f"{e}\n{env.diagnostics()}") from None
        # No hint: Kueue's implicit TAS places it wherever capacity is -- across both NVLink domains.
        hosts = assigned_hosts(env, wl)
        assert sum(hosts.values()) == 3 and len({env.node_clique[h] for h in hosts}) == 2, hosts
    finally:
        env.k("patch", "trainjobpolicies.trainguard.io", env.policy, "--type", "merge", "-p",
              '{"spec":{"mode":"Enforce"}}', check=False)


def test_user_multi_layer_slice_constraints_are_left_to_kueue(tas: TasEnv) -> None:
    """Kueue 0.17's multi-layer slice annotation is a topology declaration like the two-level ones: trainguard adds
    nothing to it (its two-level slice annotations beside it are forbidden by Kueue's webhook)."""
    env, name = tas, "user-layers"
    constraints = json.dumps([{"topology": CLIQUE, "size": 4}, {"topology": HOST, "size": 2}])
    body = trainjob(name, env.namespace, 4, GPUS_PER_NODE // 2, user_annotations={SLICE_CONSTRAINTS: constraints})
    proc = env.k("apply", "-f", "-", "-o", "json", input=yaml.safe_dump(body), check=False)
    assert proc.returncode == 0, proc.stderr
    created = json.loads(proc.stdout)
    assert _policy_pod_annotations(created) == {}, created["spec"]["runtimePatches"]
    try:
        wl, _ = run_to_complete(env, name)
        (ps,) = wl["spec"]["podSets"]
        assert ps["topologyRequest"]["podsetSliceRequiredTopologyConstraints"] == json.loads(constraints), ps
        hosts = assigned_hosts(env, wl)
        assert sorted(hosts.values()) == [2, 2] and len({env.node_clique[h] for h in hosts}) == 1, hosts
    except AssertionError as e:
        raise AssertionError(f"{e}\n{env.diagnostics()}") from None


def _table(env: TasEnv, name: str) -> dict[str, str]:
    """``kubectl get trainjobs NAME``'s columns, header to value (the CRD's printer columns, printed by kubectl; an
    empty cell is blank, so each value is cut at its header's offset)."""
    header, row = env.k("get", "trainjobs.trainer.kubeflow.org", name, "-n", env.namespace).stdout.splitlines()
    starts = [m.start() for m in re.finditer(r"\S+", header)]
    return {header[a:b].strip(): row[a:b].strip() for a, b in zip(starts, starts[1:] + [None])}


def test_the_sdk_reads_a_job_kueue_resumed_as_running(tas: TasEnv) -> None:
    """A data scientist's path with the official kubeflow SDK 0.5 under the Kueue policy (issue 24): ``train()``
    (no Kueue label: the policy queues it), ``wait_for_job_status({"Running"})`` once Kueue admits and resumes it
    and its pods run, and ``kubectl get trainjobs`` with one State column, the runtime, nodes and GPUs.

    The SDK reads Running from the pods only when ``status.conditions`` is empty: upstream keeps
    ``Suspended=False/Resumed`` after the resume, and the SDK says Created for as long as the job runs."""
    from kubeflow.common.types import KubernetesBackendConfig
    from kubeflow.trainer import CustomTrainerContainer, TrainerClient
    from kubernetes import client as k8s
    from kubernetes import config

    env = tas
    configuration = k8s.Configuration()
    config.load_kube_config(config_file=env.cluster.kubeconfig, client_configuration=configuration)
    sdk = TrainerClient(KubernetesBackendConfig(namespace=env.namespace, client_configuration=configuration))
    name = sdk.train(runtime=sdk.get_runtime(RUNTIME), trainer=CustomTrainerContainer(
        image=KEEPS_RUNNING_IMAGE, num_nodes=1, resources_per_node={"gpu": GPUS_PER_NODE, "cpu": 8, "memory": "64Gi"}))
    try:
        stored = env.get("trainjobs.trainer.kubeflow.org", name)
        assert stored["metadata"]["labels"][QUEUE_LABEL] == env.queue, "the policy queued the SDK's job"
        try:
            job = sdk.wait_for_job_status(name, {"Running"}, timeout=120, polling_interval=1)
        except TimeoutError as e:
            raise AssertionError(f"{e}: the SDK reads {sdk.get_job(name).status!r}; stored status "
                                 f"{env.get('trainjobs.trainer.kubeflow.org', name).get('status')}\n"
                                 f"{env.diagnostics()}") from None
        assert job.status == "Running" and job.num_nodes == 1
        tj = env.get("trainjobs.trainer.kubeflow.org", name)
        assert _true(env.workload_of(name), "Admitted")
        assert not tj["status"].get("conditions"), tj["status"]
        assert tj["status"]["lastResumeTime"], "the resume time activeDeadlineSeconds counts from"
        assert any(e.reason == "Resumed" for e in sdk.get_job_events(name)), "the resume is still an event"
        columns = wait_for("kubectl's columns", lambda: (c := _table(env, name))["STATE"] == "Running" and c)
        assert (columns["RUNTIME"], columns["NODES"], columns["GPUS"]) == (RUNTIME, "1", str(GPUS_PER_NODE)), columns
        assert columns["PROGRESS"] == "", "no trainer reported progress"
        assert list(columns) == ["NAME", "STATE", "RUNTIME", "NODES", "GPUS", "PROGRESS", "AGE"], columns
    finally:
        sdk.delete_job(name)
