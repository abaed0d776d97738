"""The chart's controller ValidatingAdmissionPolicy (templates/controller-admission-policy.yaml), checked with the
real helm binary and the real apiserver, played with a token of the controller's own ServiceAccount:

- ``helm template`` renders exactly ``controller_admission_policy()`` for the release's names, agent image and
  hostPath roots;
- a stolen controller token, with only the chart's RBAC, can create a privileged DaemonSet, a ServiceAccount and a
  RoleBinding in kube-system, an agent-shaped privileged DaemonSet, a Role granting what the controller holds, a JobSet
  in kube-system, and patch a pod's image, and create the controller's own agent DaemonSet with
  ``system-node-critical``, a keyless ``Exists`` toleration, no resource limits or limits above the admin's, or
  without the admin's required node label (each tried as a server-side dry run: admission runs, nothing is stored); once the chart's policy is
  installed every one is denied with a message naming what is wrong, and the unchanged DaemonSet is admitted;
- what RBAC's escalation prevention stops without the policy (a Role granting ``*``, a RoleBinding to cluster-admin)
  is denied both before and after;
- the real controller, under the same token and policy, still builds a DatasetCache's agent DaemonSet, ServiceAccount,
  Role and RoleBinding and a TrainJob's JobSet in a user namespace, and may remove the warm gate of a pod.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainguard.controller.reconcile.cache_daemonset import AgentResources, agent_name, build_daemonset
from trainguard.controller.reconcile.controller_policy import controller_admission_policy
from trainguard.webhook.policy.dataset_cache import DatasetCacheSources
from trainguard.webhook.policy.dataset_cache_agents import DatasetCacheAgents
from trainguard.webhook.runtime.dataset_cache import WARM_GATE
from tests.conftest import Cluster
from tests.integration.chart.test_chart import TRAINJOB_RUNTIME, kubeconfig_for_token, render
from tests.integration.reconcile.reconcile_harness import ControllerProcess, wait_for

VAP_KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
RBAC_KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
ROOTS = "datasetCache.allowedHostPathRoots={/data,/mnt/datasets}"
# The admin's agent settings as Helm values, as controller flags, and as the setting both stand for.
AGENT_SETS = ("datasetCache.allowedPriorityClasses={agents}", "datasetCache.allowedTolerationKeys={dedicated}",
              "datasetCache.allowedNodeSelectorKeys={kubernetes.io/hostname}", "datasetCache.requiredNodeSelector.pool=gpu")
AGENT_FLAGS = ("--dataset-cache-allowed-priority-classes=agents", "--dataset-cache-allowed-toleration-keys=dedicated",
               "--dataset-cache-allowed-node-selector-keys=kubernetes.io/hostname",
               "--dataset-cache-required-node-selector=pool=gpu")
AGENTS = DatasetCacheAgents.of(priority_classes=["agents"], toleration_keys=["dedicated"],
                               node_selector_keys=["kubernetes.io/hostname"], required_node_selector={"pool": "gpu"})


def controller_policy(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    found = [d for d in docs if d["kind"] in VAP_KINDS and d["metadata"]["name"].endswith("-controller-identity")]
    return sorted(found, key=lambda d: VAP_KINDS.index(d["kind"]))


def agent_image(docs: list[dict[str, Any]]) -> str:
    (deployment,) = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("-controller")]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    return next(a.split("=", 1)[1] for a in args if a.startswith("--cache-agent-image="))


@pytest.mark.parametrize("release, fullname, sets, roots, agents, resources", [
    ("tg", "tg-trainguard", [], [], DatasetCacheAgents(), AgentResources()),
    # cpuLimit=2 is a number in the values: the policy gets its text, as the controller's flag does.
    ("trainguard", "trainguard", ["cacheAgent.image=reg.example/agent:2", ROOTS, *AGENT_SETS,
                                  "cacheAgent.resources.cpuLimit=2", "cacheAgent.resources.memoryOverhead=256Mi",
                                  "datasetCache.maxMemoryBudget=8Gi"],
     ["/data", "/mnt/datasets"], AGENTS, AgentResources(cpu_limit="2", memory_overhead="256Mi")),
])
def test_rendered_policy_equals_the_function(cluster: Cluster, release: str, fullname: str, sets: list[str],
                                             roots: list[str], agents: DatasetCacheAgents,
                                             resources: AgentResources) -> None:
    docs = render(cluster, release, "tg-system", *sets)
    got = controller_policy(docs)
    image = agent_image(docs)
    assert image == ("reg.example/agent:2" if sets else image)
    labels = got[0]["metadata"]["labels"]
    assert labels["app.kubernetes.io/instance"] == release
    assert got == controller_admission_policy(f"{fullname}-controller-identity", namespace="tg-system",
                                              service_account=f"{fullname}-controller", agent_image=image,
                                              allowed_host_path_roots=roots, labels=labels, resources=resources,
                                              agents=replace(agents, max_memory_budget="8Gi") if sets else agents)


def owned_by_cache(name: str) -> list[dict[str, Any]]:
    return [{"apiVersion": "trainguard.io/v1alpha1", "kind": "DatasetCache", "name": name,
             "uid": "00000000-0000-0000-0000-000000000001", "controller": True}]


def agent_meta(namespace: str, cache: str = "fake") -> dict[str, Any]:
    return {"name": agent_name(cache), "namespace": namespace,
            "labels": {"app.kubernetes.io/component": "dataset-cache-agent", "trainguard.io/dataset-cache": cache},
            "ownerReferences": owned_by_cache(cache)}


def root_daemonset(meta: dict[str, Any], image: str) -> dict[str, Any]:
    labels = {"app": "root"}
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": meta, "spec": {
        "selector": {"matchLabels": labels},
        "template": {"metadata": {"labels": labels}, "spec": {
            "hostPID": True, "serviceAccountName": meta["name"],
            "containers": [{"name": "agent", "image": image, "command": ["trainguard"], "args": ["cache-agent"],
                            "securityContext": {"privileged": True},
                            "volumeMounts": [{"name": "host", "mountPath": "/host"}]}],
            "volumes": [{"name": "host", "hostPath": {"path": "/"}}]}}}}


def test_stolen_controller_token_cannot_reach_the_nodes(cluster: Cluster, namespace: str, tmp_path: Path) -> None:
    release = f"cp{namespace[-6:]}"
    docs = render(cluster, release, namespace, ROOTS, *AGENT_SETS)
    rbac = [d for d in docs if d["kind"] in RBAC_KINDS]
    policy = controller_policy(docs)
    image = agent_image(docs)
    users = f"{namespace}-users"
    sa = f"{release}-trainguard-controller"
    cluster.kubectl("create", "namespace", users)
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(rbac))
    token = cluster.kubectl("create", "token", sa, "-n", namespace, "--duration", "1h").stdout.strip()
    stolen = Cluster(kubeconfig_for_token(cluster, token, tmp_path / "controller.kubeconfig"), cluster.bin_dir)
    # A pod of a user's job waiting for the cache (no kubelet here: it stays Pending), and a DaemonSet not the
    # controller's. No kube-controller-manager runs: the namespace's default ServiceAccount is created here.
    cluster.kubectl("create", "serviceaccount", "default", "-n", users)
    cluster.kubectl("create", "-n", users, "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "trainer"},
        "spec": {"schedulingGates": [{"name": WARM_GATE}, {"name": "example.com/other"}],
                 "containers": [{"name": "node", "image": "python:3.12"}]}}))
    other_ds = root_daemonset({"name": "other", "namespace": users}, "busybox")
    other_ds["spec"]["template"]["spec"] = {"containers": [{"name": "c", "image": "busybox"}]}
    cluster.kubectl("create", "-f", "-", input=json.dumps(other_ds))

    role_star = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                 "metadata": {"name": "root", "namespace": "kube-system"},
                 "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]}
    binding_admin = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                     "metadata": {"name": "root", "namespace": "kube-system"},
                     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                     "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": "kube-system"}]}
    # The controller holds every permission of its own ClusterRole, so RBAC lets it bind that one anywhere.
    binding_own = {**binding_admin, "roleRef": {**binding_admin["roleRef"], "name": sa}}
    agent_role_wide = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": agent_meta(users),
                       "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]}]}
    agent_binding_own = {**binding_own, "metadata": agent_meta(users),
                         "subjects": [{"kind": "ServiceAccount", "name": agent_name("fake"), "namespace": users}]}
    jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
              "metadata": {"name": "root", "namespace": "kube-system"},
              "spec": {"replicatedJobs": [{"name": "n", "template": {"spec": {"template": {"spec": {
                  "restartPolicy": "Never", "hostPID": True,
                  "containers": [{"name": "c", "image": "busybox", "securityContext": {"privileged": True}}]}}}}}]}}

    def create(obj: dict[str, Any]) -> tuple[str, ...]:
        return ("create", "--dry-run=server", "-f", "-", json.dumps(obj))

    # What the controller builds for a cache in the users' namespace under the chart's settings, then one thing
    # changed: a stolen token is no way to node-critical, tolerate-everything or unbounded agents either.
    fake_cache = {"apiVersion": "trainguard.io/v1alpha1", "kind": "DatasetCache",
                  "metadata": {"name": "fake", "namespace": users, "uid": "00000000-0000-0000-0000-000000000001"},
                  "spec": {"source": {"hostPath": {"path": "/data/x"}, "shards": "*.arrow"}, "memoryBudget": "1Gi",
                           "priorityClassName": "agents", "tolerations": [{"key": "dedicated", "operator": "Exists"}]}}
    real_ds = build_daemonset(fake_cache, image=image, agents=AGENTS,
                              sources=DatasetCacheSources(allowed_host_path_roots=("/data",)))

    def agent_ds(change: Any) -> dict[str, Any]:
        ds = json.loads(json.dumps(real_ds))
        change(ds["spec"]["template"]["spec"])
        return ds

    # (what, kubectl args (the last one is stdin when it starts with "{"), what the policy's denial says)
    attacks = [
        ("privileged DaemonSet in kube-system",
         create(root_daemonset({"name": "root", "namespace": "kube-system"}, "busybox")), "namespace kube-system"),
        ("agent-shaped privileged hostPID DaemonSet mounting / in a user namespace",
         create(root_daemonset(agent_meta(users), image)), "hostPID"),
        ("ServiceAccount in kube-system",
         create({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "root", "namespace": "kube-system"}}),
         "namespace kube-system"),
        ("RoleBinding of the controller's ClusterRole in kube-system", create(binding_own), "namespace kube-system"),
        ("agent-shaped RoleBinding of the controller's ClusterRole", create(agent_binding_own), "roleRef must be the Role"),
        ("agent-shaped Role granting secrets create", create(agent_role_wide), "may grant only patch on pods"),
        ("privileged JobSet in kube-system", create(jobset), "namespace kube-system"),
        ("a new image for a user's pod",
         ("patch", "pod", "trainer", "-n", users, "--dry-run=server", "--type=json", "-p",
          json.dumps([{"op": "replace", "path": "/spec/containers/0/image", "value": "evil:1"}])),
         f"only remove the {WARM_GATE} scheduling gate"),
        ("another scheduling gate removed",
         ("patch", "pod", "trainer", "-n", users, "--dry-run=server", "--type=json", "-p",
          json.dumps([{"op": "remove", "path": "/spec/schedulingGates/1"}])), "scheduling gate"),
        ("the agent DaemonSet at system-node-critical",
         create(agent_ds(lambda pod: pod.update(priorityClassName="system-node-critical"))),
         "spec.template.spec.priorityClassName system-node-critical is not one the cluster admin allows"),
        ("the agent DaemonSet tolerating every taint",
         create(agent_ds(lambda pod: pod["tolerations"].append({"operator": "Exists"}))),
         "spec.template.spec.tolerations: each must name a taint key the cluster admin allows cache agents "
         "(datasetCache.allowedTolerationKeys): dedicated"),
        ("the agent DaemonSet without resource limits",
         create(agent_ds(lambda pod: pod["containers"][0].pop("resources"))),
         "every container and init container must set resources.limits cpu, at most"),
        ("the agent DaemonSet taking a terabyte of every node",
         create(agent_ds(lambda pod: pod["containers"][0]["resources"].update(
             requests={"memory": "1Ti"}, limits={"cpu": "1", "memory": "1Ti"}))),
         "and memory, at most 64Gi + 128Mi (datasetCache.maxMemoryBudget + cacheAgent.resources.memoryOverhead)"),
        ("the agent DaemonSet with 64 CPUs",
         create(agent_ds(lambda pod: pod["initContainers"][0]["resources"].update(
             limits={"cpu": "64", "memory": "64Mi"}))),
         "resources.limits cpu, at most 1 (cacheAgent.resources.cpuLimit)"),
        ("the agent DaemonSet without the admin's required node label",
         create(agent_ds(lambda pod: pod.update(nodeSelector={"kubernetes.io/hostname": "node-1"}))),
         "must hold every required label (datasetCache.requiredNodeSelector): pool=gpu"),
        ("the agent DaemonSet selecting the control plane",
         create(agent_ds(lambda pod: pod["nodeSelector"].update({"node-role.kubernetes.io/control-plane": ""}))),
         "nodeSelector may use only the label keys the cluster admin allows cache agents "
         "(datasetCache.allowedNodeSelectorKeys): kubernetes.io/hostname"),
        ("delete a DaemonSet not the controller's", ("delete", "daemonset", "other", "-n", users, "--dry-run=server"),
         "metadata.name must start with"),
    ]
    escalations = [("Role granting * in kube-system", create(role_star)),
                   ("RoleBinding to cluster-admin in kube-system", create(binding_admin))]

    def attempt(args: tuple[str, ...]) -> Any:
        *argv, last = args
        if last.startswith("{"):
            return stolen.kubectl(*argv, input=last, check=False)
        return stolen.kubectl(*args, check=False)

    try:
        for what, args, _ in attacks:
            out = attempt(args)
            assert out.returncode == 0, f"without the policy RBAC alone should let this through: {what}\n{out.stderr}"
        for what, args in escalations:
            out = attempt(args)
            assert out.returncode != 0 and "attempting to grant RBAC permissions not currently held" in out.stderr, (
                what, out.stderr)
        for verb, resource in (("bind", "clusterroles"), ("escalate", "clusterroles"), ("bind", "roles"),
                               ("escalate", "roles"), ("impersonate", "serviceaccounts")):
            out = stolen.kubectl("auth", "can-i", verb, resource, "-n", "kube-system", check=False)
            assert out.stdout.strip() == "no", (verb, resource, out.stdout)

        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(policy))
        wait_for("the controller policy to be enforced", lambda: attempt(attacks[0][1]).returncode != 0, timeout=30)
        out = attempt(create(real_ds))
        assert out.returncode == 0, f"the controller's own agent DaemonSet denied:\n{out.stderr}"
        for what, args, says in attacks:
            out = attempt(args)
            assert out.returncode != 0, f"allowed under the policy: {what}"
            assert "ValidatingAdmissionPolicy" in out.stderr and says in out.stderr, (what, out.stderr)
            assert f"trainguard controller system:serviceaccount:{namespace}:{sa}" in out.stderr, out.stderr
        for what, args in escalations:
            assert attempt(args).returncode != 0, what

        # The warm gate, and only it, may go (what gates.py sends).
        out = stolen.kubectl("patch", "pod", "trainer", "-n", users, "--type=json", "-p", json.dumps(
            [{"op": "test", "path": "/spec/schedulingGates/0/name", "value": WARM_GATE},
             {"op": "remove", "path": "/spec/schedulingGates/0"}]), check=False)
        assert out.returncode == 0, out.stderr

        # The real controller under the same token and policy: agents and JobSets in a user namespace.
        runtime = {**TRAINJOB_RUNTIME, "metadata": {"name": "plain", "namespace": users}}
        cluster.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(runtime))
        controller = ControllerProcess(
            stolen.kubeconfig, users, "vap-check", tmp_path, leader_elect=False, snapshot_namespace=namespace,
            extra=[f"--cache-agent-image={image}", "--dataset-cache-allowed-host-path=/data", *AGENT_FLAGS]).start()
        try:
            cluster.kubectl("apply", "--server-side", "-f", "-", input=json.dumps({
                "apiVersion": "trainguard.io/v1alpha1", "kind": "DatasetCache",
                "metadata": {"name": "imagenet", "namespace": users},
                "spec": {"source": {"hostPath": {"path": "/data/imagenet"}, "shards": "*.arrow"},
                         "memoryBudget": "1Gi", "priorityClassName": "agents",
                         "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}],
                         "nodeSelector": {"kubernetes.io/hostname": "node-1"}}}))
            cluster.kubectl("apply", "--server-side", "-f", "-", input=json.dumps({
                "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                "metadata": {"name": "vap-job", "namespace": users},
                "spec": {"runtimeRef": {"name": "plain", "kind": "TrainingRuntime"}}}))
            name = agent_name("imagenet")
            for kind in ("daemonset", "serviceaccount", "role", "rolebinding"):
                wait_for(f"the agent {kind} built under the policy",
                         lambda: cluster.kubectl("get", kind, name, "-n", users, check=False).returncode == 0,
                         timeout=60)
            wait_for("the JobSet built under the policy",
                     lambda: cluster.kubectl("get", "jobset", "vap-job", "-n", users, check=False).returncode == 0,
                     timeout=60)
            log = controller.log_path.read_text()
            assert "ValidatingAdmissionPolicy" not in log, log[-3000:]  # no write of the controller's was denied
        finally:
            controller.terminate()
    finally:
        for doc in reversed(policy + rbac):
            cluster.kubectl("delete", doc["kind"].lower(), doc["metadata"]["name"], "--ignore-not-found",
                            *(["-n", doc["metadata"]["namespace"]] if "namespace" in doc["metadata"] else []),
                            check=False)
        cluster.kubectl("delete", "namespace", users, "--wait=false", check=False)
