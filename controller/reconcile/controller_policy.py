"""The ValidatingAdmissionPolicy that confines the controller's own identity to the objects it really writes.

The controller's ClusterRole must let it create DaemonSets, ServiceAccounts, Roles and RoleBindings (a DatasetCache's
agents, in whatever namespace the cache lives) and patch pods (the dataset cache warm gate), in every namespace:
RBAC cannot say "only namespaces holding a DatasetCache" or "only objects shaped like an agent". On its own that
would make the controller's token root on every node: a privileged, hostPID DaemonSet in kube-system, or a new image
patched into a running privileged pod. This policy, enforced by the apiserver itself (no webhook to take down), holds
every such request by the controller's ServiceAccount (``system:serviceaccount:<release namespace>:<controller>``)
to what ``cache_daemonset`` and ``gates`` build:

* never in kube-system, kube-public, kube-node-lease or the release namespace (no DatasetCache or TrainJob is
  served there);
* DaemonSets, ServiceAccounts, Roles, RoleBindings: named ``trainguard-cache-*``, labelled as a cache's agent
  objects, with exactly one ownerReference, a controlling one to a ``trainguard.io`` DatasetCache whose name the
  object's name and label carry. CEL cannot look the DatasetCache up: the ownerReference is the proxy, so a stolen
  token can still create agent-shaped objects for a cache that does not exist in an ordinary namespace (the
  garbage collector deletes a dependent whose owner is absent), but only agent-shaped ones:
* a DaemonSet's pods: no hostNetwork, hostPID, hostIPC or Windows hostProcess; the agent's own ServiceAccount; every
  container the agent image (``--cache-agent-image``) running ``trainguard cache-agent``, not privileged, no privilege
  escalation, all capabilities dropped and none added but CHOWN (the socket directory's init container); volumes
  only hostPath and persistentVolumeClaim; a hostPath either the cache's socket directory or below a root the admin
  allows (``datasetCache.allowedHostPathRoots``, compared component by component after cleaning, ``..`` refused),
  and the latter mounted read-only;
* a DaemonSet's scheduling and size, as ``dataset_cache_agents`` allows a DatasetCache (the admin's
  ``datasetCache.*`` settings, the ones the webhook and controller flags carry): ``priorityClassName`` empty or one
  of ``allowedPriorityClasses``; every toleration naming a key of ``allowedTolerationKeys`` or exactly the GPU
  toleration every agent gets; ``nodeSelector`` keys in ``allowedNodeSelectorKeys`` and every
  ``requiredNodeSelector`` label present with its value; every container with cpu and memory limits, at most
  ``cacheAgent.resources.cpuLimit`` and ``datasetCache.maxMemoryBudget`` + ``cacheAgent.resources.memoryOverhead``
  (or the socket-dir init container's own, if larger), so no agent is node-critical, runs on every tainted node or
  takes more of a node than the admin allows a cache;
* a Role grants only ``patch`` on pods (what the agents need); a RoleBinding binds only the Role of its own name to
  the ServiceAccount of its own name in its namespace;
* pods: only an UPDATE that removes scheduling gates (``trainguard.io/dataset-cache-warm``, what ``gates`` does):
  containers, init containers, tolerations, node selector, affinity, deadlines, labels, annotations, owners and
  finalizers as they were;
* JobSets: one controlling ownerReference to a TrainJob (their pod templates are the TrainJob's, judged by the
  webhook's and the controller's policies, not here).

Kubernetes' RBAC escalation prevention stops the rest before admission: a Role may grant only what its creator holds
(the controller holds no ``*``), and a RoleBinding may bind a role only if its creator holds every permission in it
(or ``bind`` on it, which the controller has not), so it cannot bind cluster-admin, admin or edit.

The Helm chart ships the objects (``templates/controller-admission-policy.yaml``, generated from
``controller_admission_policy()`` by ``hack/gen_chart.py``; tests render and compare, and play a stolen token).
Requires Kubernetes >= 1.30 (ValidatingAdmissionPolicy GA), as the chart does.
"""

from __future__ import annotations

import json
from typing import Sequence

from trainguard.controller.reconcile.cache_daemonset import (
    COMPONENT, LABEL_CACHE, LABEL_COMPONENT, PREPARE_LIMITS, AgentResources, agent_name,
)
from trainguard.webhook.api.constants import DATASET_CACHE_KIND
from trainguard.webhook.policy.dataset_cache_agents import AGENT_GPU_TOLERATION, DatasetCacheAgents
from trainguard.webhook.runtime.dataset_cache import SOCKET_HOST_ROOT, WARM_GATE

POLICY_NAME = "trainguard-controller-identity"
# Namespaces where the controller writes none of the matched kinds whatever the release namespace is.
SYSTEM_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease")
AGENT_PREFIX = agent_name("")
AGENT_KINDS = ("DaemonSet", "ServiceAccount", "Role", "RoleBinding")
NAME_LIMIT = 63  # agent_name() and the cache label are bounded to 63 (a hash suffix beyond)
AGENT_ROLE_RULE = {"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"]}
ALLOWED_CAPABILITY = "CHOWN"


def _s(text: str) -> str:
    assert "'" not in text and "\\" not in text, text  # constants and DNS names only; nothing to escape
    return f"'{text}'"


def _list(items: Sequence[str]) -> str:
    return "[" + ", ".join(_s(i) for i in items) + "]"


def _json(value: object) -> str:
    """A JSON list or map of strings: a CEL literal, and what the chart's ``toJson`` writes for the same value."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _is_gpu_toleration(t: str) -> str:
    """CEL: toleration ``t`` is exactly ``AGENT_GPU_TOLERATION`` (field by field: a typed toleration is no map)."""
    fields = [f"{t}.?{k}.orValue('') == {_s(v)}" for k, v in sorted(AGENT_GPU_TOLERATION.items())]
    return "(" + " && ".join(fields + [f"{t}.?value.orValue('') == ''", f"!has({t}.tolerationSeconds)"]) + ")"


def _at_least(quantity: str, floor: str) -> str:
    """CEL: the larger of Kubernetes quantity expression ``quantity`` and the constant ``floor``."""
    return f"({quantity}.compareTo(quantity({_s(floor)})) < 0 ? quantity({_s(floor)}) : {quantity})"


def _names(variable: str) -> str:
    return f"({variable}.size() == 0 ? 'none' : {variable}.join(', '))"


def _clean(path: str) -> str:
    """CEL for ``clean_host_path``: ``//`` and ``.`` components dropped, no trailing ``/`` (``..`` is refused apart)."""
    return f"('/' + {path}.split('/').filter(s, s != '' && s != '.').join('/'))"


def _validations() -> list[dict]:
    who = "'trainguard controller ' + request.userInfo.username + ': '"
    what = "request.kind.kind + ' ' + request.namespace + '/' + request.name"
    ds = "variables.kind != 'DaemonSet' || request.operation == 'DELETE' || "
    agent_kind = f"!(variables.kind in {_list(AGENT_KINDS)}) || "
    rule = AGENT_ROLE_RULE

    def v(expression: str, message: str, reason: str = "Forbidden") -> dict:
        return {"expression": expression, "messageExpression": f"{who} + {what} + ': ' + {message}",
                "reason": reason}

    return [
        v("request.?subResource.orValue('') == '' && "
          "(variables.kind != 'Pod' || request.operation == 'UPDATE') && "
          "(!(variables.kind in ['ServiceAccount', 'Role', 'RoleBinding']) || request.operation != 'DELETE')",
          "'the controller writes no ' + request.operation + ' ' + request.resource.resource + "
          "(request.?subResource.orValue('') == '' ? '' : '/' + request.subResource)"),
        v("!(request.namespace in variables.protectedNamespaces)",
          "'the controller writes nothing of this kind in namespace ' + request.namespace + "
          f"' (it serves no DatasetCache or TrainJob in {', '.join(SYSTEM_NAMESPACES)} or the release namespace)'"),
        v(agent_kind + f"variables.obj.metadata.name.startsWith({_s(AGENT_PREFIX)}) && "
          f"variables.labels[?{_s(LABEL_COMPONENT)}].orValue('') == {_s(COMPONENT)} && "
          f"{_s(LABEL_CACHE)} in variables.labels",
          f"'metadata.name must start with {AGENT_PREFIX} and metadata.labels carry {LABEL_COMPONENT}={COMPONENT} "
          f"and {LABEL_CACHE}: the controller writes only dataset cache agent objects'"),
        v(agent_kind + "variables.owners.size() == 1 && variables.owners.all(r, "
          f"r.kind == {_s(DATASET_CACHE_KIND)} && r.apiVersion.startsWith('trainguard.io/') && "
          "r.?controller.orValue(false) && "
          f"(variables.obj.metadata.name == {_s(AGENT_PREFIX)} + r.name || size({_s(AGENT_PREFIX)} + r.name) > "
          f"{NAME_LIMIT}) && "
          f"(variables.labels[?{_s(LABEL_CACHE)}].orValue('') == r.name || size(r.name) > {NAME_LIMIT}))",
          f"'metadata.ownerReferences must be exactly one controlling reference to the DatasetCache the name "
          f"{AGENT_PREFIX}<cache> and the label {LABEL_CACHE} name'"),
        v(ds + "!variables.pod.?hostNetwork.orValue(false) && !variables.pod.?hostPID.orValue(false) && "
          "!variables.pod.?hostIPC.orValue(false) && "
          "!variables.pod.?securityContext.?windowsOptions.?hostProcess.orValue(false) && "
          "variables.pod.?ephemeralContainers.orValue([]).size() == 0 && "
          "variables.pod.?serviceAccountName.orValue('') == variables.obj.metadata.name",
          "'spec.template.spec: no hostNetwork, hostPID, hostIPC, hostProcess or ephemeral containers, and "
          "serviceAccountName must be the agent ServiceAccount ' + variables.obj.metadata.name"),
        v(ds + "variables.containers.all(c, c.?image.orValue('') == variables.agentImage && "
          "c.?command.orValue([]) == ['trainguard'] && c.?args.orValue([]).size() > 0 && "
          "c.args[0] == 'cache-agent')",
          "'spec.template.spec containers must run the cache agent image ' + variables.agentImage + "
          "' as trainguard cache-agent'"),
        v(ds + "variables.containers.all(c, !c.?securityContext.?privileged.orValue(false) && "
          "c.?securityContext.?allowPrivilegeEscalation.orValue(true) == false && "
          "'ALL' in c.?securityContext.?capabilities.?drop.orValue([]) && "
          f"c.?securityContext.?capabilities.?add.orValue([]).all(x, x == {_s(ALLOWED_CAPABILITY)}) && "
          "!c.?securityContext.?windowsOptions.?hostProcess.orValue(false))",
          "'spec.template.spec containers: securityContext.privileged must not be true, allowPrivilegeEscalation "
          f"must be false, capabilities must drop ALL and add none but {ALLOWED_CAPABILITY}'"),
        v(ds + "variables.volumes.all(vol, has(vol.persistentVolumeClaim) || (has(vol.hostPath) && "
          "!vol.hostPath.path.split('/').exists(s, s == '..') && "
          f"({_clean('vol.hostPath.path')}.startsWith(variables.socketDirectory) || "
          f"variables.hostPathRoots.exists(root, {_clean('root')} == '/' || "
          f"{_clean('vol.hostPath.path')} == {_clean('root')} || "
          f"{_clean('vol.hostPath.path')}.startsWith({_clean('root')} + '/')))))",
          "'spec.template.spec.volumes may be only persistentVolumeClaim, the cache socket directory under ' + "
          "variables.socketDirectory + ' or a hostPath below an allowed root ' + "
          "(variables.hostPathRoots.size() == 0 ? '(none allowed)' : variables.hostPathRoots.join(', '))"),
        v(ds + "variables.containers.all(c, c.?volumeMounts.orValue([]).all(m, "
          "!(m.name in variables.dataHostPaths) || m.?readOnly.orValue(false)))",
          "'spec.template.spec containers must mount a dataset hostPath volume readOnly'"),
        v(ds + "variables.pod.?priorityClassName.orValue('') == '' || "
          "variables.pod.priorityClassName in variables.allowedPriorityClasses",
          "'spec.template.spec.priorityClassName ' + variables.pod.?priorityClassName.orValue('') + "
          "' is not one the cluster admin allows cache agents (datasetCache.allowedPriorityClasses): ' + "
          f"{_names('variables.allowedPriorityClasses')}"),
        v(ds + "variables.pod.?tolerations.orValue([]).all(t, "
          f"{_is_gpu_toleration('t')} || "
          "(t.?key.orValue('') != '' && t.key in variables.allowedTolerationKeys))",
          "'spec.template.spec.tolerations: each must name a taint key the cluster admin allows cache agents "
          "(datasetCache.allowedTolerationKeys): ' + "
          f"{_names('variables.allowedTolerationKeys')} + "
          f"'; or be the GPU toleration every agent gets ({AGENT_GPU_TOLERATION['key']} "
          f"{AGENT_GPU_TOLERATION['operator']} {AGENT_GPU_TOLERATION['effect']}); "
          "a toleration without a key tolerates every taint'"),
        v(ds + "variables.nodeSelector.all(k, k in variables.requiredNodeSelector || "
          "k in variables.allowedNodeSelectorKeys) && variables.requiredNodeSelector.all(k, "
          "k in variables.nodeSelector && variables.nodeSelector[k] == variables.requiredNodeSelector[k])",
          "'spec.template.spec.nodeSelector may use only the label keys the cluster admin allows cache agents "
          "(datasetCache.allowedNodeSelectorKeys): ' + "
          f"{_names('variables.allowedNodeSelectorKeys')} + "
          "'; and must hold every required label (datasetCache.requiredNodeSelector): ' + "
          "(variables.requiredNodeSelector.size() == 0 ? 'none' : "
          "variables.requiredNodeSelector.map(k, k + '=' + variables.requiredNodeSelector[k]).join(', '))"),
        v(ds + "variables.containers.all(c, 'cpu' in c.?resources.?limits.orValue({}) && "
          "'memory' in c.?resources.?limits.orValue({}) && "
          "quantity(string(c.resources.limits['cpu'])).compareTo(variables.maxCpu) <= 0 && "
          "quantity(string(c.resources.limits['memory'])).compareTo(variables.maxMemory) <= 0)",
          "'spec.template.spec: every container and init container must set resources.limits cpu, at most ' + "
          "variables.agentCpuLimit + ' (cacheAgent.resources.cpuLimit), and memory, at most ' + "
          "variables.maxMemoryBudget + ' + ' + variables.agentMemoryOverhead + ' (datasetCache.maxMemoryBudget + "
          f"cacheAgent.resources.memoryOverhead); the socket-dir init container may have "
          f"{PREPARE_LIMITS['cpu']} and {PREPARE_LIMITS['memory']}'"),
        v("variables.kind != 'Role' || variables.obj.?rules.orValue([]).all(r, "
          f"r.?apiGroups.orValue([]) == {_list(rule['apiGroups'])} && "
          f"r.?resources.orValue([]) == {_list(rule['resources'])} && "
          f"r.?verbs.orValue([]) == {_list(rule['verbs'])} && "
          "r.?resourceNames.orValue([]).size() == 0 && r.?nonResourceURLs.orValue([]).size() == 0)",
          f"'rules may grant only {', '.join(rule['verbs'])} on {', '.join(rule['resources'])} (what a cache agent "
          "needs)'"),
        v("variables.kind != 'RoleBinding' || (variables.obj.roleRef.kind == 'Role' && "
          "variables.obj.roleRef.name == variables.obj.metadata.name && "
          "variables.obj.?subjects.orValue([]).size() == 1 && variables.obj.subjects.all(s, "
          "s.kind == 'ServiceAccount' && s.name == variables.obj.metadata.name && "
          "s.?namespace.orValue('') == request.namespace))",
          "'roleRef must be the Role ' + variables.obj.metadata.name + ' and subjects only the ServiceAccount ' + "
          "variables.obj.metadata.name + ' of namespace ' + request.namespace"),
        v("variables.kind != 'Pod' || (" + " && ".join(
            f"object.spec.?{f}.orValue({e}) == oldObject.spec.?{f}.orValue({e})"
            for f, e in (("containers", "[]"), ("initContainers", "[]"), ("tolerations", "[]"),
                         ("nodeSelector", "{}"), ("activeDeadlineSeconds", "0"),
                         ("terminationGracePeriodSeconds", "0"), ("affinity", "{}"))
          ) + " && " + " && ".join(
            f"object.metadata.?{f}.orValue({e}) == oldObject.metadata.?{f}.orValue({e})"
            for f, e in (("labels", "{}"), ("annotations", "{}"), ("ownerReferences", "[]"), ("finalizers", "[]"))
          ) + " && variables.newGates.all(g, g in variables.oldGates) && "
          f"variables.oldGates.all(g, g in variables.newGates || g == {_s(WARM_GATE)}))",
          f"'the controller may only remove the {WARM_GATE} scheduling gate of a pod, nothing else'"),
        v("variables.kind != 'JobSet' || (variables.owners.size() == 1 && variables.owners.all(r, "
          "r.kind == 'TrainJob' && r.apiVersion.startsWith('trainer.kubeflow.org/') && "
          "r.?controller.orValue(false) && r.name == variables.obj.metadata.name))",
          "'metadata.ownerReferences must be exactly one controlling reference to the TrainJob of the same name'"),
    ]


def controller_admission_policy(
    name: str = POLICY_NAME,
    *,
    namespace: str = "trainguard-system",
    service_account: str = "trainguard-controller",
    agent_image: str = "ghcr.io/trainguard/trainguard:0.1.0",
    allowed_host_path_roots: Sequence[str] = (),
    agents: DatasetCacheAgents = DatasetCacheAgents(),
    resources: AgentResources = AgentResources(),
    labels: dict[str, str] | None = None,
) -> list[dict]:
    """The ValidatingAdmissionPolicy and its binding (cluster-scoped; ``name`` names both) for the controller
    running as ServiceAccount ``namespace``/``service_account`` with ``--cache-agent-image=agent_image``, the
    admin's ``allowed_host_path_roots``, agent settings ``agents`` (the controller's ``--dataset-cache-*`` flags)
    and agent ``resources`` (``--cache-agent-*``). The settings are CEL literals (JSON, so the chart fills them with ``toJson``)."""
    meta: dict = {"name": name}
    if labels:
        meta["labels"] = dict(labels)
    username = f"system:serviceaccount:{namespace}:{service_account}"
    rules = [
        ("apps", ["daemonsets"]),
        ("", ["serviceaccounts", "pods"]),
        ("rbac.authorization.k8s.io", ["roles", "rolebindings"]),
        ("jobset.x-k8s.io", ["jobsets"]),
    ]
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": dict(meta),
        "spec": {
            # A broken expression must not open the hole it closes.
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {"apiGroups": [group], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE", "DELETE"],
                     "resources": [r for res in resources for r in (res, f"{res}/*")]}
                    for group, resources in rules
                ],
                "matchPolicy": "Equivalent",
            },
            "matchConditions": [
                {"name": "trainguard-controller", "expression": f"request.userInfo.username == {_s(username)}"},
            ],
            "variables": [
                {"name": "obj", "expression": "request.operation == 'DELETE' ? oldObject : object"},
                {"name": "kind", "expression": "request.kind.kind"},
                {"name": "protectedNamespaces", "expression": _list([*SYSTEM_NAMESPACES, namespace])},
                {"name": "agentImage", "expression": json.dumps(agent_image)},
                {"name": "hostPathRoots", "expression": _json(list(allowed_host_path_roots))},
                {"name": "allowedPriorityClasses", "expression": _json(list(agents.allowed_priority_classes))},
                {"name": "allowedTolerationKeys", "expression": _json(list(agents.allowed_toleration_keys))},
                {"name": "allowedNodeSelectorKeys", "expression": _json(list(agents.allowed_node_selector_keys))},
                {"name": "requiredNodeSelector", "expression": _json(dict(agents.required_node_selector))},
                {"name": "agentCpuLimit", "expression": _json(resources.cpu_limit)},
                {"name": "maxMemoryBudget", "expression": _json(agents.max_memory_budget)},
                {"name": "agentMemoryOverhead", "expression": _json(resources.memory_overhead)},
                {"name": "maxCpu", "expression": _at_least("quantity(variables.agentCpuLimit)", PREPARE_LIMITS["cpu"])},
                {"name": "maxMemory", "expression": _at_least(
                    "quantity(variables.maxMemoryBudget).add(quantity(variables.agentMemoryOverhead))",
                    PREPARE_LIMITS["memory"])},
                {"name": "socketDirectory", "expression": f"{_s(SOCKET_HOST_ROOT)} + '/' + request.namespace + '/'"},
                {"name": "labels", "expression": "variables.obj.metadata.?labels.orValue({})"},
                {"name": "owners", "expression": "variables.obj.metadata.?ownerReferences.orValue([])"},
                {"name": "pod", "expression": "variables.obj.spec.template.spec"},
                {"name": "containers", "expression": (
                    "variables.pod.containers + variables.pod.?initContainers.orValue([])")},
                {"name": "volumes", "expression": "variables.pod.?volumes.orValue([])"},
                {"name": "nodeSelector", "expression": "variables.pod.?nodeSelector.orValue({})"},
                {"name": "dataHostPaths", "expression": (
                    "variables.volumes.filter(vol, has(vol.hostPath) && "
                    f"!{_clean('vol.hostPath.path')}.startsWith(variables.socketDirectory)).map(vol, vol.name)")},
                {"name": "newGates", "expression": "object.spec.?schedulingGates.orValue([]).map(g, g.name)"},
                {"name": "oldGates", "expression": "oldObject.spec.?schedulingGates.orValue([]).map(g, g.name)"},
            ],
            "validations": _validations(),
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": dict(meta),
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }
    return [policy, binding]
