"""What the controller's watch caches keep of ConfigMaps in the watched namespaces: existence and owner, no data.

Users write those ConfigMaps (a ``<job>-runtime-snapshot`` of an older version included): the controller never
reads their data, so its cache holds none of it, however large. Secrets are not cached at all (the controller may not
read them; ``tests/integration/chart`` checks that with ``kubectl auth can-i``).
"""

from __future__ import annotations

import json

import pytest

from trainguard.controller.reconcile.controller import Controller, Settings, configmap_metadata_only
from trainguard.controller.reconcile.metrics import Metrics
from trainguard.webhook.kube.resources import CONFIGMAPS, SECRETS

OWNER = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "job", "uid": "u1",
         "controller": True}


@pytest.mark.parametrize("owners", [[OWNER], []], ids=["owned-by-a-trainjob", "foreign"])
def test_configmap_cache_keeps_no_data(owners) -> None:
    applied = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big"}, "data": {"blob": "x" * 100_000}}
    cm = {"metadata": {"name": "big", "namespace": "ns", "ownerReferences": owners, "managedFields": [{}],
                       "annotations": {"kubectl.kubernetes.io/last-applied-configuration": json.dumps(applied),
                                       "keep": "me"}},
          "data": {"blob": "x" * 100_000}, "binaryData": {"b": "eA=="}}
    trimmed = configmap_metadata_only(cm)
    assert "data" not in trimmed and "binaryData" not in trimmed and "xxxx" not in json.dumps(trimmed)
    assert trimmed["metadata"] == {"name": "big", "namespace": "ns", "ownerReferences": owners,
                                   "annotations": {"keep": "me"}}
    assert "data" in cm and "managedFields" in cm["metadata"]  # input untouched


def test_the_controller_does_not_watch_secrets() -> None:
    controller = Controller(None, Settings(snapshot_namespace="tg-system"), Metrics(), "me")  # type: ignore[arg-type]
    resources = [inf.resource for inf in controller._informers]
    assert SECRETS not in resources
    (snapshots,) = [inf for inf in controller._informers if inf.resource is CONFIGMAPS and inf.namespace == "tg-system"]
    assert snapshots.label_selector == "trainguard.io/runtime-snapshot-of-uid"


def test_podgroup_and_workload_kinds_are_optional_caches() -> None:
    """scheduler-plugins' and Volcano's PodGroup CRDs and Kueue's Workloads are optional: an unserved kind is an
    empty, synced cache that keeps looking (no warning per retry) and does not hold readiness back, while the kinds
    the controller needs still report list/watch failures."""
    from trainguard.webhook.kube.resources import COSCHEDULING_PODGROUPS, TRAINJOBS, VOLCANO_PODGROUPS, WORKLOADS

    controller = Controller(None, Settings(snapshot_namespace="tg-system"), Metrics(), "me")  # type: ignore[arg-type]
    optional = {inf.resource.plural + "." + inf.resource.group for inf in controller._informers if inf.absent_ok}
    assert optional == {r.plural + "." + r.group for r in (COSCHEDULING_PODGROUPS, VOLCANO_PODGROUPS, WORKLOADS)}
    assert not any(inf.absent_ok for inf in controller._informers if inf.resource is TRAINJOBS)
    assert {inf for inf in controller._informers if not inf.absent_ok} == set(controller._required)
    (workloads,) = [inf for inf in controller._informers if inf.resource is WORKLOADS]
    assert workloads.label_selector == "kueue.x-k8s.io/job-uid"


def test_the_enforce_snapshot_is_not_rebuilt_when_a_jobset_changes() -> None:
    """Every reconcile writes a JobSet; were JobSets a field of the Enforce check's snapshot, each reconcile would
    copy every cached JobSet into a new snapshot (quadratic in a burst). The check never reads them."""
    from trainguard.webhook.kube.client import WatchEvent

    controller = Controller(None, Settings(snapshot_namespace="tg-system"), Metrics(), "me")  # type: ignore[arg-type]
    first = controller.policy_view.snapshot()
    for i in range(3):
        controller.jobsets._apply(WatchEvent("ADDED", {"metadata": {"name": f"j{i}", "namespace": "ns",
                                                                    "resourceVersion": str(i + 1)}}))
    assert len(controller.jobsets) == 3
    assert controller.policy_view.snapshot() is first
    controller.policies._apply(WatchEvent("ADDED", {"metadata": {"name": "p", "resourceVersion": "9"}}))
    assert controller.policy_view.snapshot() is not first  # a policy change still reaches the check
