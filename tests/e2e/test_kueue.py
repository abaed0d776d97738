"""trainguard with the REAL Kueue (sigs.k8s.io/kueue v0.17.0, hack/tools/kueue), not a simulation of its writes.

One environment for the module: the local apiserver, Kueue's CRDs, the Kueue manager out of cluster (its webhooks
registered by URL for one namespace), ``trainguard webhook`` (registered for the same namespace) and
``trainguard controller``, a ResourceFlavor + ClusterQueue (8 GPUs) + LocalQueue, and a TrainJobPolicy that
gives the namespace's TrainJobs the Kueue queue by default plus a nodeSelector and a toleration (the
``trainguard.io/policy`` runtimePatch). TrainJobs are applied with kubectl WITHOUT any Kueue label. No JobSet
controller runs: a JobSet "finishes" when the test writes the status the JobSet controller would write.

If Kueue cannot be built or started, the tests fail with the reason: they never skip.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any, Iterator

import pytest
import yaml

from tests.conftest import Cluster, upstream_crds, wait_for_crds
from tests.e2e.kueue_harness import KueueProcess, build_kueue, kueue_webhook_configurations
from tests.integration.conftest import register, start_webhook, unregister
from tests.integration.reconcile.reconcile_harness import ControllerProcess, wait_for

KUEUE_MANAGER = "kueue.x-k8s.io/manager"
POLICY_MANAGER = "trainguard.io/policy"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
PODSET_LABEL = "kueue.x-k8s.io/podset"
FLAVOR_LABEL = "trainguard.io/e2e-accelerator"
POLICY_SELECTOR = {"trainguard.io/e2e-pool": "training"}
POLICY_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
VALIDATOR = "validator.trainjob.trainer.kubeflow.org"
CLUSTER_SCOPED = {"ResourceFlavor": "resourceflavors.kueue.x-k8s.io", "ClusterQueue": "clusterqueues.kueue.x-k8s.io",
                  "WorkloadPriorityClass": "workloadpriorityclasses.kueue.x-k8s.io",
                  "TrainJobPolicy": "trainjobpolicies.trainguard.io"}


@dataclass
class Env:
    cluster: Cluster
    namespace: str
    queue: str
    priority_class: str
    webhook: Any  # tests.integration.conftest.WebhookProcess
    kueue: KueueProcess
    controller: ControllerProcess

    def k(self, *args: str, input: str | None = None, check: bool = True):
        return self.cluster.kubectl(*args, input=input, check=check)

    def get(self, kind: str, name: str, namespaced: bool = True) -> dict[str, Any] | None:
        args = ["get", kind, name, "-o", "json", "--ignore-not-found"] + (["-n", self.namespace] if namespaced else [])
        out = self.k(*args).stdout.strip()
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

    def apply_trainjob(self, name: str, gpus_per_node: int = 4, labels: dict[str, str] | None = None) -> dict[str, Any]:
        """kubectl apply; returns the object as the apiserver stored it at CREATE (after every mutating webhook)."""
        body = trainjob_manifest(name, self.namespace, gpus_per_node, labels)
        return json.loads(self.k("apply", "-f", "-", "-o", "json", input=yaml.safe_dump(body)).stdout)

    def finish(self, name: str) -> None:
        """Write the status JobSet's controller writes when every Job succeeded."""
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        status = {"replicatedJobsStatus": [{"name": "node", "ready": 0, "succeeded": 1, "failed": 0, "active": 0,
                                            "suspended": 0}],
                  "conditions": [{"type": "Completed", "status": "True", "reason": "AllJobsCompleted",
                                  "message": "jobset completed successfully", "lastTransitionTime": now}]}
        self.k("patch", "jobsets.jobset.x-k8s.io", name, "-n", self.namespace, "--subresource", "status",
               "--type", "merge", "-p", json.dumps({"status": status}))

    def diagnostics(self) -> str:
        return (f"--- kueue log\n{self.kueue.log_tail(25)}\n--- webhook log\n{self.webhook.log_tail(15)}\n"
                f"--- controller log\n{self.controller.log()[-2500:]}")


def trainjob_manifest(name: str, namespace: str, gpus_per_node: int, labels: dict[str, str] | None) -> dict[str, Any]:
    gpus = str(gpus_per_node)
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = labels
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": meta,
        "spec": {
            "runtimeRef": {"name": "torch-kueue", "kind": "TrainingRuntime", "apiGroup": "trainer.kubeflow.org"},
            "trainer": {"image": "ghcr.io/acme/train:1.0", "command": ["torchrun", "/app/train.py"], "numNodes": 2,
                        "resourcesPerNode": {"requests": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": gpus},
                                             "limits": {"nvidia.com/gpu": gpus}}},
        },
    }


def setup_objects(namespace: str, queue: str, suffix: str) -> list[dict[str, Any]]:
    runtime = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
        # The framework label: the kubeflow SDK refuses a runtime without it.
        "metadata": {"name": "torch-kueue", "namespace": namespace, "labels": {"trainer.kubeflow.org/framework": "torch"}},
        "spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "template": {"spec": {"replicatedJobs": [{
            "name": "node",
            "template": {"metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                         "spec": {"template": {"spec": {"containers": [{"name": "node", "image": "pytorch/pytorch:2"}]}}}},
        }]}}},
    }
    flavor = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": f"h100-{suffix}"},
              "spec": {"nodeLabels": {FLAVOR_LABEL: "h100"}}}
    cluster_queue = {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": f"cq-{suffix}"},
        "spec": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "preemption": {"withinClusterQueue": "LowerPriority"},
            "resourceGroups": [{"coveredResources": ["cpu", "memory", "nvidia.com/gpu"], "flavors": [{
                "name": f"h100-{suffix}",
                "resources": [{"name": "cpu", "nominalQuota": "16"}, {"name": "memory", "nominalQuota": "64Gi"},
                              {"name": "nvidia.com/gpu", "nominalQuota": "8"}]}]}],
        },
    }
    local_queue = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                   "metadata": {"name": queue, "namespace": namespace}, "spec": {"clusterQueue": f"cq-{suffix}"}}
    priority = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
                "metadata": {"name": f"urgent-{suffix}"}, "value": 1000}
    policy = {
        "apiVersion": "trainguard.io/v1alpha1", "kind": "TrainJobPolicy", "metadata": {"name": f"kueue-{suffix}"},
        "spec": {"mode": "Enforce",
                 "selector": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}},
                 "scheduling": {"kueue": {"queueName": queue}},
                 "defaults": {"nodeSelector": POLICY_SELECTOR, "tolerations": [POLICY_TOLERATION]}},
    }
    return [runtime, flavor, cluster_queue, local_queue, priority, policy]


def _kueue_patch(tj: dict[str, Any]) -> dict[str, Any] | None:
    return next((p for p in tj["spec"].get("runtimePatches") or [] if p["manager"] == KUEUE_MANAGER), None)


def _policy_patch(tj: dict[str, Any]) -> dict[str, Any] | None:
    return next((p for p in tj["spec"].get("runtimePatches") or [] if p["manager"] == POLICY_MANAGER), None)


def _condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any] | None:
    return next((c for c in ((obj or {}).get("status") or {}).get("conditions") or [] if c["type"] == type_), None)


def _true(obj: dict[str, Any] | None, type_: str) -> bool:
    c = _condition(obj, type_)
    return bool(c and c["status"] == "True")


def _node_pod_template(jobset: dict[str, Any]) -> dict[str, Any]:
    rjob = next(r for r in jobset["spec"]["replicatedJobs"] if r["name"] == "node")
    return rjob["template"]["spec"]["template"]


def _sdk(env: Env) -> Any:
    """The official kubeflow SDK's TrainerClient on this namespace."""
    from kubeflow.common.types import KubernetesBackendConfig
    from kubeflow.trainer import TrainerClient
    from kubernetes import client, config

    configuration = client.Configuration()
    config.load_kube_config(config_file=env.cluster.kubeconfig, client_configuration=configuration)
    return TrainerClient(KubernetesBackendConfig(namespace=env.namespace, client_configuration=configuration))


def _validator_log(env: Env, name: str) -> list[dict[str, Any]]:
    """trainguard's validating webhook's answers for one TrainJob, from its JSON log lines."""
    out = []
    for line in env.webhook.log_path.read_text(errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("webhook") == VALIDATOR and rec.get("object") == name:
            out.append(rec)
    return out


# Module scope: set up once for these tests, and torn down before any other module runs, so the Kueue manager, its
# webhooks and the cluster-scoped TrainJobPolicy/ClusterQueue never meet the rest of a `make test` session.
@pytest.fixture(scope="module")
def kueue_env(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    try:
        bin_dir = build_kueue()
    except Exception as e:  # noqa: BLE001 - say why, never skip
        pytest.fail(f"cannot build the Kueue manager (hack/build-tools.sh kueue): {e}", pytrace=False)
    version = json.loads(cluster.kubectl("get", "--raw", "/version").stdout)["gitVersion"]
    if not version.startswith("v1."):
        pytest.fail(f"the kube-apiserver in {cluster.bin_dir} reports gitVersion {version!r}: Kueue's manager parses the "
                    "server version and exits; remove that kube-apiserver so hack/build-tools.sh rebuilds it with the "
                    "version stamped", pytrace=False)
    crds = upstream_crds(bin_dir, "kueue")
    assert crds, f"no Kueue CRDs under {bin_dir}/crds/kueue"
    args = ["apply", "--server-side", "--force-conflicts"]
    for m in crds:
        args += ["-f", str(m)]
    cluster.kubectl(*args, timeout=120)
    wait_for_crds(cluster)

    suffix = uuid.uuid4().hex[:6]
    namespace, queue = f"kueue-e2e-{suffix}", "team-gpu"
    cluster.kubectl("create", "namespace", namespace)
    work = tmp_path_factory.mktemp("kueue")
    started: list[Any] = []
    registered: list[Any] = []
    objects = setup_objects(namespace, queue, suffix)
    try:
        webhook = start_webhook(cluster, work / "webhook")
        started.append(webhook)
        registered.append(register(cluster, webhook, namespace))
        kueue = KueueProcess(bin_dir / "kueue", cluster.kubeconfig, work / "kueue")
        try:
            kueue.start()
        except AssertionError as e:
            pytest.fail(f"the real Kueue manager did not start: {e}", pytrace=False)
        started.append(kueue)
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(kueue_webhook_configurations(kueue.url_base, kueue.ca_pem, namespace)))
        controller = ControllerProcess(cluster.kubeconfig, namespace, "kueue-e2e", work, workers=2).start()
        started.append(controller)
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects))
        env = Env(cluster, namespace, queue, f"urgent-{suffix}", webhook, kueue, controller)
        # The apiserver picks webhook configurations up asynchronously: a server-side dry-run create must come back
        # with both Kueue's seeded runtimePatch and trainguard's queue label before the tests start.
        probe = yaml.safe_dump(trainjob_manifest("probe", namespace, 1, None))

        def both_called() -> bool:
            out = cluster.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=probe, check=False)
            if out.returncode != 0:
                return False
            tj = json.loads(out.stdout)
            return _kueue_patch(tj) is not None and (tj["metadata"].get("labels") or {}).get(QUEUE_LABEL) == queue

        wait_for("Kueue's and trainguard's webhooks to be called", both_called, timeout=60)
        yield env
    finally:
        for proc in reversed(started):
            if isinstance(proc, ControllerProcess):
                if proc.proc is not None and proc.proc.poll() is None:
                    proc.terminate()
            else:
                proc.stop()
        for r in registered:
            unregister(cluster, r)
        cluster.kubectl("delete", "mutatingwebhookconfiguration", "kueue-mutating-webhook-configuration",
                        "--ignore-not-found", check=False)
        cluster.kubectl("delete", "validatingwebhookconfiguration", "kueue-validating-webhook-configuration",
                        "--ignore-not-found", check=False)
        for obj in objects:
            if obj["kind"] in CLUSTER_SCOPED:
                cluster.kubectl("delete", CLUSTER_SCOPED[obj["kind"]], obj["metadata"]["name"], "--ignore-not-found",
                                "--wait=false", check=False)
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def test_kueue_admits_a_trainjob_trainguard_queued(kueue_env: Env) -> None:
    env, name = kueue_env, "admitted"
    denials_before = env.webhook.metric("trainguard_admission_denials_total", webhook=VALIDATOR)
    created = env.apply_trainjob(name)

    # Admission, as stored at CREATE: trainguard's queue label and suspend, Kueue's seeded patch, our policy patch.
    assert (created["metadata"].get("labels") or {}).get(QUEUE_LABEL) == env.queue
    assert created["spec"].get("suspend") is True
    assert _kueue_patch(created) is not None, created["spec"].get("runtimePatches")
    policy_patch = _policy_patch(created)
    assert policy_patch is not None and created["spec"]["runtimePatches"][0] == policy_patch
    assert policy_patch.get("time")

    try:
        wl = wait_for("Kueue's Workload to be admitted", lambda: (w := env.workload_of(name)) and _true(w, "Admitted") and w,
                      timeout=60)
        assert wl["status"]["admission"]["clusterQueue"].startswith("cq-")
        tj = wait_for("Kueue to unsuspend the TrainJob", lambda: (t := env.trainjob(name))["spec"].get("suspend") is False and t,
                      timeout=60)
        js = wait_for("the controller to resume the JobSet",
                      lambda: (j := env.jobset(name)) and j["spec"].get("suspend") is False and j, timeout=60)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{env.diagnostics()}") from None

    # Kueue's own patch: the flavor's nodeSelector and its podset label, written by Kueue's controller.
    kueue_patch = _kueue_patch(tj)
    assert kueue_patch is not None
    rjobs = kueue_patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert [r["name"] for r in rjobs] == ["node"]
    kueue_pod = rjobs[0]["template"]["spec"]["template"]
    assert kueue_pod["spec"]["nodeSelector"] == {FLAVOR_LABEL: "h100"}
    assert kueue_pod["metadata"]["labels"][PODSET_LABEL] == "node"
    # Our policy patch survived Kueue's full-object updates untouched (content and time), still first.
    assert tj["spec"]["runtimePatches"][0] == policy_patch
    # trainguard's validating webhook answered Kueue's UPDATEs and allowed them (failurePolicy Fail: no answer, no
    # update); no denial for this job.
    updates = [r for r in _validator_log(env, name) if r.get("operation") == "UPDATE"]
    assert updates and all(r.get("verdict") == "allowed" for r in updates), updates
    assert env.webhook.metric("trainguard_admission_denials_total", webhook=VALIDATOR) == denials_before

    # The JobSet the controller re-applied on resume: Kueue's selector and labels, the policy's selector and toleration.
    pod = _node_pod_template(js)
    assert pod["spec"]["nodeSelector"] == {**POLICY_SELECTOR, FLAVOR_LABEL: "h100"}
    assert pod["metadata"]["labels"][PODSET_LABEL] == "node"
    assert POLICY_TOLERATION in pod["spec"].get("tolerations", [])
    # The TrainJob went through Suspended -> resumed: no condition left (so the SDK can read Running), the resume
    # time stored, and the Resumed event.
    resumed = env.trainjob(name)
    assert _condition(resumed, "Suspended") is None and resumed["status"].get("lastResumeTime"), resumed["status"]

    # Finishing releases the quota: Kueue marks the Workload Finished.
    env.finish(name)
    wait_for("the Workload to finish", lambda: _true(env.workload_of(name), "Finished"), timeout=60)


def test_quota_queueing_and_preemption(kueue_env: Env) -> None:
    env = kueue_env
    first, second, urgent = "fits", "waits", "urgent"
    env.apply_trainjob(first)
    try:
        wait_for(f"{first} admitted", lambda: _true(env.workload_of(first), "Admitted"), timeout=60)
        # 8 more GPUs do not fit a ClusterQueue of 8 with 8 in use: created suspended, Workload pending.
        created = env.apply_trainjob(second)
        assert created["spec"]["suspend"] is True
        wl = wait_for(f"{second}'s Workload to be evaluated",
                      lambda: (w := env.workload_of(second)) and _condition(w, "QuotaReserved") and w, timeout=60)
        assert _condition(wl, "QuotaReserved")["status"] == "False", wl["status"]
        time.sleep(2)
        assert env.trainjob(second)["spec"]["suspend"] is True
        assert not _true(env.workload_of(second), "Admitted")
        js = env.jobset(second)
        assert js is None or js["spec"].get("suspend") is True
        # Why it waits, where a data scientist looks: Kueue's own reason in the Suspended condition's message and
        # in a WaitingForKueue event, which the kubeflow SDK's get_job_events() lists.
        held = wait_for(f"{second} to say why it waits", lambda: (c := _condition(env.trainjob(second), "Suspended"))
                        and "Kueue has not admitted its Workload" in c["message"] and c, timeout=30)
        assert held["status"] == "True" and held["reason"] == "Suspended", held
        assert held["message"].startswith("TrainJob is suspended: ") and "nvidia.com/gpu" in held["message"], held
        events = wait_for("the SDK to list the WaitingForKueue event", lambda: [
            e for e in _sdk(env).get_job_events(second) if e.reason == "WaitingForKueue"], timeout=30)
        assert "insufficient" in events[0].message and "nvidia.com/gpu" in events[0].message, events[0].message

        # The first finishes: its quota goes to the second, which Kueue admits and trainguard resumes.
        wait_for(f"{first}'s JobSet", lambda: env.jobset(first), timeout=60)
        env.finish(first)
        wait_for(f"{second} admitted after {first} finished", lambda: _true(env.workload_of(second), "Admitted"), timeout=60)
        wait_for(f"{second}'s JobSet resumed",
                 lambda: (j := env.jobset(second)) and j["spec"].get("suspend") is False, timeout=60)

        # A higher-priority job preempts it: Kueue suspends the TrainJob and clears its own patch (trainguard's
        # webhook must allow both writes), the controller suspends the JobSet again, the urgent job runs.
        env.apply_trainjob(urgent, labels={PRIORITY_LABEL: env.priority_class})
        wait_for(f"{second} preempted", lambda: _true(env.workload_of(second), "Evicted"), timeout=60)
        wait_for(f"{urgent} admitted", lambda: _true(env.workload_of(urgent), "Admitted"), timeout=60)
        preempted = wait_for(f"{second} suspended with Kueue's patch cleared",
                             lambda: (t := env.trainjob(second))["spec"].get("suspend") is True
                             and not _kueue_patch(t)["trainingRuntimeSpec"]["template"]["spec"].get("replicatedJobs") and t,
                             timeout=60)
        assert _policy_patch(preempted) is not None
        js = wait_for(f"{second}'s JobSet suspended again", lambda: (j := env.jobset(second)) and j["spec"].get("suspend") is True and j,
                      timeout=60)
        assert FLAVOR_LABEL not in (_node_pod_template(js)["spec"].get("nodeSelector") or {})
        wait_for(f"{urgent}'s JobSet resumed", lambda: (j := env.jobset(urgent)) and j["spec"].get("suspend") is False, timeout=60)
        assert all(r.get("verdict") == "allowed" for r in _validator_log(env, second) if r.get("operation") == "UPDATE")

        # Requeue: when the urgent job finishes, Kueue admits the preempted one again and it resumes.
        env.finish(urgent)
        wait_for(f"{second} re-admitted", lambda: _true(env.workload_of(second), "Admitted")
                 and env.trainjob(second)["spec"].get("suspend") is False, timeout=60)
        wait_for(f"{second}'s JobSet resumed again",
                 lambda: (j := env.jobset(second)) and j["spec"].get("suspend") is False, timeout=60)
        env.finish(second)
        wait_for(f"{second}'s Workload to finish", lambda: _true(env.workload_of(second), "Finished"), timeout=60)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{env.diagnostics()}") from None


def test_user_queue_label_kueue_suspends_and_labels_the_jobset(kueue_env: Env) -> None:
    """The user names the queue: Kueue's webhook suspends the job itself and puts the queue label into its patch,
    so the JobSet trainguard builds carries it; Kueue's JobSet integration must leave that child JobSet alone."""
    env, name = kueue_env, "own-queue"
    created = env.apply_trainjob(name, gpus_per_node=1, labels={QUEUE_LABEL: env.queue})
    assert created["spec"]["suspend"] is True
    seeded = _kueue_patch(created)
    assert seeded and seeded["trainingRuntimeSpec"]["template"]["metadata"]["labels"] == {QUEUE_LABEL: env.queue}
    try:
        wait_for(f"{name} admitted", lambda: _true(env.workload_of(name), "Admitted"), timeout=60)
        js = wait_for(f"{name}'s JobSet resumed", lambda: (j := env.jobset(name)) and j["spec"].get("suspend") is False and j,
                      timeout=60)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{env.diagnostics()}") from None
    assert js["metadata"]["labels"][QUEUE_LABEL] == env.queue
    assert _node_pod_template(js)["spec"]["nodeSelector"] == {**POLICY_SELECTOR, FLAVOR_LABEL: "h100"}
    workloads = json.loads(env.k("get", "workloads.kueue.x-k8s.io", "-n", env.namespace, "-o", "json").stdout)["items"]
    owned_by_jobset = [w["metadata"]["name"] for w in workloads
                       if any(o["kind"] == "JobSet" for o in w["metadata"].get("ownerReferences") or [])]
    assert owned_by_jobset == [], owned_by_jobset
    env.finish(name)
    wait_for(f"{name}'s Workload to finish", lambda: _true(env.workload_of(name), "Finished"), timeout=60)


def test_a_job_its_cluster_queue_could_never_admit_is_denied_at_apply(kueue_env: Env) -> None:
    """Capacity at the door (issue 23, part 4): 2 x 8 GPUs against a ClusterQueue of 8 (no cohort) is denied by the
    Enforce policy that puts the job in that queue, with the numbers, instead of sitting suspended forever."""
    env, name = kueue_env, "too-wide"
    body = trainjob_manifest(name, env.namespace, 8, None)
    out = env.k("apply", "-f", "-", input=yaml.safe_dump(body), check=False)
    assert out.returncode != 0, out.stdout
    assert "Kueue can never admit this job" in out.stderr, out.stderr
    assert (f'replicated job "node" needs 16 nvidia.com/gpu in one flavor, and the largest flavor of ClusterQueue '
            f'"cq-{env.priority_class.removeprefix("urgent-")}" (LocalQueue "{env.queue}") holds 8') in out.stderr, out.stderr
    assert env.get("trainjobs.trainer.kubeflow.org", name) is None
    # The same job at 2 x 4 fits the queue and is admitted as before.
    fits = env.apply_trainjob("fits-the-queue", gpus_per_node=4)
    assert fits["spec"]["suspend"] is True
    env.k("delete", "trainjobs.trainer.kubeflow.org", "fits-the-queue", "-n", env.namespace, "--wait=false")
