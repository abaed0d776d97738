"""validate_trainjob_policy and validate_dataset_cache: one rejected and one accepted case per rule."""

from __future__ import annotations

import pytest

from policy_helpers import GPU_LEVELS, NOW, policy, runtime
from trainguard.webhook.policy.dataset_cache import DatasetCacheSources
from trainguard.webhook.policy.pipeline import validate_dataset_cache, validate_trainjob_policy
from trainguard.webhook.policy.verdict import AdmissionInput, ClusterSnapshot


def check(obj, snapshot=None):
    return validate_trainjob_policy(AdmissionInput("CREATE", obj, None, NOW), snapshot or ClusterSnapshot())


CASES = [
    ("unreadable mode", policy("p", mode="Sometimes"), "spec.mode: Unsupported value: \"Sometimes\": supported values: \"Enforce\", \"Audit\""),
    ("levels not growing", policy("p", topology={"levels": [GPU_LEVELS[1], {"nodeLabel": "x.io/y", "gpusPerDomain": 72}]}),
     "spec.topology.levels[1].gpusPerDomain: Invalid value: 72: levels go from narrowest to widest, so must be more "
     "than the 72 GPUs of levels[0] (nvidia.com/gpu.clique)"),
    ("invalid label key", policy("p", topology={"levels": [{"nodeLabel": "bad key!", "gpusPerDomain": 8}]}),
     'spec.topology.levels[0].nodeLabel: Invalid value: "bad key!": must be a valid label key'),
    ("repeated label", policy("p", topology={"levels": [GPU_LEVELS[0], {**GPU_LEVELS[0], "gpusPerDomain": 16}]}),
     'spec.topology.levels[1].nodeLabel: Duplicate value: "kubernetes.io/hostname"'),
    ("zero GPUs per node", policy("p", limits={"maxGpusPerNode": 0}),
     "spec.limits.maxGpusPerNode: Invalid value: 0: must be at least 1"),
    ("per node above total", policy("p", limits={"maxGpusPerNode": 16, "maxTotalGpus": 8}),
     "spec.limits.maxGpusPerNode: Invalid value: 16: cannot exceed maxTotalGpus 8"),
    ("empty image prefix", policy("p", limits={"allowedImagePrefixes": [""]}),
     'spec.limits.allowedImagePrefixes[0]: Invalid value: "": must not be empty'),
    ("bad resource name", policy("p", limits={"requiredResourceRequests": ["not a resource"]}),
     'spec.limits.requiredResourceRequests[0]: Invalid value: "not a resource": must be a resource name'),
    ("sane policy", policy("p", topology={"levels": GPU_LEVELS}, limits={"maxGpusPerNode": 8, "maxTotalGpus": 1024,
                                                                        "requiredResourceRequests": ["cpu"]}), None),
]


@pytest.mark.parametrize(("case", "obj", "message"), CASES, ids=[c[0] for c in CASES])
def test_policy_rules(case, obj, message):
    v = check(obj)
    assert v.allowed is (message is None), v.message
    if message:
        assert v.message.startswith(message)


@pytest.mark.parametrize(("case", "obj", "warning"), [
    ("unknown topology label", policy("p", topology={"levels": [{"nodeLabel": "acme.io/rack", "gpusPerDomain": 32}]}),
     'spec.topology.levels[0].nodeLabel: "acme.io/rack" is not a well-known topology label'),
    ("limit above the widest level", policy("p", topology={"levels": GPU_LEVELS[:2]}, limits={"maxTotalGpus": 100}),
     "spec.limits.maxTotalGpus: 100 is more than the 72 GPUs of the widest topology level"),
    ("KAI without a topology name", policy("p", topology={"levels": GPU_LEVELS, "target": "KAI"}),
     "spec.topology.kaiTopology: not set"),
])
def test_policy_warnings(case, obj, warning):
    v = check(obj)
    assert v.allowed and v.warnings[0].startswith(warning), (case, v.warnings)


A = {"namespaceSelector": {"matchLabels": {"team": "a"}}}
B = {"namespaceSelector": {"matchLabels": {"team": "b"}}}
NS = {"ns-a": {"team": "a"}, "ns-b": {"team": "b"}}


@pytest.mark.parametrize(("case", "mine", "theirs", "conflict"), [
    ("same priority, overlapping, different queue", policy("p", scheduling={"kueue": {"queueName": "x"}}),
     policy("q", scheduling={"kueue": {"queueName": "y"}}), True),
    ("same value agrees", policy("p", scheduling={"kueue": {"queueName": "x"}}),
     policy("q", scheduling={"kueue": {"queueName": "x"}}), False),
    ("different priority decides", policy("p", priority=1, scheduling={"kueue": {"queueName": "x"}}),
     policy("q", scheduling={"kueue": {"queueName": "y"}}), False),
    ("disjoint namespaces", policy("p", selector=A, scheduling={"kueue": {"queueName": "x"}}),
     policy("q", selector=B, scheduling={"kueue": {"queueName": "y"}}), False),
    ("disjoint runtime names", policy("p", selector={"runtimeSelector": {"names": ["a"]}}, defaults={"activeDeadlineSeconds": 5}),
     policy("q", selector={"runtimeSelector": {"names": ["b"]}}, defaults={"activeDeadlineSeconds": 9}), False),
])
def test_policy_conflicts(case, mine, theirs, conflict):
    snapshot = ClusterSnapshot(policies={"q": theirs}, namespace_labels=NS,
                               cluster_training_runtimes={"r": runtime()})
    v = check(mine, snapshot)
    assert v.allowed is (not conflict), (case, v.message)
    if conflict:
        assert v.message.startswith(
            'spec.scheduling.kueue.queueName: Invalid value: "x": conflicts with TrainJobPolicy "q" (\'y\')')


def test_update_of_itself_is_not_a_conflict():
    p = policy("p", scheduling={"kueue": {"queueName": "x"}})
    assert check(p, ClusterSnapshot(policies={"p": policy("p", scheduling={"kueue": {"queueName": "old"}})})).allowed


@pytest.mark.parametrize(("name", "allowed"), [("imagenet", True), ("ImageNet", False)])
def test_dataset_cache_name(name, allowed):
    obj = {"apiVersion": "trainguard.io/v1alpha1", "kind": "DatasetCache", "metadata": {"name": name, "namespace": "a"},
           "spec": {"source": {"hostPath": {"path": "/data"}, "shards": "*.arrow"}, "memoryBudget": "1Gi"}}
    allowed_data = ClusterSnapshot(dataset_cache_sources=DatasetCacheSources.of(["/data"]))  # the admin's setting
    v = validate_dataset_cache(AdmissionInput("CREATE", obj, None, NOW), allowed_data)
    assert v.allowed is allowed
