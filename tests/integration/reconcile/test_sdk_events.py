"""The Kubeflow SDK 0.5 sees trainguard's events: ``TrainerClient.get_job_events()`` reads core/v1 Events and keeps
only those with ``firstTimestamp``; trainguard's controller writes both ``eventTime`` and the legacy fields.

The control case is an event as every other component around a TrainJob writes it (events.k8s.io/v1, ``eventTime``
only, which that API requires): the SDK drops it, which is why trainguard's own events must carry more.
"""

from __future__ import annotations

import secrets
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
from kubernetes import client

from reconcile_harness import Api, ControllerProcess, wait_for

ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"


@pytest.fixture
def trainer_client(cluster, namespace: str):
    from kubeflow.common.types import KubernetesBackendConfig
    from kubeflow.trainer import TrainerClient
    from kubernetes import config

    configuration = client.Configuration()
    config.load_kube_config(config_file=cluster.kubeconfig, client_configuration=configuration)
    return TrainerClient(KubernetesBackendConfig(namespace=namespace, client_configuration=configuration))


def _runtime() -> dict:
    node = {"name": "node", "image": "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"}
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
        # The SDK refuses a runtime without its framework label.
        "metadata": {"name": "torch-distributed", "labels": {"trainer.kubeflow.org/framework": "torch"}},
        "spec": {
            "mlPolicy": {"numNodes": 1, "torch": {}},
            "template": {"spec": {"replicatedJobs": [{
                "name": "node",
                "template": {"metadata": {"labels": {ANCESTOR: "trainer"}},
                             "spec": {"template": {"spec": {"containers": [node]}}}},
            }]}},
        },
    }


def _eventtime_only_event(api: Api, trainjob: dict) -> None:
    """What JobSet's controller and the scheduler write: events.k8s.io/v1, eventTime and no legacy fields."""
    meta = trainjob["metadata"]
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    client.EventsV1Api(api.core.api_client).create_namespaced_event(api.ns, {
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": f"{meta['name']}.{secrets.token_hex(8)}"},
        "eventTime": now, "reportingController": "example.com/other", "reportingInstance": "other-1",
        "action": "Reconciling", "reason": "OtherComponent", "type": "Normal", "note": "written with eventTime only",
        "regarding": {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": meta["name"],
                      "namespace": api.ns, "uid": meta["uid"]},
    })


def test_trainer_client_lists_trainguards_events(cluster, namespace, trainer_client, tmp_path: Path) -> None:
    api = Api(cluster.api_client(), namespace)
    api.create("trainingruntimes", _runtime())
    created = api.create("trainjobs", {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": "sdk-events"},
        "spec": {"runtimeRef": {"name": "torch-distributed", "kind": "TrainingRuntime"}, "trainer": {"numNodes": 1}},
    })
    controller = ControllerProcess(cluster.kubeconfig, namespace, "a", tmp_path).start()
    try:
        wait_for("the JobSet", lambda: api.jobset("sdk-events"))
        wait_for("the Created event", lambda: [e for e in api.events("sdk-events") if e["reason"] == "Created"])
        # Suspending adds a second trainguard event (Suspended), a second later: firstTimestamp, which the SDK
        # sorts on, has whole seconds.
        time.sleep(1.1)
        api.patch("trainjobs", "sdk-events", {"spec": {"suspend": True}})
        wait_for("the Suspended event", lambda: [e for e in api.events("sdk-events") if e["reason"] == "Suspended"])
        _eventtime_only_event(api, created)
        wait_for("the control event", lambda: [e for e in api.events("sdk-events") if e["reason"] == "OtherComponent"])

        events = trainer_client.get_job_events("sdk-events")
        seen = [(e.involved_object_kind, e.involved_object_name, e.reason, e.message) for e in events]
        assert ("TrainJob", "sdk-events", "Created", f"Created JobSet {namespace}/sdk-events") in seen
        assert [s[2] for s in seen if s[2] in ("Created", "Suspended")] == ["Created", "Suspended"]
        assert all(e.event_time is not None for e in events)
        assert "OtherComponent" not in [s[2] for s in seen]

        # The same events read through events.k8s.io/v1: one event, both generations of fields.
        mine = [e for e in client.EventsV1Api(api.core.api_client).list_namespaced_event(namespace).items
                if e.regarding.name == "sdk-events" and e.reason == "Created"]
        assert len(mine) == 1
        assert mine[0].event_time is not None and mine[0].deprecated_first_timestamp is not None
        assert mine[0].deprecated_count == 1 and mine[0].reporting_controller == "trainguard.io/controller"
        assert mine[0].note == f"Created JobSet {namespace}/sdk-events"
    finally:
        controller.kill()
