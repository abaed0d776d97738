"""Model behaviour beyond round trips: helpers, defaults, list keys and embedded types."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from trainguard.webhook.api.core import PodSpec
from trainguard.webhook.api.meta import LabelSelector, label_selector_matches
from trainguard.webhook.api.trainer import RuntimeRef, TrainJob
from trainguard.webhook.api.trainguard import DatasetCache, TrainJobPolicy


def test_runtime_ref_defaults_are_not_materialised():
    ref = RuntimeRef.parse({"name": "torch-distributed"})
    assert ref.dump() == {"name": "torch-distributed"}
    assert ref.kind is None and ref.api_group is None


def test_required_fields_give_clear_errors():
    with pytest.raises(ValidationError, match="runtimeRef"):
        TrainJob.parse({"spec": {}})
    with pytest.raises(ValidationError, match="name"):
        RuntimeRef.parse({})


def test_list_items_keep_their_keys_and_unknown_fields():
    spec = PodSpec.parse({
        "containers": [{
            "name": "node", "image": "x",
            "env": [{"name": "A", "value": "1"}, {"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}],
            "ports": [{"containerPort": 29500, "protocol": "TCP", "futurePortField": 1}],
            "volumeMounts": [{"name": "initializer", "mountPath": "/workspace", "recursiveReadOnly": "Disabled"}],
            "stopSignal": "SIGTERM",
        }],
        "volumes": [{"name": "initializer", "persistentVolumeClaim": {"claimName": "pvc"}},
                    {"name": "img", "image": {"reference": "r"}}],
        "hostnameOverride": "h",
    })
    node = (spec.containers or [])[0]
    assert node.name == "node"
    assert [e.name for e in node.env or []] == ["A", "B"]
    assert (node.ports or [])[0].container_port == 29500
    assert (node.volume_mounts or [])[0].mount_path == "/workspace"
    assert [v.name for v in spec.volumes or []] == ["initializer", "img"]
    assert spec.unknown_fields() == {"hostnameOverride": "h"}
    assert node.unknown_fields() == {"stopSignal": "SIGTERM"}


def test_label_selector_semantics():
    sel = LabelSelector.parse({"matchLabels": {"team": "a"},
                               "matchExpressions": [{"key": "tier", "operator": "In", "values": ["gpu"]},
                                                    {"key": "x", "operator": "DoesNotExist"}]})
    assert label_selector_matches(sel, {"team": "a", "tier": "gpu"})
    assert not label_selector_matches(sel, {"team": "a", "tier": "cpu"})
    assert not label_selector_matches(sel, {"team": "a", "tier": "gpu", "x": "1"})
    assert label_selector_matches(None, {})
    assert label_selector_matches(LabelSelector.parse({}), {"any": "thing"})


def test_trainguard_models_parse():
    policy = TrainJobPolicy.parse({
        "apiVersion": "trainguard.io/v1alpha1", "kind": "TrainJobPolicy", "metadata": {"name": "p"},
        "spec": {"mode": "Audit", "topology": {"levels": [{"nodeLabel": "kubernetes.io/hostname",
                                                            "gpusPerDomain": 8}]}},
    })
    assert policy.spec.mode == "Audit"
    assert policy.spec.topology is not None and policy.spec.topology.levels[0].gpus_per_domain == 8
    cache = DatasetCache.parse({"spec": {"source": {"hostPath": {"path": "/data"}, "shards": "*.arrow"},
                                         "memoryBudget": "64Gi"}})
    assert cache.spec.memory_budget == "64Gi"
    assert cache.spec.hold_trainers_until_warm is None  # opt-in: absent means do not hold the trainer pods
    held = DatasetCache.parse({"spec": {"source": {"hostPath": {"path": "/data"}, "shards": "*.arrow"},
                                        "memoryBudget": "64Gi", "holdTrainersUntilWarm": True}})
    assert held.spec.hold_trainers_until_warm is True
    assert held.dump()["spec"]["holdTrainersUntilWarm"] is True
    with pytest.raises(ValidationError):
        TrainJobPolicy.parse({"spec": {"mode": "Sometimes"}})
