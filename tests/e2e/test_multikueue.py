"""MultiKueue end to end: a manager and a worker control plane, the REAL Kueue v0.17.0 on both, trainguard on both.

``tests/e2e/multikueue_harness.py`` starts them (the manager: apiserver + kube-controller-manager, Kueue with
MultiKueue, trainguard's webhook and controller; worker ``worker-1``: the simulated GPU cluster of
``hack/e2e-cluster.sh`` with kwok nodes and the JobSet controller, Kueue, trainguard's webhook and controller) and
wires them as an admin would: the worker's kubeconfig for a dedicated identity, flattened, in a Secret in Kueue's
namespace; MultiKueueCluster, MultiKueueConfig, an AdmissionCheck with controllerName ``kueue.x-k8s.io/multikueue``
and a ClusterQueue using it on the manager; the same namespace, LocalQueue name and runtime on the worker.

Policies: the manager's TrainJobPolicy gives the namespace's TrainJobs the Kueue queue, a nodeSelector and a
toleration, and allows 8 GPUs per node; the worker's allows 4 and would add a toleration of its own.

* (a) a TrainJob the user labels with the queue is dispatched (Kueue's own webhook sets ``managedBy``): baseline;
* (b) a TrainJob whose queue comes from the policy is dispatched to the worker, runs there on kwok GPU nodes through
  the real JobSet controller, completes, and the manager's TrainJob shows it (status copied by Kueue, the
  ``trainguard.io/state`` label set by the manager's controller); the worker kept the manager's policy patch;
* (c) deleting it on the manager removes the worker's copy (TrainJob, Workload, JobSet, pods);
* (e) the worker's Enforce limits still apply to Kueue's copy: denied there, never created, the manager's job stays
  suspended and Kueue retries (its log carries the denial);
* (d) a worker that goes away (its MultiKueueCluster deleted) while a job runs there: Kueue keeps the job's
  reservation for ``workerLostTimeout``, then sets the check to Retry, evicts and requeues the Workload and
  dispatches it to the other worker (``worker-2``, started for this test); the copy on the lost worker keeps running
  until the worker is connected again, when Kueue's garbage collector deletes it. Runs last: it rewires the manager.

One pair of control planes for the module (torn down after it, before any other module runs). Nothing is skipped:
a piece that cannot be built or started fails the fixture with the reason.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.e2e.kueue_harness import build_kueue
from tests.e2e.multikueue_harness import (
    CHECK,
    GPUS_PER_NODE,
    KEEPS_RUNNING_IMAGE,
    KUEUE_MANAGER,
    KUEUE_NS,
    MK_CONFIG,
    MK_USER,
    MULTIKUEUE_CONTROLLER,
    ORIGIN,
    ORIGIN_LABEL,
    POLICY_MANAGER,
    PREBUILT_LABEL,
    QUEUE,
    QUEUE_LABEL,
    STATE_LABEL,
    SYSTEM_NS,
    TEAM_NS,
    WORKER_LOST_TIMEOUT_S,
    Plane,
    check_state,
    condition,
    connect_worker,
    create_namespaces,
    finish_control_plane,
    install_crds,
    is_true,
    manager_kueue_config,
    manager_queue_objects,
    multikueue_cluster,
    runtime,
    runtime_patch,
    start_control_plane,
    start_kueue,
    start_trainguard,
    trainjob_manifest,
    wait_cluster_active,
    wait_for,
    wait_webhooks_called,
    worker_queue_objects,
)

MANAGER_SELECTOR = {"nvidia.com/gpu.present": "true"}  # every kwok GPU node carries it
MANAGER_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
WORKER_TOLERATION = {"key": "trainguard.io/e2e-worker-default", "operator": "Exists"}


def policy(name: str, max_gpus_per_node: int, defaults: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "trainguard.io/v1alpha1", "kind": "TrainJobPolicy", "metadata": {"name": name},
            "spec": {"mode": "Enforce",
                     "selector": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": TEAM_NS}}},
                     "scheduling": {"kueue": {"queueName": QUEUE}},
                     "limits": {"maxGpusPerNode": max_gpus_per_node},
                     "defaults": defaults}}


MANAGER_POLICY = policy("mk-manager", GPUS_PER_NODE, {"nodeSelector": MANAGER_SELECTOR, "tolerations": [MANAGER_TOLERATION]})
WORKER_POLICY = policy("mk-worker", GPUS_PER_NODE // 2, {"tolerations": [WORKER_TOLERATION]})


@dataclass
class MultiKueue:
    manager: Plane
    worker: Plane
    tmp: Path
    kueue_bin: Path
    timings: dict[str, float] = field(default_factory=dict)

    def diagnostics(self) -> str:
        return f"{self.manager.diagnostics()}\n{self.worker.diagnostics()}"

    def wait(self, what: str, probe: Any, timeout: float = 90) -> Any:
        return wait_for(what, probe, timeout=timeout, diagnostics=self.diagnostics)

    def submit(self, body: dict[str, Any]) -> dict[str, Any]:
        """kubectl apply on the manager; the TrainJob as stored at CREATE (after every mutating webhook)."""
        return json.loads(self.manager.k("apply", "-f", "-", "-o", "json", input=json.dumps(body)).stdout)

    def dispatched(self, name: str, to: Plane | None = None, timeout: float = 90) -> tuple[dict[str, Any], dict[str, Any]]:
        """Wait until the manager's Workload has the MultiKueue check Ready on ``to`` and the copy exists there."""
        to = to or self.worker

        def ready() -> tuple[dict[str, Any], dict[str, Any]] | None:
            wl = self.manager.workload_of(name)
            state = check_state(wl)
            if not (wl and state and state["state"] == "Ready" and wl["status"].get("clusterName") == to.name):
                return None
            copy = to.trainjob(name)
            return (wl, copy) if copy else None

        return self.wait(f"{name} dispatched to {to.name}", ready, timeout=timeout)

    def delete(self, name: str) -> None:
        self.manager.k("delete", "trainjobs.trainer.kubeflow.org", name, "-n", TEAM_NS, "--ignore-not-found",
                       "--wait=false")


@pytest.fixture(scope="module")
def mk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MultiKueue]:
    t0 = time.monotonic()
    try:
        kueue_bin = build_kueue()
    except Exception as e:  # noqa: BLE001 - say why, never skip
        pytest.fail(f"cannot build the Kueue manager (hack/build-tools.sh kueue): {e}", pytrace=False)
    tmp = tmp_path_factory.mktemp("multikueue")
    planes: list[Plane] = []
    try:
        # Both control planes start at once; hack/e2e-cluster.sh builds what is missing (3600 s: a cold Go build).
        starting = {"manager": start_control_plane("manager"), "worker-1": start_control_plane("worker")}
        for name, started in starting.items():
            try:
                planes.append(finish_control_plane(name, started, tmp / name))
            except AssertionError as e:
                pytest.fail(str(e), pytrace=False)
        manager, worker = planes
        timings = {"control planes up (s)": time.monotonic() - t0}
        for plane in planes:
            install_crds(plane, kueue_bin)
        create_namespaces(manager, TEAM_NS, SYSTEM_NS, KUEUE_NS)
        create_namespaces(worker, TEAM_NS, SYSTEM_NS)
        # kube-controller-manager's serviceaccount controller: without the default ServiceAccount no Pod is admitted.
        wait_for(f"ServiceAccount {TEAM_NS}/default on the worker", lambda: worker.k(
            "-n", TEAM_NS, "get", "serviceaccount", "default", check=False).returncode == 0, timeout=60)

        start_kueue(manager, kueue_bin, manager_kueue_config())
        start_kueue(worker, kueue_bin)
        start_trainguard(manager)
        # The worker's admin names the identity MultiKueue creates copies with (the manager's kubeconfig user).
        start_trainguard(worker, webhook_extra=["--multikueue-dispatcher", MK_USER])
        worker.apply([runtime(), *worker_queue_objects(), WORKER_POLICY])
        connect_worker(manager, worker)
        manager.apply([runtime(), *manager_queue_objects([worker.name]), MANAGER_POLICY])
        for plane in planes:
            wait_webhooks_called(plane)
        wait_cluster_active(manager, worker.name)
        wait_for("the MultiKueue AdmissionCheck Active", lambda: is_true(
            manager.get("admissionchecks.kueue.x-k8s.io", CHECK, None), "Active"), timeout=60,
            diagnostics=manager.diagnostics)
        wait_for("the manager's ClusterQueue Active", lambda: is_true(
            manager.get("clusterqueues.kueue.x-k8s.io", "gpu-cq", None), "Active"), timeout=60,
            diagnostics=manager.diagnostics)
        timings["ready for tests (s)"] = time.monotonic() - t0
        env = MultiKueue(manager, worker, tmp, kueue_bin, timings)
        yield env
        print("multikueue e2e timings:", json.dumps({k: round(v, 1) for k, v in env.timings.items()}))
    finally:
        t_down = time.monotonic()
        problems = [p for plane in reversed(planes) for p in plane.stop()]
        print(f"multikueue teardown: {time.monotonic() - t_down:.1f}s")
        assert not problems, "\n".join(problems)


def test_user_labelled_trainjob_is_dispatched_and_reports_back(mk: MultiKueue) -> None:
    """(a) Baseline: the user names the queue; Kueue's own webhook sets managedBy, MultiKueue copies the job."""
    t0 = time.monotonic()
    name = "user-queued"
    created = mk.submit(trainjob_manifest(name, gpus=2, labels={QUEUE_LABEL: QUEUE}))
    assert created["spec"].get("managedBy") == MULTIKUEUE_CONTROLLER, created["spec"]
    assert created["spec"].get("suspend") is True

    wl, copy = mk.dispatched(name)
    labels = copy["metadata"]["labels"]
    assert labels[ORIGIN_LABEL] == ORIGIN and labels[PREBUILT_LABEL] == wl["metadata"]["name"], labels
    assert copy["spec"].get("managedBy") in (None, "trainer.kubeflow.org/trainjob-controller"), copy["spec"]

    done = mk.wait(f"{name}'s manager Workload Finished", lambda: is_true(mk.manager.workload_of(name), "Finished"))
    assert done
    tj = mk.wait(f"{name} Complete on the manager (status copied from the worker)",
                 lambda: (t := mk.manager.trainjob(name)) and is_true(t, "Complete") and t)
    assert tj["status"]["jobsStatus"][0]["succeeded"] == 1, tj["status"]
    assert mk.manager.jobset(name) is None, "the manager built a JobSet for a MultiKueue-managed TrainJob"
    mk.timings["(a) submit -> Complete on the manager (s)"] = time.monotonic() - t0


def test_policy_queued_trainjob_runs_on_the_worker_and_completes(mk: MultiKueue) -> None:
    """(b) The queue comes from the manager's TrainJobPolicy: trainguard sets managedBy and suspend as Kueue would
    have; Kueue dispatches it; the worker runs it on kwok GPU nodes and the manager shows the completion."""
    t0 = time.monotonic()
    name = "policy-queued"
    created = mk.submit(trainjob_manifest(name, nodes=2, gpus=4))
    assert created["metadata"]["labels"][QUEUE_LABEL] == QUEUE, created["metadata"]
    assert created["spec"].get("managedBy") == MULTIKUEUE_CONTROLLER, (
        "a policy-queued TrainJob on a MultiKueue queue kept managedBy "
        f"{created['spec'].get('managedBy')!r}: Kueue's check will reject it")
    assert created["spec"].get("suspend") is True
    manager_patch = runtime_patch(created, POLICY_MANAGER)
    assert manager_patch is not None and created["spec"]["runtimePatches"][0] == manager_patch

    try:
        wl, copy = mk.dispatched(name)
    except AssertionError as e:
        # Before the fix the Workload is deactivated with the check Rejected; say so plainly.
        state = check_state(mk.manager.workload_of(name))
        raise AssertionError(f"not dispatched; MultiKueue check: {state}\n{e}") from None
    mk.timings["(b) submit -> dispatched (s)"] = time.monotonic() - t0
    assert copy["metadata"]["labels"][ORIGIN_LABEL] == ORIGIN
    assert copy["metadata"]["labels"][QUEUE_LABEL] == QUEUE
    # The manager's policy decided the shape Kueue admitted: the worker kept its patch and added none of its own.
    assert runtime_patch(copy, POLICY_MANAGER) == manager_patch, (runtime_patch(copy, POLICY_MANAGER), manager_patch)
    assert WORKER_TOLERATION["key"] not in json.dumps(copy["spec"].get("runtimePatches")), copy["spec"]["runtimePatches"]
    assert runtime_patch(copy, KUEUE_MANAGER) is not None  # the worker's Kueue seeded its own

    # The worker's JobSet runs on kwok GPU nodes through the real JobSet, Job and scheduler.
    def bound() -> list[dict[str, Any]]:
        pods = mk.worker.pods_of(name)
        return pods if len(pods) == 2 and all(p["spec"].get("nodeName") for p in pods) else []

    pods = mk.wait(f"{name}'s 2 pods bound on the worker", bound)
    for pod in pods:
        assert pod["spec"]["nodeName"].startswith("kwok-gpu-"), pod["spec"]["nodeName"]
        assert pod["spec"]["nodeSelector"].items() >= MANAGER_SELECTOR.items(), pod["spec"]["nodeSelector"]
        assert MANAGER_TOLERATION in pod["spec"]["tolerations"]
        assert WORKER_TOLERATION not in pod["spec"]["tolerations"]
        (container,) = pod["spec"]["containers"]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "4"
    mk.wait(f"{name} Complete on the worker", lambda: is_true(mk.worker.trainjob(name), "Complete"))

    tj = mk.wait(f"{name} Complete on the manager", lambda: (t := mk.manager.trainjob(name)) and is_true(t, "Complete") and t)
    assert tj["status"]["jobsStatus"] == [
        {"name": "node", "ready": 0, "succeeded": 1, "failed": 0, "active": 0, "suspended": 0}], tj["status"]
    mk.timings["(b) submit -> Complete on the manager (s)"] = time.monotonic() - t0
    state = mk.wait(f"{name}'s phase label on the manager", lambda: (
        (mk.manager.trainjob(name)["metadata"].get("labels") or {}).get(STATE_LABEL) == "Complete"), timeout=60)
    assert state
    assert is_true(mk.manager.workload_of(name), "Finished")
    assert mk.manager.jobset(name) is None, "the manager built a JobSet for a MultiKueue-managed TrainJob"
    # Both sides' trainguard admitted every write to the job (no denial on either cluster).
    for plane in (mk.manager, mk.worker):
        verdicts = {r.get("verdict") for r in plane.validator_log(name)}
        assert verdicts == {"allowed"}, (plane.name, plane.validator_log(name))


def test_deleting_on_the_manager_removes_the_workers_copy(mk: MultiKueue) -> None:
    """(c) A running job deleted on the manager: MultiKueue deletes the worker's TrainJob and Workload, and the
    worker's garbage collector its JobSet and pods."""
    t0 = time.monotonic()
    name = "deleted-on-manager"
    mk.submit(trainjob_manifest(name, gpus=4, image=KEEPS_RUNNING_IMAGE))
    mk.dispatched(name)
    mk.wait(f"{name}'s pod Running on the worker", lambda: any(
        p["status"].get("phase") == "Running" for p in mk.worker.pods_of(name)))
    remote_workload = mk.worker.workload_of(name)
    assert remote_workload is not None

    mk.delete(name)
    mk.wait(f"{name}'s copy gone from the worker", lambda: mk.worker.trainjob(name) is None)
    mk.wait(f"{name}'s Workload gone from the worker", lambda: mk.worker.get(
        "workloads.kueue.x-k8s.io", remote_workload["metadata"]["name"]) is None)
    mk.wait(f"{name}'s JobSet and pods gone from the worker",
            lambda: mk.worker.jobset(name) is None and not mk.worker.pods_of(name))
    mk.wait(f"{name}'s Workload gone from the manager", lambda: not [
        w for w in mk.manager.items("workloads.kueue.x-k8s.io") if w["metadata"]["name"] == remote_workload["metadata"]["name"]])
    mk.timings["(c) delete -> worker clean (s)"] = time.monotonic() - t0


def test_worker_enforce_limits_still_deny_the_copy(mk: MultiKueue) -> None:
    """(e) The worker keeps the manager's policy patch but not at the price of its own limits: 8 GPUs per node pass
    the manager's policy (8) and are denied by the worker's (4). Kueue's copy is never created on the worker; the
    manager's job stays suspended and not dispatched, and Kueue keeps retrying with the denial in its log."""
    name = "too-big-for-the-worker"
    created = mk.submit(trainjob_manifest(name, gpus=GPUS_PER_NODE))
    assert created["metadata"]["labels"][QUEUE_LABEL] == QUEUE
    try:
        def denied() -> list[dict[str, Any]]:
            return [r for r in mk.worker.validator_log(name) if r.get("verdict") == "denied"]

        denials = mk.wait(f"the worker's trainguard to deny {name}", denied)
        assert (denials[0].get("operation"), denials[0].get("reason")) == ("CREATE", "PolicyLimits"), denials[0]

        def kueue_reports() -> list[dict[str, Any]]:
            out = []
            for line in mk.manager.kueue.log_path.read_text(errors="replace").splitlines():
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if rec.get("msg") == "Syncing remote controller object" and name in rec.get("name", ""):
                    out.append(rec)
            return out

        (report, *_) = mk.wait("the denial in the manager's Kueue log", kueue_reports, timeout=60)
        assert report["remote"] == mk.worker.name
        assert 'denied the request: spec.trainer.resourcesPerNode: Invalid value: 8: 8 nvidia.com/gpu per node ' \
               'exceed maxGpusPerNode 4 of TrainJobPolicy "mk-worker"' in report["error"], report["error"]
        time.sleep(3)  # still not there a little later, and nothing runs on the manager either
        assert mk.worker.trainjob(name) is None
        tj = mk.manager.trainjob(name)
        assert tj["spec"].get("suspend") is True and not is_true(tj, "Complete"), tj
        state = check_state(mk.manager.workload_of(name))
        assert state and state["state"] != "Ready", state
        assert mk.manager.jobset(name) is None
    finally:
        mk.delete(name)
    mk.wait(f"{name}'s Workload gone from the worker", lambda: not [
        w for w in mk.worker.items("workloads.kueue.x-k8s.io") if name in w["metadata"]["name"]])


@pytest.fixture
def second_worker(mk: MultiKueue) -> Iterator[Plane]:
    """worker-2: etcd + kube-apiserver and Kueue (no pods run there), connected to the manager but not yet in its
    MultiKueueConfig."""
    t0 = time.monotonic()
    plane = None
    try:
        plane = finish_control_plane("worker-2", start_control_plane("bare"), mk.tmp / "worker-2")
        install_crds(plane, mk.kueue_bin)
        create_namespaces(plane, TEAM_NS)
        start_kueue(plane, mk.kueue_bin)
        plane.apply([runtime(), *worker_queue_objects()])
        wait_webhooks_called(plane)
        connect_worker(mk.manager, plane)
        wait_cluster_active(mk.manager, plane.name)
        mk.timings["(d) worker-2 ready (s)"] = time.monotonic() - t0
        yield plane
    finally:
        mk.manager.k("delete", "multikueueclusters.kueue.x-k8s.io", "worker-2", "--ignore-not-found", check=False)
        if plane is not None:
            problems = plane.stop()
            assert not problems, problems


def test_lost_worker_job_is_redispatched_and_the_stale_copy_collected(mk: MultiKueue, second_worker: Plane) -> None:
    """(d) What Kueue v0.17 does when the worker running a job goes away (here: its MultiKueueCluster deleted):
    the check stays Ready for workerLostTimeout, then Retry ("Reserving remote lost"); the Workload is evicted,
    requeued and dispatched to worker-2. The copy on the lost worker is out of Kueue's reach and keeps running until
    the worker is connected again; then Kueue's garbage collector deletes it, its manager Workload being gone."""
    name, w1, w2 = "lost-worker", mk.worker, second_worker
    mk.submit(trainjob_manifest(name, gpus=4, image=KEEPS_RUNNING_IMAGE))
    first, _ = mk.dispatched(name)
    mk.wait(f"{name}'s pod Running on {w1.name}", lambda: any(
        p["status"].get("phase") == "Running" for p in w1.pods_of(name)))
    try:
        mk.manager.apply([{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "MultiKueueConfig",
                           "metadata": {"name": MK_CONFIG}, "spec": {"clusters": [w1.name, w2.name]}}])
        t_lost = time.monotonic()
        mk.manager.k("delete", "multikueueclusters.kueue.x-k8s.io", w1.name)
        check = mk.wait("the AdmissionCheck to report the missing cluster", lambda: (
            (ac := mk.manager.get("admissionchecks.kueue.x-k8s.io", CHECK, None))
            and "Missing clusters: [worker-1]" in (condition(ac, "Active") or {}).get("message", "") and ac))
        assert condition(check, "Active")["status"] == "True" and condition(check, "Active")["reason"] == "SomeActiveClusters"

        wl, copy = mk.dispatched(name, to=w2, timeout=WORKER_LOST_TIMEOUT_S + 120)
        mk.timings["(d) worker lost -> re-dispatched (s)"] = time.monotonic() - t_lost
        assert wl["metadata"]["uid"] == first["metadata"]["uid"]  # the same Workload, evicted and requeued
        evictions = (wl["status"].get("schedulingStats") or {}).get("evictions") or []
        assert [(e["reason"], e["count"]) for e in evictions] == [("AdmissionCheck", 1)], wl["status"]
        assert copy["metadata"]["labels"][ORIGIN_LABEL] == ORIGIN
        # The lost worker still runs its copy: Kueue cannot reach it.
        assert w1.trainjob(name) is not None and any(p["status"].get("phase") == "Running" for p in w1.pods_of(name))

        mk.delete(name)
        mk.wait(f"{name}'s copy gone from {w2.name}", lambda: w2.trainjob(name) is None)
        mk.manager.apply([multikueue_cluster(w1.name)])
        wait_cluster_active(mk.manager, w1.name)
        mk.wait(f"Kueue's garbage collector to delete the stale copy on {w1.name}",
                lambda: w1.trainjob(name) is None and w1.workload_of(name) is None, timeout=60)
        mk.wait(f"the stale copy's pods gone from {w1.name}", lambda: not w1.pods_of(name))
    finally:
        mk.delete(name)
        mk.manager.apply([multikueue_cluster(w1.name),
                          {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "MultiKueueConfig",
                           "metadata": {"name": MK_CONFIG}, "spec": {"clusters": [w1.name]}}])

