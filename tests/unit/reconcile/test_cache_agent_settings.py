"""The controller refuses to build what the webhook would deny (issue 22 parts 3 and 4): a priority class,
toleration, node selector or memory budget the admin's ``DatasetCacheAgents`` does not allow gets no agents (status
and event say why, an existing agent DaemonSet is deleted), a glob past its bound is unbuildable; and the agents'
CPU and memory come from the admin's ``AgentResources``."""

from __future__ import annotations

from typing import Any

import pytest

from trainguard.controller.reconcile.cache_daemonset import (
    GPU_TOLERATION,
    AgentResources,
    AgentSettingsNotAllowed,
    DatasetCacheSpecError,
    buildable_cache,
    build_daemonset,
)
from trainguard.controller.reconcile.datasetcache import (
    REASON_AGENT_SETTINGS_NOT_ALLOWED,
    REASON_SOURCE_NOT_ALLOWED,
    DatasetCacheReconciler,
)
from tests.unit.reconcile.test_datasetcache_sources import NOW, FakeKube, Recorder, agent_daemonset, ready
from tests.unit.reconcile.test_gates import Store
from trainguard.webhook.policy.dataset_cache import DatasetCacheSources
from trainguard.webhook.policy.dataset_cache_agents import DatasetCacheAgents

PVC_ALLOWED = DatasetCacheSources()  # PVC sources are allowed by default


def cache(**spec: Any) -> dict:
    return {"apiVersion": "trainguard.io/v1alpha1", "kind": "DatasetCache",
            "metadata": {"name": "imagenet", "namespace": "ns", "uid": "uid-1", "generation": 2,
                         "resourceVersion": "7"},
            "spec": {"source": {"persistentVolumeClaim": {"claimName": "datasets"}, "shards": "*.arrow"},
                     "memoryBudget": "1Gi", **spec}}


def pod_spec(ds: dict) -> dict:
    return ds["spec"]["template"]["spec"]


ATTACKS = [
    ({"priorityClassName": "system-node-critical"}, 'spec.priorityClassName: Unsupported value: "system-node-critical"'),
    ({"tolerations": [{"operator": "Exists"}]}, "spec.tolerations[0]: Forbidden: a toleration without a key"),
    ({"tolerations": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}]},
     'spec.tolerations[0].key: Unsupported value: "node-role.kubernetes.io/control-plane"'),
    ({"nodeSelector": {"node-role.kubernetes.io/control-plane": ""}},
     "spec.nodeSelector[node-role.kubernetes.io/control-plane]: Forbidden"),
    ({"memoryBudget": "1Ti"}, 'spec.memoryBudget: Invalid value: "1Ti": must be at most 64Gi'),
]


@pytest.mark.parametrize("spec, message", ATTACKS)
def test_the_builder_refuses_what_the_admin_does_not_allow(spec: dict, message: str) -> None:
    with pytest.raises(AgentSettingsNotAllowed) as err:
        build_daemonset(cache(**spec), image="img", sources=PVC_ALLOWED)
    assert message in str(err.value)


@pytest.mark.parametrize("spec, message", ATTACKS)
async def test_the_reconciler_builds_nothing_and_status_and_an_event_say_why(spec: dict, message: str) -> None:
    kube, events = FakeKube(), Recorder()
    reconciler = DatasetCacheReconciler(kube, Store([cache(**spec)]), Store([agent_daemonset()]), Store([]),  # type: ignore[arg-type]
                                        events, agent_image="img", now=lambda: NOW, sources=PVC_ALLOWED)
    await reconciler.reconcile("ns", "imagenet")
    assert kube.applied == []  # no ServiceAccount, Role, RoleBinding or DaemonSet
    assert kube.deleted == [("DaemonSet", "ns", "trainguard-cache-imagenet")]  # the one built before goes
    [patch] = kube.status_patches
    assert (patch["status"]["nodesDesired"], patch["status"]["nodesReady"]) == (0, 0)
    condition = ready(patch)
    assert (condition["status"], condition["reason"]) == ("False", REASON_AGENT_SETTINGS_NOT_ALLOWED)
    assert condition["message"].startswith("no cache agents run with these agent settings: ")
    assert message in condition["message"]
    [(kind, reason, note)] = events.events
    assert (kind, reason) == ("Warning", REASON_AGENT_SETTINGS_NOT_ALLOWED) and message in note


async def test_a_refused_source_is_reported_first() -> None:
    kube, events = FakeKube(), Recorder()
    obj = cache(priorityClassName="system-node-critical")
    obj["spec"]["source"] = {"hostPath": {"path": "/"}, "shards": "*"}
    reconciler = DatasetCacheReconciler(kube, Store([obj]), Store([]), Store([]), events,  # type: ignore[arg-type]
                                        agent_image="img", now=lambda: NOW, sources=PVC_ALLOWED)
    await reconciler.reconcile("ns", "imagenet")
    assert ready(kube.status_patches[0])["reason"] == REASON_SOURCE_NOT_ALLOWED and kube.applied == []


async def test_what_the_admin_allows_is_built_with_the_admins_resources() -> None:
    kube, events = FakeKube(), Recorder()
    agents = DatasetCacheAgents.of(priority_classes=["system-node-critical"], toleration_keys=["dedicated"])
    resources = AgentResources(cpu_request="250m", cpu_limit="2", memory_overhead="256Mi")
    obj = cache(priorityClassName="system-node-critical", tolerations=[{"key": "dedicated", "operator": "Exists"}])
    reconciler = DatasetCacheReconciler(kube, Store([obj]), Store([]), Store([]), events,  # type: ignore[arg-type]
                                        agent_image="img", now=lambda: NOW, sources=PVC_ALLOWED, agents=agents,
                                        resources=resources)
    await reconciler.reconcile("ns", "imagenet")
    [daemonset] = [o for o in kube.applied if o["kind"] == "DaemonSet"]
    assert pod_spec(daemonset)["priorityClassName"] == "system-node-critical"
    memory = str(2**30 + 256 * 2**20)  # budget + overhead: page cache is charged to the agent's cgroup
    assert pod_spec(daemonset)["containers"][0]["resources"] == {
        "requests": {"cpu": "250m", "memory": memory}, "limits": {"cpu": "2", "memory": memory}}
    assert all("cpu" in c["resources"]["limits"] for c in pod_spec(daemonset)["initContainers"])


def test_the_required_node_selector_is_added_to_every_agent() -> None:
    agents = DatasetCacheAgents.of(node_selector_keys=["pool"], required_node_selector={"nvidia.com/gpu.present": "true"})
    ds = build_daemonset(cache(nodeSelector={"pool": "a100"}), image="img", sources=PVC_ALLOWED, agents=agents)
    assert pod_spec(ds)["nodeSelector"] == {"pool": "a100", "nvidia.com/gpu.present": "true"}
    ds = build_daemonset(cache(), image="img", sources=PVC_ALLOWED, agents=agents)
    assert pod_spec(ds)["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert pod_spec(ds)["tolerations"] == [GPU_TOLERATION]


@pytest.mark.parametrize("shards, message", [
    ("*a*a*a*a*a*a*a*a*b", "must contain at most 8 '\\*' characters \\(it has 9\\)"),
    ("a" * 257, "spec.source.shards: Too long: may not be more than 256 characters"),
])
def test_a_glob_past_its_bound_is_unbuildable(shards: str, message: str) -> None:
    obj = cache()
    obj["spec"]["source"]["shards"] = shards
    with pytest.raises(DatasetCacheSpecError, match=message):
        buildable_cache(obj)


@pytest.mark.parametrize("kwargs, message", [
    ({"cpu_request": "2", "cpu_limit": "1"}, "exceeds its limit"),
    ({"cpu_limit": "0"}, "must be greater than zero"),
    ({"memory_overhead": "lots"}, "memory overhead 'lots'"),
])
def test_bad_resources_are_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        AgentResources(**kwargs)
