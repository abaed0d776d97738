"""Blocked means blocked, with the REAL Kueue (v0.17.0, hack/tools/kueue): a TrainJob the controller refuses gives
its quota back through Kueue's own API (``controller/reconcile/quota.py``), and a waiting compliant job takes it.

The environment of ``test_kueue.py`` (local apiserver, Kueue's CRDs, the Kueue manager out of cluster with its
webhooks for one namespace, ``trainguard webhook``), with a ClusterQueue whose quota holds ONE job (8 GPUs) and
TrainJobs that name the LocalQueue themselves. The controller starts only after Kueue has admitted job A and an
Enforce policy that A violates has been applied: A was admitted by Kueue before the policy existed, and the
controller meets it admitted, unsuspended, holding the quota, with no JobSet (as after a controller outage or a
leader change while Kueue kept admitting). No JobSet controller runs and no status is written by the test: every
status and ``spec.suspend`` change below is made by Kueue or by trainguard.

If Kueue cannot be built or started, the test fails with the reason: it never skips.
"""

from __future__ import annotations

import json
import uuid
from typing import Any, Iterator

import pytest
import yaml

from tests.conftest import Cluster, upstream_crds, wait_for_crds
from tests.e2e.kueue_harness import KueueProcess, build_kueue, kueue_webhook_configurations
from tests.integration.conftest import register, start_webhook, unregister
from tests.integration.reconcile.reconcile_harness import ControllerProcess, wait_for

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
STATE = "trainguard.io/state"
DEACTIVATED = "trainguard.io/deactivated-by-policy"
GPU = "nvidia.com/gpu"
QUEUE = "team-gpu"


class Env:
    def __init__(self, cluster: Cluster, namespace: str, suffix: str, kueue: KueueProcess, webhook: Any,
                 work: Any) -> None:
        self.cluster, self.namespace, self.suffix = cluster, namespace, suffix
        self.kueue, self.webhook, self.work = kueue, webhook, work
        self.controller: ControllerProcess | None = None

    def k(self, *args: str, input: str | None = None, check: bool = True):
        return self.cluster.kubectl(*args, input=input, check=check)

    def get(self, kind: str, name: str, namespaced: bool = True) -> dict[str, Any] | None:
        out = self.k("get", kind, name, "-o", "json", "--ignore-not-found",
                     *(["-n", self.namespace] if namespaced else [])).stdout.strip()
        return json.loads(out) if out else None

    def trainjob(self, name: str) -> dict[str, Any]:
        tj = self.get("trainjobs.trainer.kubeflow.org", name)
        assert tj is not None, f"TrainJob {name} is gone"
        return tj

    def jobset(self, name: str) -> dict[str, Any] | None:
        return self.get("jobsets.jobset.x-k8s.io", name)

    def workload_of(self, name: str) -> dict[str, Any] | None:
        uid = self.trainjob(name)["metadata"]["uid"]
        items = json.loads(self.k("get", "workloads.kueue.x-k8s.io", "-n", self.namespace, "-o", "json").stdout)["items"]
        return next((w for w in items if any(o.get("uid") == uid for o in w["metadata"].get("ownerReferences") or [])), None)

    def cluster_queue(self) -> dict[str, Any]:
        cq = self.get("clusterqueues.kueue.x-k8s.io", f"cq-{self.suffix}", namespaced=False)
        assert cq is not None
        return cq

    def events(self, name: str, reason: str) -> list[dict[str, Any]]:
        out = json.loads(self.k("get", "events", "-n", self.namespace, "-o", "json").stdout)["items"]
        return [e for e in out if e["involvedObject"].get("name") == name and e.get("reason") == reason]

    def policy(self, name: str, limits: dict[str, Any]) -> None:
        self.k("apply", "-f", "-", input=json.dumps({
            "apiVersion": "trainguard.io/v1alpha1", "kind": "TrainJobPolicy", "metadata": {"name": name},
            "spec": {"mode": "Enforce",
                     "selector": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": self.namespace}}},
                     "limits": limits}}))

    def diagnostics(self) -> str:
        ctl = self.controller.log()[-3000:] if self.controller else "(not started)"
        return (f"--- kueue log\n{self.kueue.log_tail(25)}\n--- webhook log\n{self.webhook.log_tail(15)}\n"
                f"--- controller log\n{ctl}")


def trainjob(name: str, namespace: str, nodes: int, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": name, "namespace": namespace, "labels": {QUEUE_LABEL: QUEUE}},
        "spec": {
            "runtimeRef": {"name": "torch-kueue", "kind": "TrainingRuntime", "apiGroup": "trainer.kubeflow.org"},
            "trainer": {"image": "ghcr.io/acme/train:1.0", "numNodes": nodes,
                        "resourcesPerNode": {"requests": {"cpu": "1", "memory": "1Gi", GPU: str(gpus)},
                                             "limits": {GPU: str(gpus)}}},
        },
    }


def setup_objects(namespace: str, suffix: str) -> list[dict[str, Any]]:
    runtime = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
        "metadata": {"name": "torch-kueue", "namespace": namespace},
        "spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "template": {"spec": {"replicatedJobs": [{
            "name": "node",
            "template": {"metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                         "spec": {"template": {"spec": {"containers": [{"name": "node", "image": "pytorch/pytorch:2"}]}}}},
        }]}}},
    }
    flavor = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": f"gpu-{suffix}"}}
    cluster_queue = {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": f"cq-{suffix}"},
        "spec": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "resourceGroups": [{"coveredResources": ["cpu", "memory", GPU], "flavors": [{
                "name": f"gpu-{suffix}",
                "resources": [{"name": "cpu", "nominalQuota": "16"}, {"name": "memory", "nominalQuota": "64Gi"},
                              {"name": GPU, "nominalQuota": "8"}]}]}],  # one 8-GPU job at a time
        },
    }
    local_queue = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                   "metadata": {"name": QUEUE, "namespace": namespace}, "spec": {"clusterQueue": f"cq-{suffix}"}}
    return [runtime, flavor, cluster_queue, local_queue]


def _condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any] | None:
    return next((c for c in ((obj or {}).get("status") or {}).get("conditions") or [] if c["type"] == type_), None)


def _true(obj: dict[str, Any] | None, type_: str) -> bool:
    c = _condition(obj, type_)
    return bool(c and c["status"] == "True")


def gpus(usage: list[dict[str, Any]] | None) -> str:
    """The GPU total of a ClusterQueue's flavorsReservation / flavorsUsage ("0" when nothing is counted)."""
    for flavor in usage or []:
        for resource in flavor.get("resources") or []:
            if resource["name"] == GPU:
                return str(resource["total"])
    return "0"


@pytest.fixture(scope="module")
def env(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    try:
        bin_dir = build_kueue()
    except Exception as e:  # noqa: BLE001 - say why, never skip
        pytest.fail(f"cannot build the Kueue manager (hack/build-tools.sh kueue): {e}", pytrace=False)
    crds = upstream_crds(bin_dir, "kueue")
    assert crds, f"no Kueue CRDs under {bin_dir}/crds/kueue"
    args = ["apply", "--server-side", "--force-conflicts"]
    for m in crds:
        args += ["-f", str(m)]
    cluster.kubectl(*args, timeout=120)
    wait_for_crds(cluster)

    suffix = uuid.uuid4().hex[:6]
    namespace = f"kueue-blocked-{suffix}"
    cluster.kubectl("create", "namespace", namespace)
    work = tmp_path_factory.mktemp("kueue-blocked")
    objects = setup_objects(namespace, suffix)
    started: list[Any] = []
    registered: list[Any] = []
    e: Env | None = None
    try:
        webhook = start_webhook(cluster, work / "webhook")
        started.append(webhook)
        registered.append(register(cluster, webhook, namespace))
        kueue = KueueProcess(bin_dir / "kueue", cluster.kubeconfig, work / "kueue")
        try:
            kueue.start()
        except AssertionError as err:
            pytest.fail(f"the real Kueue manager did not start: {err}", pytrace=False)
        started.append(kueue)
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(
            kueue_webhook_configurations(kueue.url_base, kueue.ca_pem, namespace)))
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects))
        probe = yaml.safe_dump(trainjob("probe", namespace, 1, 1))

        def kueue_suspends() -> bool:  # Kueue's webhook answers (it suspends a queued job at CREATE)
            out = cluster.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=probe, check=False)
            return out.returncode == 0 and json.loads(out.stdout)["spec"].get("suspend") is True

        wait_for("Kueue's webhook to be called", kueue_suspends, timeout=60)
        e = Env(cluster, namespace, suffix, kueue, webhook, work)
        yield e
    finally:
        if e is not None and e.controller is not None and e.controller.alive():
            e.controller.terminate()
        for proc in reversed(started):
            proc.stop()
        for r in registered:
            unregister(cluster, r)
        cluster.kubectl("delete", "mutatingwebhookconfiguration", "kueue-mutating-webhook-configuration",
                        "--ignore-not-found", check=False)
        cluster.kubectl("delete", "validatingwebhookconfiguration", "kueue-validating-webhook-configuration",
                        "--ignore-not-found", check=False)
        for name in (f"max-one-node-{suffix}", f"max-four-gpus-{suffix}"):
            cluster.kubectl("delete", "trainjobpolicy", name, "--ignore-not-found", check=False)
        cluster.kubectl("delete", "clusterqueue", f"cq-{suffix}", "--ignore-not-found", "--wait=false", check=False)
        cluster.kubectl("delete", "resourceflavor", f"gpu-{suffix}", "--ignore-not-found", "--wait=false", check=False)
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def test_a_blocked_admitted_job_gives_its_quota_to_the_waiting_one(env: Env) -> None:
    one_node, four_gpus = f"max-one-node-{env.suffix}", f"max-four-gpus-{env.suffix}"
    try:
        # A: 2 nodes x 4 GPUs, the whole quota. Admitted by Kueue, which unsuspends it (no controller runs yet).
        env.k("apply", "-f", "-", input=json.dumps(trainjob("a", env.namespace, nodes=2, gpus=4)))
        wait_for("A admitted", lambda: _true(env.workload_of("a"), "Admitted"), timeout=60)
        wait_for("A unsuspended by Kueue", lambda: env.trainjob("a")["spec"].get("suspend") is False, timeout=60)
        # B: 1 node x 8 GPUs, compliant with the policy to come; no room, so it waits.
        env.k("apply", "-f", "-", input=json.dumps(trainjob("b", env.namespace, nodes=1, gpus=8)))
        wait_for("B pending", lambda: (c := _condition(env.workload_of("b"), "QuotaReserved")) and c["status"] == "False",
                 timeout=60)
        wait_for("A's 8 GPUs reserved in the ClusterQueue, B pending",
                 lambda: (q := env.cluster_queue()["status"]) and gpus(q.get("flavorsReservation")) == "8"
                 and q.get("admittedWorkloads") == 1 and q.get("pendingWorkloads") == 1, timeout=60)

        # The admin's Enforce policy, after A was admitted: at most one node. A violates it, B does not.
        env.policy(one_node, {"maxNodes": 1})
        env.controller = ControllerProcess(env.cluster.kubeconfig, env.namespace, "blocked", env.work, workers=2).start()

        # The controller blocks A and deactivates its Workload; Kueue evicts it, frees the quota, suspends A itself.
        blocked = wait_for("A Blocked", lambda: (t := env.trainjob("a"))["metadata"].get("labels", {}).get(STATE)
                           == "Blocked" and t, timeout=60)
        wl_a = wait_for("A's Workload evicted as Deactivated",
                        lambda: (w := env.workload_of("a")) and (c := _condition(w, "Evicted"))
                        and c["status"] == "True" and c["reason"] == "Deactivated" and w, timeout=60)
        assert wl_a["spec"]["active"] is False and wl_a["metadata"]["annotations"][DEACTIVATED] == "true"
        wait_for("A's quota released", lambda: not _true(env.workload_of("a"), "QuotaReserved")
                 and not (env.workload_of("a")["status"].get("admission")), timeout=60)
        wait_for("A suspended by Kueue", lambda: env.trainjob("a")["spec"].get("suspend") is True, timeout=60)
        assert env.jobset("a") is None, "nothing is built for a blocked job"

        # B is admitted in A's place, and trainguard runs it.
        wait_for("B admitted in A's place", lambda: _true(env.workload_of("b"), "Admitted"), timeout=60)
        wait_for("B's JobSet running", lambda: (j := env.jobset("b")) and j["spec"].get("suspend") is False, timeout=60)
        # Only B is counted: the 8 GPUs reserved and in use are B's, A's share is zero.
        cq = wait_for("the ClusterQueue counting B alone", lambda: (q := env.cluster_queue()["status"])
                      and gpus(q.get("flavorsReservation")) == "8" and gpus(q.get("flavorsUsage")) == "8"
                      and q.get("admittedWorkloads") == 1 and q.get("reservingWorkloads") == 1
                      and q.get("pendingWorkloads") == 0 and q, timeout=60)
        assert not env.workload_of("a")["status"].get("admission"), cq
        assert env.workload_of("b")["status"]["admission"]["clusterQueue"] == f"cq-{env.suffix}"

        # A says why, in upstream's condition (not Resumed) and in one event.
        held = _condition(env.trainjob("a"), "Suspended")
        assert held["status"] == "True" and held["reason"] == "PolicyDenied", held
        assert "spec.trainer.numNodes: Invalid value: 2: 2 nodes exceed maxNodes 1" in held["message"], held
        assert one_node in held["message"]
        denied = env.events("a", "PolicyDenied")
        assert len(denied) == 1 and denied[0]["type"] == "Warning", denied
        assert env.events("a", "WorkloadDeactivated"), "the deactivation is reported on the TrainJob"
        assert not env.events("a", "Resumed")
        assert blocked["metadata"]["uid"] == env.trainjob("a")["metadata"]["uid"]

        # A second Enforce policy that B (running) violates: B keeps running and is told once, however many
        # reconciles follow (a policy edit requeues every job; the denial is the same).
        env.policy(four_gpus, {"maxTotalGpus": 4})
        warned = wait_for("B warned", lambda: env.events("b", "PolicyDenied"), timeout=60)
        assert warned[0]["type"] == "Warning" and "keeps running" in warned[0]["message"], warned
        before = env.controller.reconciles()
        env.k("annotate", "trainjobpolicy", four_gpus, "example.com/touched=1")
        wait_for("B reconciled after the policy edit", lambda: env.controller.reconciles() >= before + 2, timeout=60)
        assert len(env.events("b", "PolicyDenied")) == 1
        assert env.jobset("b")["spec"].get("suspend") is False and _true(env.workload_of("b"), "Admitted")

        # The policies go: A is allowed again, its Workload reactivated by the controller (it deactivated it) and
        # queued behind B, which holds the quota.
        env.k("delete", "trainjobpolicy", one_node, four_gpus)
        wl_a = wait_for("A's Workload reactivated", lambda: (w := env.workload_of("a")) and w["spec"].get("active") is True
                        and w, timeout=60)
        assert DEACTIVATED not in (wl_a["metadata"].get("annotations") or {})
        wait_for("A requeued as Reactivated", lambda: (c := _condition(env.workload_of("a"), "Requeued"))
                 and c["reason"] == "Reactivated", timeout=60)
        wait_for("A Suspended, no longer Blocked", lambda: env.trainjob("a")["metadata"]["labels"].get(STATE) == "Suspended",
                 timeout=60)
        assert _condition(env.trainjob("a"), "Suspended")["reason"] == "Suspended"
        assert not _true(env.workload_of("a"), "QuotaReserved")
        # Allowed now, so built as any queued job is: its JobSet suspended until Kueue admits it.
        wait_for("A's suspended JobSet", lambda: (j := env.jobset("a")) and j["spec"].get("suspend") is True, timeout=60)
    except AssertionError as err:
        raise AssertionError(f"{err}\n{env.diagnostics()}") from None
