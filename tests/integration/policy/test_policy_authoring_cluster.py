"""Family 3: validation for policy authors at ``kubectl apply``: TrainJobPolicy (own sanity, conflicts between
overlapping policies), DatasetCache objects, and a TrainJob's ``trainguard.io/dataset-cache`` reference.
403 (webhook) and 422 (CRD schema/CEL) are told apart."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import pytest

from policy_cluster import (
    CACHE_VALIDATOR,
    POLICY_VALIDATOR,
    TRAINJOB_VALIDATOR,
    Admitted,
    Denied,
    Invalid,
    Kube,
    Outcome,
    check,
    dataset_cache,
    policy,
    runtime,
    trainjob,
    unique,
)

HOST, CLIQUE = "kubernetes.io/hostname", "nvidia.com/gpu.clique"


def levels(*pairs: tuple[str, int]) -> list[dict[str, Any]]:
    return [{"nodeLabel": label, "gpusPerDomain": n} for label, n in pairs]


@dataclass(frozen=True)
class PolicyCase:
    id: str
    spec: dict[str, Any]
    expected: Outcome


def denied(*parts: str) -> Denied:
    return Denied(POLICY_VALIDATOR, parts)


POLICY_CASES = [
    PolicyCase("valid", {"mode": "Audit", "topology": {"levels": levels((HOST, 8), (CLIQUE, 72))},
                         "limits": {"maxNodes": 16, "maxGpusPerNode": 8, "maxTotalGpus": 72}}, Admitted()),
    PolicyCase("max-gpus-per-node-zero", {"limits": {"maxGpusPerNode": 0}}, denied(
        "spec.limits.maxGpusPerNode: Invalid value: 0: must be at least 1: 0 refuses every job that uses the resource")),
    PolicyCase("max-total-gpus-zero", {"limits": {"maxTotalGpus": 0}}, denied("spec.limits.maxTotalGpus: Invalid value: 0")),
    PolicyCase("per-node-above-total", {"limits": {"maxGpusPerNode": 16, "maxTotalGpus": 8}}, denied(
        "spec.limits.maxGpusPerNode: Invalid value: 16: cannot exceed maxTotalGpus 8: one node would break the total")),
    PolicyCase("empty-image-prefix", {"limits": {"allowedImagePrefixes": [""]}}, denied(
        'spec.limits.allowedImagePrefixes[0]: Invalid value: "": must not be empty')),
    PolicyCase("bad-resource-name", {"limits": {"requiredResourceRequests": ["not a resource"]}}, denied(
        'spec.limits.requiredResourceRequests[0]: Invalid value: "not a resource": must be a resource name')),
    PolicyCase("levels-equal-size", {"topology": {"levels": levels((HOST, 8), (CLIQUE, 8))}}, denied(
        "spec.topology.levels[1].gpusPerDomain: Invalid value: 8: levels go from narrowest to widest, so must be more "
        "than the 8 GPUs of levels[0] (kubernetes.io/hostname)")),
    PolicyCase("level-label-not-a-label-key", {"topology": {"levels": levels(("bad label!", 8))}}, denied(
        'spec.topology.levels[0].nodeLabel: Invalid value: "bad label!": must be a valid label key')),
    PolicyCase("unknown-topology-label-warns", {"topology": {"levels": levels(("acme.io/rack", 32))}}, Admitted((
        'spec.topology.levels[0].nodeLabel: "acme.io/rack" is not a well-known topology label',))),
    PolicyCase("kai-without-kai-topology-warns", {"topology": {"target": "KAI", "levels": levels((HOST, 8))}}, Admitted((
        "spec.topology.kaiTopology: not set, so the kai.scheduler/topology annotation is not written",))),
    PolicyCase("limit-beyond-widest-level-warns",
               {"topology": {"levels": levels((HOST, 8), (CLIQUE, 72))}, "limits": {"maxTotalGpus": 128}}, Admitted((
                   "spec.limits.maxTotalGpus: 128 is more than the 72 GPUs of the widest topology level "
                   "nvidia.com/gpu.clique; such jobs pass the limit but fit no level",))),
    # 422: what the CRD schema / CEL already refuses never reaches the webhook.
    PolicyCase("max-nodes-zero-schema", {"limits": {"maxNodes": 0}}, Invalid((
        "spec.limits.maxNodes: Invalid value: 0: spec.limits.maxNodes in body should be greater than or equal to 1",))),
    PolicyCase("levels-unsorted-cel", {"topology": {"levels": levels((CLIQUE, 72), (HOST, 8))}}, Invalid((
        "levels must be ordered from the narrowest domain (fewest GPUs) to the widest",))),
    PolicyCase("unknown-mode-schema", {"mode": "Strict"}, Invalid(('spec.mode: Unsupported value: "Strict"',))),
]


@pytest.mark.parametrize("case", POLICY_CASES, ids=lambda c: c.id)
def test_policy_object(kube: Kube, namespace: str, case: PolicyCase) -> None:
    name = unique("pol")
    proc = kube.apply(policy(name, namespace, case.spec))
    check(proc, case.expected)
    exists = kube.cluster.kubectl("get", "trainjobpolicy", name, check=False).returncode == 0
    assert exists is isinstance(case.expected, Admitted)


@pytest.mark.parametrize("second,expected", [
    ({"scheduling": {"kueue": {"queueName": "team-b"}}}, "conflict"),
    ({"scheduling": {"kueue": {"queueName": "team-b"}}, "priority": 10}, "ok"),  # priorities decide
    ({"scheduling": {"kueue": {"queueName": "team-a"}}}, "ok"),                  # equal values agree
    ({"scheduling": {"kueue": {"priorityClass": "high"}}}, "ok"),                # different settings
], ids=["same-priority-different-queue", "higher-priority", "same-value", "other-setting"])
def test_overlapping_policies(kube: Kube, namespace: str, second: dict[str, Any], expected: str) -> None:
    first = unique("pol-a")
    check(kube.apply(policy(first, namespace, {"scheduling": {"kueue": {"queueName": "team-a"}}})), Admitted())
    rt = unique("rt")
    kube.create(runtime(rt, namespace))
    kube.wait_policy(trainjob(unique("probe"), namespace, rt), first)  # the first policy is in the webhook's cache
    name = unique("pol-b")
    proc = kube.apply(policy(name, namespace, second))
    if expected == "conflict":
        check(proc, Denied(POLICY_VALIDATOR, (
            f'spec.scheduling.kueue.queueName: Invalid value: "team-b": conflicts with TrainJobPolicy "{first}" '
            "('team-a') which can match the same TrainJobs at the same priority 0; make the values agree, narrow a "
            "selector, or give one policy a higher spec.priority",)))
    else:
        check(proc, Admitted())


# --- DatasetCache -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name,spec,expected", [
    ("cache-ok", {}, Admitted()),
    ("my.cache", {}, Denied(CACHE_VALIDATOR, (
        'metadata.name: Invalid value: "my.cache": must be a DNS-1123 label (lowercase letters, digits, \'-\', at most '
        "63 characters)",))),
    ("cache-two-sources", {"source": {"hostPath": {"path": "/d"}, "persistentVolumeClaim": {"claimName": "c"},
                                      "shards": "*.bin"}},
     Invalid(("exactly one of hostPath or persistentVolumeClaim must be set",))),
    ("cache-zero-budget", {"memoryBudget": "0"}, Invalid(("memoryBudget must be greater than zero",))),
    ("cache-relative-hostpath", {"source": {"hostPath": {"path": "data"}, "shards": "*.bin"}},
     Invalid(("path must be absolute",))),
], ids=["valid", "dotted-name-webhook", "two-sources-cel", "zero-budget-cel", "relative-path-cel"])
def test_dataset_cache_object(kube: Kube, namespace: str, name: str, spec: dict[str, Any], expected: Outcome) -> None:
    check(kube.apply(dataset_cache(name, namespace, **spec)), expected)


def test_trainjob_dataset_cache_reference(kube: Kube, namespace: str) -> None:
    rt = unique("rt")
    kube.create(runtime(rt, namespace))
    ref = {"trainguard.io/dataset-cache": "shards"}
    missing = kube.apply(trainjob(unique("tj"), namespace, rt, annotations=ref), wait_cache=False)
    # The runtime may not be cached yet: wait for that, never for the cache.
    deadline = time.monotonic() + 15
    while "must be created before" in missing.stderr and time.monotonic() < deadline:
        time.sleep(0.2)
        missing = kube.apply(trainjob(unique("tj"), namespace, rt, annotations=ref), wait_cache=False)
    check(missing, Denied(TRAINJOB_VALIDATOR, (
        'metadata.annotations[trainguard.io/dataset-cache]: Invalid value: "shards": no DatasetCache "shards" in '
        f'namespace "{namespace}"; create it first or name one of: (none exist in this namespace)',)))

    check(kube.apply(dataset_cache("other", namespace)), Admitted())
    kube.wait_cached(lambda: "name one of: other" in kube.apply(
        trainjob(unique("tj"), namespace, rt, annotations=ref), dry_run=True, wait_cache=False).stderr,
        "DatasetCache other")
    check(kube.apply(dataset_cache("shards", namespace)), Admitted())
    proc = kube.apply(trainjob(name := unique("tj"), namespace, rt, annotations=ref))  # retries until cached
    check(proc, Admitted())
    assert json.loads(proc.stdout)["metadata"]["annotations"]["trainguard.io/dataset-cache"] == "shards"
    assert kube.get("trainjob", name)["metadata"]["name"] == name
