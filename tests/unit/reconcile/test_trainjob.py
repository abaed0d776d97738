"""The TrainJob reconcile step against fake caches and a recording fake API (the real build is used)."""

from __future__ import annotations

import copy
from datetime import datetime, timezone
from typing import Any

import pytest

from trainguard.controller.reconcile import status as st
from trainguard.controller.reconcile.trainjob import ReconcileError, TrainJobCaches, TrainJobReconciler
from trainguard.webhook.kube.errors import AlreadyExists, Conflict, NotFound
from trainguard.webhook.policy.verdict import ClusterSnapshot
from trainguard.webhook.runtime import build_runtime_snapshot

SNAPSHOTS = "trainguard-system"
SNAPSHOT = "runtime-snapshot-uid-1"

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)


class Store:
    def __init__(self, *objs: dict) -> None:
        self.objs = {((o["metadata"].get("namespace") or ""), o["metadata"]["name"]): o for o in objs}

    def get(self, name: str, namespace: str = "") -> dict | None:
        return self.objs.get((namespace, name))

    def items(self):
        return list(self.objs.items())


class FakeKube:
    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.existing: dict[tuple[str, str], dict] = {}
        self.status_conflict = False

    async def create(self, resource, obj, namespace=None):
        key = (resource.kind, obj["metadata"]["name"])
        self.calls.append(("create", *key))
        if key in self.existing:
            raise AlreadyExists(409, "AlreadyExists", "exists")
        self.existing[key] = obj
        return obj

    async def get(self, resource, name, namespace=None):
        self.calls.append(("get", resource.kind, name))
        if (resource.kind, name) not in self.existing:
            raise NotFound(404, "NotFound", "nope")
        return self.existing[(resource.kind, name)]

    async def apply(self, resource, obj, *, field_manager, force=True):
        assert field_manager == "trainguard" and force
        self.calls.append(("apply", resource.kind, obj["metadata"]["name"]))
        self.existing[(resource.kind, obj["metadata"]["name"])] = obj
        return obj

    async def merge_patch(self, resource, name, patch, namespace=None, *, subresource=None, field_manager=None):
        self.calls.append(("patch", resource.kind, name, subresource, copy.deepcopy(patch)))
        if subresource == "status" and self.status_conflict:
            raise Conflict(409, "Conflict", "stale")
        if getattr(self, "trainjob_deleted", False) and resource.kind == "TrainJob":
            raise NotFound(404, "NotFound", f'trainjobs.trainer.kubeflow.org "{name}" not found')
        return patch

    async def delete(self, resource, name, namespace=None, *, propagation=None):
        self.calls.append(("delete", resource.kind, name))
        return {}

    def verbs(self) -> list[tuple]:
        return [c[:3] for c in self.calls]


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    async def record(self, regarding, type_, reason, note, action="Reconciling"):
        self.events.append((type_, reason, note))


def runtime(image: str = "pytorch:1", *, mpi: bool = False) -> dict:
    if mpi:
        policy = {"numNodes": 1, "mpi": {"numProcPerNode": 1, "mpiImplementation": "OpenMPI",
                                         "sshAuthMountPath": "/root/.ssh", "runLauncherAsNode": False}}
        jobs = [
            {"name": "launcher", "template": {"metadata": {"labels": {st.ANCESTOR_LABEL: "trainer"}}, "spec": {
                "template": {"spec": {"containers": [{"name": "node", "image": image}]}}}}},
            {"name": "node", "template": {"spec": {"template": {"spec": {
                "containers": [{"name": "node", "image": image}]}}}}},
        ]
    else:
        policy = {"numNodes": 1, "torch": {}}
        jobs = [{"name": "node", "template": {"metadata": {"labels": {st.ANCESTOR_LABEL: "trainer"}}, "spec": {
            "template": {"spec": {"containers": [{"name": "node", "image": image}]}}}}}]
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
            "metadata": {"name": "rt"}, "spec": {"mlPolicy": policy, "template": {"spec": {"replicatedJobs": jobs}}}}


def trainjob(**spec: Any) -> dict:
    status = spec.pop("status", {})
    labels = spec.pop("labels", {})
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": "job", "namespace": "ns", "uid": "uid-1", "resourceVersion": "7",
                         "creationTimestamp": st.format_time(NOW), "labels": labels},
            "spec": {"runtimeRef": {"name": "rt"}, "trainer": {"numNodes": 2}, **spec}, "status": status}


def reconciler(job: dict | None, *, rt: dict | None = None, snapshots=(), jobsets=(), policies=(),
               namespace_labels=None, scope=None):
    kube, events = FakeKube(), Recorder()
    view = ClusterSnapshot(policies={p["metadata"]["name"]: p for p in policies},
                           namespace_labels=namespace_labels or {"ns": {}})
    caches = TrainJobCaches(
        trainjobs=Store(*([job] if job else [])), jobsets=Store(*jobsets), snapshots=Store(*snapshots),
        training_runtimes=Store(), cluster_training_runtimes=Store(*([rt] if rt else [])), dataset_caches=Store(),
        cluster_snapshot=lambda: view)
    return TrainJobReconciler(kube, caches, events, snapshot_namespace=SNAPSHOTS, scope=scope, now=lambda: NOW), kube, events


async def test_other_manager_is_left_untouched() -> None:
    """MultiKueue's job: nothing built, no event; only the state label (tests/unit/reconcile/test_multikueue_phase.py)."""
    r, kube, events = reconciler(trainjob(managedBy="kueue.x-k8s.io/multikueue", labels={st.STATE_LABEL: "Created"}),
                                 rt=runtime())
    await r.reconcile("ns", "job")
    assert kube.calls == [] and events.events == []


async def test_new_job_snapshots_runtime_then_applies_jobset_and_labels_state() -> None:
    r, kube, events = reconciler(trainjob(), rt=runtime())
    await r.reconcile("ns", "job")
    assert kube.verbs()[:2] == [("create", "ConfigMap", SNAPSHOT), ("apply", "JobSet", "job")]
    snap = kube.existing[("ConfigMap", SNAPSHOT)]
    assert snap["metadata"]["namespace"] == SNAPSHOTS and "ownerReferences" not in snap["metadata"]
    jobset = kube.existing[("JobSet", "job")]
    assert jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelism"] == 2
    assert ("Normal", "Created", "Created JobSet ns/job") in events.events
    label_patch = [c for c in kube.calls if c[0] == "patch" and c[3] is None]
    # One patch: the state and the size of the JobSet just built (kubectl's STATE, NODES and GPUS columns).
    assert [c[4] for c in label_patch] == [{"metadata": {"labels": {
        st.STATE_LABEL: "Created", st.NODES_LABEL: "2", st.GPUS_LABEL: "0"}}}]
    assert not [c for c in kube.calls if c[0] == "patch" and c[3] == "status"], "empty status is not written"


async def test_snapshot_wins_over_an_edited_live_runtime() -> None:
    job = trainjob()
    snap = build_runtime_snapshot(job, runtime("pytorch:1"), SNAPSHOTS)
    r, kube, _ = reconciler(job, rt=runtime("pytorch:EDITED"), snapshots=[snap])
    await r.reconcile("ns", "job")
    assert ("create", "ConfigMap", SNAPSHOT) not in kube.verbs()
    container = kube.existing[("JobSet", "job")]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"][
        "spec"]["containers"][0]
    assert container["image"] == "pytorch:1"


async def test_snapshot_created_behind_a_stale_cache_is_read_back_not_overwritten() -> None:
    job = trainjob()
    r, kube, _ = reconciler(job, rt=runtime("pytorch:EDITED"))
    kube.existing[("ConfigMap", SNAPSHOT)] = build_runtime_snapshot(job, runtime("pytorch:1"), SNAPSHOTS)
    await r.reconcile("ns", "job")
    assert ("get", "ConfigMap", SNAPSHOT) in kube.verbs()
    spec = kube.existing[("JobSet", "job")]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert spec["containers"][0]["image"] == "pytorch:1"


async def test_snapshot_of_another_trainjob_is_rejected_with_an_event() -> None:
    job = trainjob()
    other = build_runtime_snapshot({**job, "metadata": {**job["metadata"], "name": "someone-else"}}, runtime(),
                                   SNAPSHOTS)
    r, kube, events = reconciler(job, rt=runtime(), snapshots=[other])
    with pytest.raises(ReconcileError):
        await r.reconcile("ns", "job")
    assert events.events[0][:2] == ("Warning", "TrainJobResourcesCreationFailed")
    assert events.events[0][2].startswith("TrainJob resources reconciliation failed: invalid runtime snapshot")
    assert ("apply", "JobSet", "job") not in kube.verbs()


async def test_missing_runtime_is_a_build_failure_event_and_retry() -> None:
    r, kube, events = reconciler(trainjob())
    with pytest.raises(ReconcileError):
        await r.reconcile("ns", "job")
    assert events.events == [("Warning", "TrainJobResourcesCreationFailed",
                              "TrainJob resources reconciliation failed: not found ClusterTrainingRuntime "
                              "specified in TrainJob: rt")]


async def test_mpi_secret_is_created_not_applied_and_only_when_absent() -> None:
    r, kube, _ = reconciler(trainjob(), rt=runtime(mpi=True))
    await r.reconcile("ns", "job")
    assert ("create", "Secret", "job-mpi-ssh-auth") in kube.verbs()
    assert ("apply", "Secret", "job-mpi-ssh-auth") not in kube.verbs()
    secret = kube.existing[("Secret", "job-mpi-ssh-auth")]
    assert secret["type"] == "kubernetes.io/ssh-auth" and secret["immutable"] is True

    # The controller may not read Secrets: the next reconcile remembers the create and generates no new key.
    kube.calls.clear()
    await r.reconcile("ns", "job")
    assert not [v for v in kube.verbs() if v[1] == "Secret"]

    # A Secret someone else created first: AlreadyExists means done, nothing is overwritten.
    r, kube, _ = reconciler(trainjob(), rt=runtime(mpi=True))
    kube.existing[("Secret", "job-mpi-ssh-auth")] = {"metadata": {"name": "job-mpi-ssh-auth", "namespace": "ns"}}
    await r.reconcile("ns", "job")
    await r.reconcile("ns", "job")
    assert [v for v in kube.verbs() if v[1] == "Secret"] == [("create", "Secret", "job-mpi-ssh-auth")]
    assert kube.existing[("Secret", "job-mpi-ssh-auth")] == {"metadata": {"name": "job-mpi-ssh-auth", "namespace": "ns"}}


async def test_running_jobset_is_not_reapplied() -> None:
    running = {"metadata": {"name": "job", "namespace": "ns"}, "spec": {"suspend": False}}
    r, kube, _ = reconciler(trainjob(suspend=False), rt=runtime(), jobsets=[running])
    await r.reconcile("ns", "job")
    assert ("apply", "JobSet", "job") not in kube.verbs()


async def test_failed_job_whose_jobset_is_gone_is_not_rebuilt() -> None:
    failed = {"conditions": [{"type": "Failed", "status": "True", "reason": "FailedJobs", "message": "x",
                              "lastTransitionTime": st.format_time(NOW)}]}
    r, kube, _ = reconciler(trainjob(status=failed, labels={st.STATE_LABEL: "Failed"}), rt=runtime())
    await r.reconcile("ns", "job")
    assert kube.calls == []


async def test_status_patch_is_guarded_by_resource_version() -> None:
    r, kube, _ = reconciler(trainjob(suspend=True), rt=runtime())
    await r.reconcile("ns", "job")
    (patch,) = [c for c in kube.calls if c[0] == "patch" and c[3] == "status"]
    assert patch[4]["metadata"] == {"resourceVersion": "7"}
    assert patch[4]["status"]["conditions"][0]["reason"] == "Suspended"


async def test_stale_status_write_is_retried() -> None:
    r, kube, _ = reconciler(trainjob(suspend=True), rt=runtime())
    kube.status_conflict = True
    with pytest.raises(ReconcileError) as err:
        await r.reconcile("ns", "job")
    assert err.value.reason == "StaleTrainJob"


async def test_deadline_passed_deletes_jobset_and_fails_job() -> None:
    suspended_js = {"metadata": {"name": "job", "namespace": "ns"}, "spec": {"suspend": False}}
    job = trainjob(activeDeadlineSeconds=1)
    job["metadata"]["creationTimestamp"] = "2025-12-31T00:00:00Z"
    r, kube, events = reconciler(job, rt=runtime(), jobsets=[suspended_js])
    result = await r.reconcile("ns", "job")
    assert ("delete", "JobSet", "job") in kube.verbs()
    assert result.requeue_after is None
    assert ("Warning", "DeadlineExceeded", "TrainJob exceeded its active deadline") in events.events


async def test_deadline_pending_requeues_at_deadline() -> None:
    r, _, _ = reconciler(trainjob(activeDeadlineSeconds=90), rt=runtime())
    assert (await r.reconcile("ns", "job")).requeue_after == pytest.approx(90)


async def test_unsupported_runtime_kind_fails_the_job() -> None:
    job = trainjob()
    job["spec"]["runtimeRef"] = {"name": "rt", "kind": "Other", "apiGroup": "example.com"}
    r, kube, _ = reconciler(job, rt=runtime())
    await r.reconcile("ns", "job")
    (patch,) = [c for c in kube.calls if c[0] == "patch" and c[3] == "status"]
    assert patch[4]["status"]["conditions"][0]["reason"] == "TrainingRuntimeNotSupported"
    assert not [v for v in kube.verbs() if v[0] == "apply"]


@pytest.mark.parametrize("ref, served", [
    ({"name": "rt"}, True),
    ({"name": "rt", "kind": "ClusterTrainingRuntime", "apiGroup": "trainer.kubeflow.org"}, True),
    ({"name": "rt", "kind": ""}, False),  # upstream keys its registry ".trainer.kubeflow.org": no runtime
    ({"name": "rt", "apiGroup": ""}, False),  # "ClusterTrainingRuntime" without a group: no runtime
], ids=["defaults", "explicit", "empty-kind", "empty-group"])
async def test_the_reconciler_reads_the_runtime_ref_as_the_webhook_does(ref, served) -> None:
    """One reading of the runtimeRef (``trainguard.webhook.api.views.RuntimeRef``): an empty kind is not defaulted
    by the reconciler while the webhook calls it unsupported (the two used to disagree on ``kind: ""``)."""
    from trainguard.webhook.policy.runtime_ref import UnsupportedRuntime, resolve_runtime

    job = trainjob()
    job["spec"]["runtimeRef"] = ref
    try:
        resolve_runtime(job, "ns", ClusterSnapshot(cluster_training_runtimes={"rt": runtime()}))
        webhook_serves = True
    except UnsupportedRuntime:
        webhook_serves = False
    r, kube, _ = reconciler(job, rt=runtime())
    await r.reconcile("ns", "job")
    reasons = [c[4]["status"]["conditions"][0].get("reason") for c in kube.calls if c[0] == "patch" and c[3] == "status"]
    built = any(v[0] == "apply" for v in kube.verbs())
    assert (webhook_serves, built, "TrainingRuntimeNotSupported" in reasons) == (served, served, not served)


async def test_trainjob_deleted_during_its_reconcile_is_done_not_an_error() -> None:
    """The cache still held the TrainJob, the apiserver no longer does: the status write's 404 ends the reconcile
    (no retry with backoff, no error metric, no events about a deleted object)."""
    r, kube, events = reconciler(trainjob(suspend=True), rt=runtime())  # suspended: a status to write
    kube.trainjob_deleted = True
    result = await r.reconcile("ns", "job")
    assert result.requeue_after is None
    assert [c[3] for c in kube.calls if c[0] == "patch"] == ["status"]  # the write that found it gone, no more
    assert [e for e in events.events if e[1] != "Created"] == []


async def test_size_labels_are_written_back_when_a_user_edits_them_and_not_rewritten_otherwise() -> None:
    """The NODES and GPUS columns are for reading: an edited label is set back, an unchanged one costs no write."""
    edited = trainjob(labels={st.STATE_LABEL: "Created", st.NODES_LABEL: "64", st.GPUS_LABEL: "0"})
    r, kube, _ = reconciler(edited, rt=runtime())
    await r.reconcile("ns", "job")
    assert [c[4] for c in kube.calls if c[0] == "patch" and c[3] is None] == [
        {"metadata": {"labels": {st.NODES_LABEL: "2"}}}]

    settled = trainjob(labels={st.STATE_LABEL: "Created", st.NODES_LABEL: "2", st.GPUS_LABEL: "0"})
    r, kube, _ = reconciler(settled, rt=runtime())
    await r.reconcile("ns", "job")
    assert not [c for c in kube.calls if c[0] == "patch" and c[3] is None]


class NoSnapshotNamespace(FakeKube):
    """The apiserver without the snapshot namespace: a ConfigMap create there is 404 (as the real one answers)."""

    async def create(self, resource, obj, namespace=None):
        if resource.kind == "ConfigMap" and obj["metadata"].get("namespace") == SNAPSHOTS and self.missing:
            self.calls.append(("create", resource.kind, obj["metadata"]["name"]))
            raise NotFound(404, "NotFound", f'namespaces "{SNAPSHOTS}" not found')
        return await super().create(resource, obj, namespace)


async def test_a_missing_snapshot_namespace_is_one_warning_naming_the_fix() -> None:
    """Retried reconciles of a job the controller cannot build because its snapshot namespace does not exist: one
    Warning ``ControllerMisconfigured`` that says what the admin must do, an error naming the same fix (the
    controller's log line), and once the namespace exists the job is built and a later misconfiguration is told
    again."""
    r, _, events = reconciler(trainjob(), rt=runtime())
    kube = NoSnapshotNamespace()
    kube.missing = True
    r._kube = kube
    for _ in range(4):
        with pytest.raises(ReconcileError) as err:
            await r.reconcile("ns", "job")
        assert err.value.reason == "ControllerMisconfigured"
        assert f'snapshot namespace "{SNAPSHOTS}" does not exist' in str(err.value)
        assert f"kubectl create namespace {SNAPSHOTS}" in str(err.value)
    warnings = [e for e in events.events if e[1] == "ControllerMisconfigured"]
    assert len(warnings) == 1 and warnings[0][0] == "Warning"
    assert f"kubectl create namespace {SNAPSHOTS}" in warnings[0][2] and "--snapshot-namespace" in warnings[0][2]
    assert ("apply", "JobSet", "job") not in kube.verbs()
    kube.missing = False
    await r.reconcile("ns", "job")
    assert ("apply", "JobSet", "job") in kube.verbs()
    del kube.existing[("ConfigMap", SNAPSHOT)]
    kube.missing = True
    with pytest.raises(ReconcileError):
        await r.reconcile("ns", "job")
    assert len([e for e in events.events if e[1] == "ControllerMisconfigured"]) == 2
