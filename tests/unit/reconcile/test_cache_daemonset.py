"""DatasetCache -> DaemonSet/RBAC, and the status computed from agent pods (table-driven)."""

from __future__ import annotations

import copy
from datetime import datetime, timezone
from typing import Any

import pytest

from trainguard.controller.reconcile.cache_daemonset import (
    AGENT_UID,
    ANNOTATION_BYTES_RESIDENT,
    ANNOTATION_SHARDS,
    GPU_TOLERATION,
    DatasetCacheSpecError,
    SourceNotAllowed,
    agent_name,
    build_agent_rbac,
    build_daemonset,
    compute_status,
    selector_labels,
)
from trainguard.webhook.api.trainguard import DatasetCache
from trainguard.webhook.policy.dataset_cache import DatasetCacheSources
from trainguard.webhook.policy.dataset_cache_agents import DatasetCacheAgents

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=timezone.utc)
# The admin's setting these caches are built under: hostPaths below /mnt/datasets, PVCs allowed.
ALLOWED = DatasetCacheSources.of(["/mnt/datasets"])
# ... and an admin who lets caches use this priority class, taint key and node labels (the defaults allow none).
AGENTS = DatasetCacheAgents.of(priority_classes=["system-node-critical"], toleration_keys=["dedicated"],
                               node_selector_keys=["a", "nvidia.com/gpu.product"])


def cache(**spec: Any) -> dict:
    base: dict[str, Any] = {
        "apiVersion": "trainguard.io/v1alpha1",
        "kind": "DatasetCache",
        "metadata": {"name": "imagenet", "namespace": "team-a", "uid": "uid-1", "generation": 3},
        "spec": {"source": {"hostPath": {"path": "/mnt/datasets/imagenet"}, "shards": "train-*.tar"},
                 "memoryBudget": "8Gi"},
    }
    base["spec"].update(spec)
    return base


def agent_container(ds: dict) -> dict:
    return ds["spec"]["template"]["spec"]["containers"][0]


def pod_spec(ds: dict) -> dict:
    return ds["spec"]["template"]["spec"]


def test_hostpath_cache_builds_a_locked_down_agent() -> None:
    ds = build_daemonset(cache(), image="ghcr.io/acme/trainguard:1.0", sources=ALLOWED)
    assert ds["metadata"]["name"] == "trainguard-cache-imagenet" and ds["metadata"]["namespace"] == "team-a"
    assert ds["metadata"]["ownerReferences"] == [{
        "apiVersion": "trainguard.io/v1alpha1", "kind": "DatasetCache", "name": "imagenet", "uid": "uid-1",
        "controller": True, "blockOwnerDeletion": True,
    }]
    assert ds["spec"]["selector"]["matchLabels"] == ds["spec"]["template"]["metadata"]["labels"]
    container = agent_container(ds)
    sc = container["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] == AGENT_UID and sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"] == {"drop": ["ALL"]}
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["data"]["readOnly"] is True and not mounts["socket"].get("readOnly")
    assert mounts["data"]["recursiveReadOnly"] == "IfPossible"  # submounts below the data root stay read-only
    volumes = {v["name"]: v for v in pod_spec(ds)["volumes"]}
    assert volumes["data"]["hostPath"] == {"path": "/mnt/datasets/imagenet", "type": "Directory"}
    assert volumes["socket"]["hostPath"]["path"] == "/var/run/trainguard/cache/team-a/imagenet"
    budget = 8 * 2**30
    assert container["resources"] == {  # the default AgentResources: 100m / 1 CPU, the budget + 128Mi of memory
        "requests": {"cpu": "100m", "memory": str(budget + 128 * 2**20)},
        "limits": {"cpu": "1", "memory": str(budget + 128 * 2**20)},
    }
    assert f"--memory-budget={budget}" in container["args"] and "--glob=train-*.tar" in container["args"]
    assert "--root=/data" in container["args"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert pod_spec(ds)["tolerations"] == [GPU_TOLERATION]
    assert "nodeSelector" not in pod_spec(ds) and "priorityClassName" not in pod_spec(ds)
    init = pod_spec(ds)["initContainers"][0]
    assert init["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN"]}


def test_pvc_source_mounts_read_only_with_sub_path_as_root() -> None:
    ds = build_daemonset(
        cache(source={"persistentVolumeClaim": {"claimName": "datasets", "path": "imagenet/v2"}, "shards": "*.bin"}),
        image="img", sources=ALLOWED,
    )
    volumes = {v["name"]: v for v in pod_spec(ds)["volumes"]}
    assert volumes["data"]["persistentVolumeClaim"] == {"claimName": "datasets", "readOnly": True}
    assert "--root=/data/imagenet/v2" in agent_container(ds)["args"]


@pytest.mark.parametrize(
    "spec, key, expected",
    [
        ({"nodeSelector": {"nvidia.com/gpu.product": "H100"}}, "nodeSelector", {"nvidia.com/gpu.product": "H100"}),
        ({"priorityClassName": "system-node-critical"}, "priorityClassName", "system-node-critical"),
        (
            {"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"},
                             GPU_TOLERATION]},
            "tolerations",
            [GPU_TOLERATION, {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}],
        ),
    ],
)
def test_optional_scheduling_fields(spec: dict, key: str, expected: Any) -> None:
    assert pod_spec(build_daemonset(cache(**spec), image="img", sources=ALLOWED, agents=AGENTS))[key] == expected


def test_model_and_dict_build_the_same() -> None:
    wire = cache(nodeSelector={"a": "b"})
    model = DatasetCache.parse(wire)
    assert build_daemonset(model, image="img", sources=ALLOWED, agents=AGENTS) \
        == build_daemonset(wire, image="img", sources=ALLOWED, agents=AGENTS)


def test_build_is_deterministic_and_does_not_touch_its_input() -> None:
    wire = cache()
    before = copy.deepcopy(wire)
    assert build_daemonset(wire, image="img", sources=ALLOWED) == build_daemonset(wire, image="img", sources=ALLOWED)
    assert wire == before


def test_report_to_pod_off_drops_the_token() -> None:
    ds = build_daemonset(cache(), image="img", sources=ALLOWED, report_to_pod=False)
    assert pod_spec(ds)["automountServiceAccountToken"] is False
    assert "--report-to-pod" not in agent_container(ds)["args"]


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda c: c["spec"].update(memoryBudget="lots"), "memoryBudget"),
        (lambda c: c["spec"].update(memoryBudget="0"), "greater than zero"),
        (lambda c: c["spec"]["source"].update(persistentVolumeClaim={"claimName": "x"}), "exactly one"),
        (lambda c: c["spec"]["source"].pop("hostPath"), "exactly one"),
        (lambda c: c["spec"]["source"].update(hostPath={"path": "relative"}), "absolute"),
        (lambda c: c["spec"]["source"].update(hostPath={"path": "/mnt/datasets/../../etc"}), r"'\.\.'"),
        (lambda c: c["spec"]["source"].update(shards="../*"), "relative glob"),
        (lambda c: c["spec"].update(source={"persistentVolumeClaim": {"claimName": "d", "path": "a/../../b"},
                                            "shards": "*"}), r"persistentVolumeClaim\.path: 'a/\.\./\.\./b'"),
        (lambda c: c["metadata"].pop("namespace"), "namespace"),
        (lambda c: c["spec"].pop("memoryBudget"), "DatasetCache"),
    ],
)
def test_unbuildable_caches_are_refused(mutate: Any, message: str) -> None:
    wire = cache()
    mutate(wire)
    with pytest.raises(DatasetCacheSpecError, match=message):
        build_daemonset(wire, image="img", sources=ALLOWED)


@pytest.mark.parametrize("source, message", [
    ({"hostPath": {"path": "/mnt/datasets/../../etc"}, "shards": "*"}, r"hostPath\.path: .*'\.\.'"),
    ({"persistentVolumeClaim": {"claimName": "d", "path": "../x"}, "shards": "*"}, r"persistentVolumeClaim\.path"),
], ids=["host-dotdot", "pvc-dotdot"])
def test_every_builder_refuses_an_unbuildable_cache(source: dict, message: str) -> None:
    """The RBAC and the status are built from the same checked view as the DaemonSet (no admin setting involved)."""
    for build in (build_agent_rbac, lambda c: compute_status(c, None, [], now=NOW)):
        with pytest.raises(DatasetCacheSpecError, match=message):
            build(cache(source=source))


def test_the_daemonset_shares_no_dict_with_the_cache() -> None:
    """The caller may edit the DaemonSet (apply, tests); the cache it came from stays as read."""
    wire = cache(nodeSelector={"a": "b"}, tolerations=[{"key": "dedicated", "operator": "Exists"}])
    before = copy.deepcopy(wire)
    ds = build_daemonset(wire, image="img", sources=ALLOWED, agents=AGENTS)
    for toleration in pod_spec(ds)["tolerations"]:
        toleration["effect"] = "NoExecute"
    pod_spec(ds)["nodeSelector"]["a"] = "changed"
    assert wire == before
    assert GPU_TOLERATION == {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}  # nor the module


# --- the data volume under the admin's source setting (issue 10) ---------------------------------------------------


@pytest.mark.parametrize("source, sources, message", [
    ({"hostPath": {"path": "/"}}, ALLOWED, "spec.source.hostPath.path: Invalid value: \"/\""),
    ({"hostPath": {"path": "/mnt/datasets-evil"}}, ALLOWED, "/mnt/datasets"),
    ({"hostPath": {"path": "/mnt/datasets/imagenet"}}, DatasetCacheSources(), "no hostPath roots"),
    ({"persistentVolumeClaim": {"claimName": "data"}}, DatasetCacheSources.of(["/mnt"], False),
     "spec.source.persistentVolumeClaim: Forbidden"),
], ids=["root", "sibling-prefix", "nothing-configured", "pvc-refused"])
def test_a_source_the_admin_does_not_allow_is_never_built(source: dict, sources: DatasetCacheSources,
                                                          message: str) -> None:
    with pytest.raises(SourceNotAllowed) as refused:
        build_daemonset(cache(source={**source, "shards": "*"}), image="img", sources=sources)
    assert message in str(refused.value)


def test_the_mounted_host_path_is_the_cleaned_one_the_check_compared() -> None:
    ds = build_daemonset(cache(source={"hostPath": {"path": "//mnt/./datasets//imagenet/"}, "shards": "*"}),
                         image="img", sources=ALLOWED)
    volumes = {v["name"]: v for v in pod_spec(ds)["volumes"]}
    assert volumes["data"]["hostPath"] == {"path": "/mnt/datasets/imagenet", "type": "Directory"}


def test_long_names_stay_valid_label_values() -> None:
    name = "x" * 60
    assert len(agent_name(name)) <= 63 and agent_name(name) != agent_name("x" * 61)
    assert all(len(v) <= 63 for v in selector_labels("y" * 70).values())


def test_rbac_lets_agents_patch_pods_only() -> None:
    sa, role, binding = build_agent_rbac(cache())
    assert sa["kind"] == "ServiceAccount" and sa["metadata"]["name"] == agent_name("imagenet")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"]}]  # never reads
    assert binding["subjects"][0]["name"] == sa["metadata"]["name"]
    assert all(o["metadata"]["ownerReferences"][0]["uid"] == "uid-1" for o in (sa, role, binding))


# -- status ---------------------------------------------------------------------------------------------------
def agent_pod(ready: bool, resident: Any = None, shards: Any = None, cache_name: str = "imagenet") -> dict:
    annotations = {}
    if resident is not None:
        annotations[ANNOTATION_BYTES_RESIDENT] = str(resident)
    if shards is not None:
        annotations[ANNOTATION_SHARDS] = str(shards)
    return {
        "metadata": {"labels": selector_labels(cache_name), "annotations": annotations},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def daemonset(desired: int) -> dict:
    return {"status": {"desiredNumberScheduled": desired}}


@pytest.mark.parametrize(
    "ds, pods, expected",
    [
        (None, [], {"nodesDesired": 0, "nodesReady": 0, "bytesResident": 0, "reason": "DaemonSetMissing"}),
        (daemonset(0), [], {"nodesDesired": 0, "nodesReady": 0, "bytesResident": 0, "reason": "NoNodesSelected"}),
        (
            daemonset(3),
            [agent_pod(True, 100, 4), agent_pod(True, 50, 5), agent_pod(False, 999)],
            {"nodesDesired": 3, "nodesReady": 2, "bytesResident": 150, "reason": "Warming", "shards": 5},
        ),
        (
            daemonset(2),
            [agent_pod(True, 100), agent_pod(True, 100), agent_pod(True, 7, cache_name="other")],
            {"nodesDesired": 2, "nodesReady": 2, "bytesResident": 200, "reason": "Warm"},
        ),
        (
            daemonset(1),
            [agent_pod(True, "garbage")],
            {"nodesDesired": 1, "nodesReady": 1, "bytesResident": 0, "reason": "Warm"},
        ),
    ],
    ids=["no-daemonset", "no-nodes", "warming", "warm-ignores-other-caches", "unreported"],
)
def test_status(ds: dict | None, pods: list, expected: dict) -> None:
    status = compute_status(cache(), ds, pods, now=NOW)
    (cond,) = status["conditions"]
    assert {k: status[k] for k in ("nodesDesired", "nodesReady", "bytesResident")} == {
        k: expected[k] for k in ("nodesDesired", "nodesReady", "bytesResident")
    }
    assert cond["reason"] == expected["reason"] and cond["status"] == ("True" if expected["reason"] == "Warm" else "False")
    assert status.get("shards") == expected.get("shards")
    assert status["observedGeneration"] == 3
    if expected["bytesResident"] == 0 and pods:
        assert "not reported" in cond["message"]


def test_status_keeps_transition_time_until_the_condition_flips() -> None:
    first = compute_status(cache(), daemonset(1), [agent_pod(False)], now=NOW)
    later = datetime(2026, 3, 1, 13, 0, 0, tzinfo=timezone.utc)
    same = compute_status(cache(), daemonset(1), [agent_pod(False)], now=later, previous=first)
    assert same["conditions"][0]["lastTransitionTime"] == "2026-03-01T12:00:00Z"
    flipped = compute_status(cache(), daemonset(1), [agent_pod(True, 1)], now=later, previous=first)
    assert flipped["conditions"][0]["lastTransitionTime"] == "2026-03-01T13:00:00Z"


def test_status_validates_against_the_api_model() -> None:
    status = compute_status(cache(), daemonset(2), [agent_pod(True, 10, 3)], now=NOW)
    wire = cache()
    wire["status"] = status
    assert DatasetCache.parse(wire).status.nodes_ready == 1
