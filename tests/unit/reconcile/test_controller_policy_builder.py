"""trainguard.controller.reconcile.controller_policy without a cluster: the policy fails closed, matches only the
controller's own username, protects the system and release namespaces, and what ``cache_daemonset`` builds keeps to
the shapes it allows (a builder change that leaves them fails here, pointing at the policy). Enforcement, and the
chart rendering the same objects, are tested against the real apiserver in
tests/integration/chart/test_controller_policy.py."""

from __future__ import annotations

import json

from trainguard.controller.reconcile.cache_daemonset import (
    COMPONENT,
    PREPARE_LIMITS,
    AgentResources,
    LABEL_CACHE,
    LABEL_COMPONENT,
    build_agent_rbac,
    build_daemonset,
)
from trainguard.controller.reconcile.controller_policy import (
    AGENT_PREFIX,
    AGENT_ROLE_RULE,
    ALLOWED_CAPABILITY,
    SYSTEM_NAMESPACES,
    controller_admission_policy,
)
from trainguard.webhook.policy.dataset_cache import DatasetCacheSources
from trainguard.webhook.policy.dataset_cache_agents import AGENT_GPU_TOLERATION, DatasetCacheAgents
from trainguard.webhook.runtime.dataset_cache import SOCKET_HOST_ROOT

CACHE = {"apiVersion": "trainguard.io/v1alpha1", "kind": "DatasetCache",
         "metadata": {"name": "imagenet", "namespace": "team-a", "uid": "u-1"},
         "spec": {"source": {"hostPath": {"path": "/data/imagenet"}, "shards": "*.arrow"}, "memoryBudget": "1Gi"}}
SOURCES = DatasetCacheSources(allowed_host_path_roots=("/data",))
AGENTS = DatasetCacheAgents.of(priority_classes=["agents"], toleration_keys=["dedicated"],
                               node_selector_keys=["pool"], required_node_selector={"gpu": "true", "arch": "amd64"})


def variables(policy: dict) -> dict[str, str]:
    return {v["name"]: v["expression"] for v in policy["spec"]["variables"]}


def test_fails_closed_denies_and_matches_only_the_controller() -> None:
    policy, binding = controller_admission_policy(namespace="tg-system", service_account="tg-trainguard-controller")
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}
    (condition,) = policy["spec"]["matchConditions"]
    assert condition["expression"] == (
        "request.userInfo.username == 'system:serviceaccount:tg-system:tg-trainguard-controller'")
    ops = {tuple(r["operations"]) for r in policy["spec"]["matchConstraints"]["resourceRules"]}
    assert ops == {("CREATE", "UPDATE", "DELETE")}
    matched = {r for rule in policy["spec"]["matchConstraints"]["resourceRules"] for r in rule["resources"]}
    assert {"daemonsets", "serviceaccounts", "roles", "rolebindings", "pods", "jobsets", "pods/*"} <= matched


def test_protected_namespaces_include_the_release_namespace() -> None:
    (policy, _) = controller_admission_policy(namespace="tg-system")
    assert variables(policy)["protectedNamespaces"] == "[" + ", ".join(
        f"'{n}'" for n in (*SYSTEM_NAMESPACES, "tg-system")) + "]"


def test_settings_are_json_literals() -> None:
    # JSON strings and lists are CEL literals; the chart fills the same slots with toJson.
    (policy, _) = controller_admission_policy(agent_image="reg.example/tg:1", allowed_host_path_roots=["/a", "/b c"])
    assert json.loads(variables(policy)["agentImage"]) == "reg.example/tg:1"
    assert variables(policy)["hostPathRoots"] == '["/a","/b c"]'


def test_agent_settings_are_json_literals_of_the_admins_setting() -> None:
    (policy, _) = controller_admission_policy(agents=AGENTS)
    got = {k: json.loads(variables(policy)[k]) for k in (
        "allowedPriorityClasses", "allowedTolerationKeys", "allowedNodeSelectorKeys", "requiredNodeSelector")}
    assert got == {"allowedPriorityClasses": ["agents"], "allowedTolerationKeys": ["dedicated"],
                   "allowedNodeSelectorKeys": ["pool"], "requiredNodeSelector": {"arch": "amd64", "gpu": "true"}}
    # Helm's toJson writes a map with sorted keys and no spaces: the chart renders the same text.
    assert variables(policy)["requiredNodeSelector"] == '{"arch":"amd64","gpu":"true"}'
    (policy, _) = controller_admission_policy(agents=AGENTS, resources=AgentResources(cpu_limit="2",
                                                                                   memory_overhead="256Mi"))
    assert [json.loads(variables(policy)[k]) for k in ("agentCpuLimit", "maxMemoryBudget", "agentMemoryOverhead")] == [
        "2", DatasetCacheAgents().max_memory_budget, "256Mi"]
    # The socket-dir init container's fixed limits stay allowed when the admin's are smaller.
    for bound, floor in (("maxCpu", PREPARE_LIMITS["cpu"]), ("maxMemory", PREPARE_LIMITS["memory"])):
        assert f"< 0 ? quantity('{floor}')" in variables(policy)[bound]
    # The defaults are the binaries' defaults (no priority class or toleration key; the well-known node labels).
    (default, _) = controller_admission_policy()
    assert json.loads(variables(default)["allowedPriorityClasses"]) == []
    assert json.loads(variables(default)["allowedNodeSelectorKeys"]) == list(
        DatasetCacheAgents().allowed_node_selector_keys)
    assert json.loads(variables(default)["requiredNodeSelector"]) == {}


def test_the_gpu_toleration_check_names_every_field_of_the_agents_toleration() -> None:
    (policy, _) = controller_admission_policy()
    (rule,) = [v["expression"] for v in policy["spec"]["validations"] if "allowedTolerationKeys" in v["expression"]]
    for key, value in AGENT_GPU_TOLERATION.items():
        assert f"t.?{key}.orValue('') == '{value}'" in rule
    assert "!has(t.tolerationSeconds)" in rule and "t.?key.orValue('') != ''" in rule


def test_the_agent_daemonset_keeps_to_the_admins_scheduling_settings() -> None:
    cache = {**CACHE, "spec": {**CACHE["spec"], "priorityClassName": "agents", "nodeSelector": {"pool": "a"},
                               "tolerations": [{"key": "dedicated", "operator": "Exists"}]}}
    for agents, spec in ((DatasetCacheAgents(), CACHE), (AGENTS, cache)):
        pod = build_daemonset(spec, image="reg.example/tg:1", sources=SOURCES, agents=agents)["spec"]["template"]["spec"]
        assert pod.get("priorityClassName", "") in ("", *agents.allowed_priority_classes)
        for t in pod["tolerations"]:
            assert t == AGENT_GPU_TOLERATION or (t.get("key") and t["key"] in agents.allowed_toleration_keys), t
        selector = pod.get("nodeSelector", {})
        required = dict(agents.required_node_selector)
        assert all(k in required or k in agents.allowed_node_selector_keys for k in selector), selector
        assert all(selector.get(k) == v for k, v in required.items()), selector
        limits = {c["name"]: c["resources"]["limits"] for c in pod["containers"] + pod["initContainers"]}
        assert limits["socket-dir"] == PREPARE_LIMITS
        assert limits["agent"] == {"cpu": AgentResources().cpu_limit, "memory": str(
            (1 << 30) + AgentResources().memory_overhead_bytes)}  # 1Gi budget <= the admin's max + overhead


def test_the_agent_role_grants_exactly_what_the_policy_allows() -> None:
    _, role, binding = build_agent_rbac(CACHE)
    assert role["rules"] == [AGENT_ROLE_RULE]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": role["metadata"]["name"],
                                    "namespace": "team-a"}]


def test_the_agent_objects_keep_to_the_policy_shapes() -> None:
    objects = [*build_agent_rbac(CACHE), build_daemonset(CACHE, image="reg.example/tg:1", sources=SOURCES)]
    for obj in objects:
        meta = obj["metadata"]
        assert meta["name"] == AGENT_PREFIX + "imagenet"
        assert meta["labels"][LABEL_COMPONENT] == COMPONENT and meta["labels"][LABEL_CACHE] == "imagenet"
        (owner,) = meta["ownerReferences"]
        assert owner["kind"] == "DatasetCache" and owner["apiVersion"].startswith("trainguard.io/")
        assert owner["controller"] is True and owner["name"] == "imagenet"
    pod = objects[-1]["spec"]["template"]["spec"]
    assert not any(pod.get(k) for k in ("hostNetwork", "hostPID", "hostIPC", "ephemeralContainers"))
    assert pod["serviceAccountName"] == AGENT_PREFIX + "imagenet"
    for c in pod["containers"] + pod["initContainers"]:
        assert c["image"] == "reg.example/tg:1" and c["command"] == ["trainguard"] and c["args"][0] == "cache-agent"
        sc = c["securityContext"]
        assert not sc.get("privileged") and sc["allowPrivilegeEscalation"] is False
        assert "ALL" in sc["capabilities"]["drop"] and set(sc["capabilities"].get("add", [])) <= {ALLOWED_CAPABILITY}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert set(volumes) == {"data", "socket"}
    assert volumes["data"]["hostPath"]["path"] == "/data/imagenet"
    assert volumes["socket"]["hostPath"]["path"].startswith(f"{SOCKET_HOST_ROOT}/team-a/")
    for c in pod["containers"] + pod["initContainers"]:
        for m in c["volumeMounts"]:
            assert m["name"] != "data" or m["readOnly"] is True
