"""What the controller's watch caches keep of Secrets and ConfigMaps: no key material, no foreign data."""

from __future__ import annotations

import json

from controller.reconcile.controller import configmap_for_trainjobs, secret_metadata_only

OWNER = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "job", "uid": "u1",
         "controller": True}


def test_secret_cache_keeps_no_key_material_even_from_kubectl_apply() -> None:
    applied = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {"id_rsa": "c2VjcmV0"}}
    secret = {
        "metadata": {
            "name": "s", "namespace": "ns", "resourceVersion": "3", "managedFields": [{"manager": "kubectl"}],
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": json.dumps(applied), "keep": "me"},
        },
        "data": {"id_rsa": "c2VjcmV0"},
        "stringData": {"x": "y"},
        "type": "Opaque",
    }
    cached = secret_metadata_only(secret)
    assert "c2VjcmV0" not in json.dumps(cached)
    assert cached["metadata"]["annotations"] == {"keep": "me"}
    assert cached["metadata"]["name"] == "s" and cached["metadata"]["resourceVersion"] == "3"
    assert "managedFields" not in cached["metadata"] and cached["type"] == "Opaque"
    assert secret["metadata"]["annotations"]["keep"] == "me" and "data" in secret  # input untouched


def test_configmap_cache_keeps_data_only_for_configmaps_a_trainjob_controls() -> None:
    snapshot = {"metadata": {"name": "job-runtime-snapshot", "namespace": "ns", "ownerReferences": [OWNER]},
                "data": {"runtime.yaml": "kind: ClusterTrainingRuntime"}}
    foreign = {"metadata": {"name": "big", "namespace": "ns"}, "data": {"blob": "x" * 100_000},
               "binaryData": {"b": "eA=="}}
    assert configmap_for_trainjobs(snapshot)["data"] == snapshot["data"]
    trimmed = configmap_for_trainjobs(foreign)
    assert "data" not in trimmed and "binaryData" not in trimmed
    assert trimmed["metadata"] == {"name": "big", "namespace": "ns"}
