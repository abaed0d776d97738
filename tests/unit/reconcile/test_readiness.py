"""The controller's /readyz decision (``readiness``, pure) and what the Controller feeds it from its caches."""

from __future__ import annotations

from trainguard.controller.reconcile.controller import Controller, Settings
from trainguard.controller.reconcile.metrics import Metrics
from trainguard.controller.reconcile.readiness import CacheState, problems, probe, snapshot_namespace_missing
from trainguard.webhook.kube.resources import DATASET_CACHES, JOBSETS, NAMESPACES, TRAINJOBS


def state(resource, synced=True, not_served=False, error=""):
    return CacheState(resource, synced=synced, not_served=not_served, error=error)


def test_all_synced_and_the_namespace_there_is_ready() -> None:
    found = problems([state(TRAINJOBS), state(JOBSETS)], snapshot_namespace="tg", snapshot_namespace_exists=True)
    assert found == []
    answer = probe(found)
    assert answer.ready and answer.detail == "ok\n"


def test_a_missing_snapshot_namespace_is_named_with_its_fix() -> None:
    found = problems([state(TRAINJOBS), state(NAMESPACES)], snapshot_namespace="tg-sys",
                     snapshot_namespace_exists=False)
    assert [p.check for p in found] == ["snapshot-namespace"]
    answer = probe(found)
    assert not answer.ready
    assert 'snapshot namespace "tg-sys" does not exist' in answer.detail
    assert "kubectl create namespace tg-sys" in answer.detail and "--snapshot-namespace" in answer.detail
    assert found[0].message == snapshot_namespace_missing("tg-sys")


def test_an_unserved_crd_names_the_crd_its_version_and_how_to_look() -> None:
    found = problems([state(TRAINJOBS, synced=False, not_served=True), state(JOBSETS, synced=False, not_served=True),
                      state(DATASET_CACHES)], snapshot_namespace="tg", snapshot_namespace_exists=True)
    assert [p.check for p in found] == ["crd", "crd"]
    text = probe(found).detail
    assert "trainjobs.trainer.kubeflow.org" in text and "v1alpha1" in text and "Kubeflow Trainer" in text
    assert "jobsets.jobset.x-k8s.io" in text and "v1alpha2" in text and "JobSet" in text
    assert "kubectl get crd trainjobs.trainer.kubeflow.org" in text
    assert "not synced" not in text, "an unserved kind is reported as such, not as a cache still listing"


def test_a_trainguard_crd_points_at_trainguards_crds() -> None:
    (found,) = problems([state(DATASET_CACHES, synced=False, not_served=True)], snapshot_namespace="tg",
                        snapshot_namespace_exists=True)
    assert "datasetcaches.trainguard.io" in found.message and "crds/" in found.message


def test_caches_still_listing_are_named_with_their_last_error() -> None:
    found = problems([state(TRAINJOBS, synced=False, error="403 Forbidden: nope"), state(JOBSETS)],
                     snapshot_namespace="tg", snapshot_namespace_exists=True)
    assert [p.check for p in found] == ["caches"]
    assert "trainjobs.trainer.kubeflow.org" in found[0].message and "403 Forbidden: nope" in found[0].message
    assert "jobsets" not in found[0].message


def test_the_namespace_is_not_judged_before_the_namespace_cache_listed() -> None:
    # Unknown is not missing: the namespace cache has not listed yet, so only the unsynced cache is reported.
    found = problems([state(NAMESPACES, synced=False)], snapshot_namespace="tg", snapshot_namespace_exists=False)
    assert [p.check for p in found] == ["caches"]


def test_the_controller_reads_its_informers_state() -> None:
    controller = Controller(None, Settings(snapshot_namespace="tg-sys"), Metrics(), "me")  # type: ignore[arg-type]
    answer = controller.probe()
    assert not answer.ready and "caches not synced" in answer.detail
    for inf in controller._required:
        inf.synced.set()
    answer = controller.probe()
    assert not answer.ready and 'snapshot namespace "tg-sys" does not exist' in answer.detail
    controller.namespaces._store[("", "tg-sys")] = {"metadata": {"name": "tg-sys"}}
    assert controller.probe().ready
    controller.trainjobs.synced.clear()
    controller.trainjobs.not_served = True
    answer = controller.probe()
    assert not answer.ready and "trainjobs.trainer.kubeflow.org" in answer.detail and "v1alpha1" in answer.detail


def test_the_snapshot_namespace_created_late_requeues_the_unfinished_jobs() -> None:
    """The jobs backing off on ControllerMisconfigured are built as soon as the namespace appears, not after their
    (by then long) backoff; another namespace appearing requeues nothing."""
    from trainguard.webhook.kube.informer import CacheEvent

    controller = Controller(None, Settings(snapshot_namespace="tg-sys"), Metrics(), "me")  # type: ignore[arg-type]
    job = {"metadata": {"name": "job", "namespace": "team", "uid": "u1"}, "spec": {}}
    controller.trainjobs._store[("team", "job")] = job
    controller.namespaces._emit(CacheEvent("ADDED", {"metadata": {"name": "other"}}))
    assert len(controller.queue) == 0
    controller.namespaces._emit(CacheEvent("ADDED", {"metadata": {"name": "tg-sys"}}))
    assert len(controller.queue) == 1
