"""DatasetCache -> the objects that run its cache agents, and the status computed back from them.

Pure functions (no I/O, no clock: ``now`` comes in) that the reconciler calls:

* ``build_daemonset(cache, image=..., sources=..., agents=..., resources=...)``: one agent pod per selected node;
  refuses (``SourceNotAllowed``) a source the admin's ``DatasetCacheSources`` does not allow, so no caller can mount a
  hostPath it did not check, and (``AgentSettingsNotAllowed``) a priority class, toleration, node selector or memory
  budget the admin's ``DatasetCacheAgents`` does not allow, so none is granted with the controller's rights.
* ``build_agent_rbac(cache)``: the ServiceAccount/Role/RoleBinding the agents use to report residency.
* ``compute_status(cache, daemonset, pods, now=...)``: ``status`` for the DatasetCache.

How agents report bytes resident: each agent patches two annotations on its **own Pod**
(``trainguard.io/cache-bytes-resident``: decimal bytes of its shards resident in the page cache, measured with
mincore; ``trainguard.io/cache-shards``: shards indexed; ``trainguard.io/cache-warm``: ``"true"`` once its warm
set was resident) every few seconds when the
value changes. The pod name comes from the downward API. ``compute_status`` sums the ready pods' figures. Why
annotations rather than scraping ``/metrics``: the reconciler then needs only the pod list it already watches,
no network path to every node. The price is a Role allowing ``patch`` on pods in the cache's namespace
(Kubernetes RBAC cannot restrict a Role to "its own pod" when pod names are generated). That Role alone would let
anyone who borrows the agent's identity (a token Secret for its ServiceAccount, or a trainer pod naming it in
``serviceAccountName``) patch every pod of the namespace, so the ValidatingAdmissionPolicy of
``cache_agent_policy`` (shipped by the chart) narrows it, in the apiserver, to "these report annotations
on the pod the token is bound to": ``agent_name()``'s ``trainguard-cache-`` prefix is what the policy matches on.

Memory accounting: page cache is charged to the memory cgroup of the process that first reads it. The agent warms
the shards, so they are charged to the agent's pod; requesting ``memoryBudget + overhead`` makes the scheduler
reserve that memory, and the equal limit makes the kernel reclaim the agent's cache pages (not other pods'
memory) when the budget is exceeded. Page cache is reclaimable, so the limit never OOM-kills the agent for it;
the overhead (``AgentResources.memory_overhead``, 128Mi by default) is the agent's own anonymous memory
(interpreter, index, connection buffers), which the budget does not count. CPU: a request and a limit from the
admin (``AgentResources``: 100m and 1 by default), so a busy agent (hashing shards while it warms) cannot take a
node's cores. The memoryBudget itself is capped by the admin (``DatasetCacheAgents.max_memory_budget``).
"""

from __future__ import annotations

import contextlib
import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Mapping, Sequence

from pydantic import ValidationError

from trainguard.cache.report import ANNOTATION_BYTES_RESIDENT, ANNOTATION_SHARDS, ANNOTATION_WARM
from trainguard.webhook.api.apimachinery import controller_reference, format_time
from trainguard.webhook.api.constants import DATASET_CACHE_KIND, TRAINGUARD_API_VERSION
from trainguard.webhook.api.quantity import QuantityError, parse_quantity
from trainguard.webhook.api.trainguard import DatasetCache as DatasetCacheModel
from trainguard.webhook.api.views import CacheSource, CacheStatus, KubeObject, Pod, find_condition
from trainguard.webhook.api.views import DatasetCache as DatasetCacheView
from trainguard.webhook.field import aggregate
from trainguard.webhook.policy.dataset_cache import (
    DatasetCacheSources, UncleanPath, clean_host_path, shard_glob_errors, source_errors,
)
from trainguard.webhook.policy.dataset_cache_agents import AGENT_GPU_TOLERATION, DatasetCacheAgents, agent_errors
from trainguard.webhook.runtime.dataset_cache import SOCKET_FILENAME, SOCKET_GROUP_ID, socket_host_directory

AGENT_UID = 65532  # the conventional "nonroot" UID of distroless images; fixed so the socket dir can be chowned
AGENT_HTTP_PORT = 9108
DATA_MOUNT_PATH = "/data"
SOCKET_DIR_IN_POD = "/run/trainguard-cache"
GPU_TOLERATION = AGENT_GPU_TOLERATION

# The socket-dir init container's own resources (a chown): not the admin's AgentResources, which size the agent.
PREPARE_REQUESTS = {"cpu": "10m", "memory": "32Mi"}
PREPARE_LIMITS = {"cpu": "100m", "memory": "64Mi"}

LABEL_CACHE = "trainguard.io/dataset-cache"
LABEL_COMPONENT = "app.kubernetes.io/component"
COMPONENT = "dataset-cache-agent"

class DatasetCacheSpecError(ValueError):
    """The DatasetCache cannot be turned into a DaemonSet; the message names the field."""


class SourceNotAllowed(DatasetCacheSpecError):
    """The DatasetCache reads from a hostPath or PVC the cluster admin does not allow; the message names the field
    and what is allowed."""


class AgentSettingsNotAllowed(DatasetCacheSpecError):
    """The DatasetCache asks its agents for a priority class, toleration, node selector or memory budget the cluster
    admin does not allow; the message names the field and what is allowed."""


@dataclass(frozen=True)
class AgentResources:
    """The admin's CPU and memory settings of every agent container (controller flags ``--cache-agent-*``; Helm
    values ``cacheAgent.resources``). Memory request = limit = the cache's memoryBudget + ``memory_overhead``."""

    cpu_request: str = "100m"
    cpu_limit: str = "1"
    memory_overhead: str = "128Mi"

    def __post_init__(self) -> None:
        values = {}
        for name in ("cpu_request", "cpu_limit", "memory_overhead"):
            text = getattr(self, name)
            try:
                values[name] = parse_quantity(text)
            except QuantityError as e:
                raise ValueError(f"cache agent {name.replace('_', ' ')} {text!r}: {e}") from e
            if values[name].value() <= 0:
                raise ValueError(f"cache agent {name.replace('_', ' ')} {text!r} must be greater than zero")
        if values["cpu_request"].milli_value() > values["cpu_limit"].milli_value():
            raise ValueError(f"cache agent cpu request {self.cpu_request!r} exceeds its limit {self.cpu_limit!r}")

    @property
    def memory_overhead_bytes(self) -> int:
        return parse_quantity(self.memory_overhead).value()


def buildable_cache(cache: Any) -> DatasetCacheView:
    """The view of DatasetCache ``cache`` (the ``trainguard.webhook.api.trainguard.DatasetCache`` model, or its wire
    dict) once it is known to make a DaemonSet; raises ``DatasetCacheSpecError`` naming the field that prevents one.

    The pydantic model is the door (a type or shape the CRD schema refuses is refused here too, by a builder that
    may run on an object no apiserver validated); then what the schema cannot say: name and namespace, exactly one
    source, a clean hostPath, no ``..`` in the PVC's sub-path or the glob, a positive budget. The builders read the
    wire dict through the view only after this.
    """
    return _checked(cache)[0]


def _checked(cache: Any) -> tuple[DatasetCacheView, int]:
    """``buildable_cache`` and the budget in bytes it parsed, which the DaemonSet needs: the quantity is parsed once."""
    if isinstance(cache, DatasetCacheModel):
        wire = cache.dump()
    else:
        try:
            DatasetCacheModel.parse(cache)
        except ValidationError as exc:
            raise DatasetCacheSpecError(f"not a valid DatasetCache: {exc}") from exc
        wire = cache
    view = DatasetCacheView(wire)
    if not view.metadata.name or not view.metadata.namespace:
        raise DatasetCacheSpecError("metadata.name and metadata.namespace are required")
    source = view.source
    if bool(source.host_path) == source.has_claim:
        raise DatasetCacheSpecError("spec.source: exactly one of hostPath or persistentVolumeClaim must be set")
    if source.host_path:
        _mounted_host_path(source)
    if ".." in source.sub_path.split("/"):
        raise DatasetCacheSpecError(
            f"spec.source.persistentVolumeClaim.path: {source.sub_path!r} must not contain '..'")
    if source.shards.startswith("/") or ".." in source.shards:
        raise DatasetCacheSpecError(f"spec.source.shards: {source.shards!r} must be a relative glob without '..'")
    glob_errors = shard_glob_errors(wire)
    if glob_errors:
        raise DatasetCacheSpecError(aggregate(glob_errors))
    try:
        budget = view.memory_budget_bytes
    except QuantityError as exc:
        raise DatasetCacheSpecError(str(exc)) from exc  # names spec.memoryBudget
    if budget <= 0:
        raise DatasetCacheSpecError("spec.memoryBudget must be greater than zero")
    return view, budget


def _mounted_host_path(source: CacheSource) -> str:
    """The hostPath as mounted: cleaned, the form the admin's source check compares; ``..`` is refused, never
    resolved. One function for the check in ``buildable_cache`` and the volume, so what is checked is mounted."""
    try:
        return clean_host_path(source.host_path)
    except UncleanPath as exc:
        raise DatasetCacheSpecError(f"spec.source.hostPath.path: {source.host_path!r} {exc}") from exc


def agent_name(cache_name: str) -> str:
    """Name of the DaemonSet, ServiceAccount and Role for a cache; also a valid label value (<= 63)."""
    return _bounded(f"trainguard-cache-{cache_name}", 63)


def selector_labels(cache_name: str) -> dict[str, str]:
    """The labels selecting a cache's agent pods (the DaemonSet selector; immutable once created)."""
    return {LABEL_COMPONENT: COMPONENT, LABEL_CACHE: _bounded(cache_name, 63)}


def build_daemonset(
    cache: Any,
    *,
    image: str,
    sources: DatasetCacheSources,
    agents: DatasetCacheAgents = DatasetCacheAgents(),
    resources: AgentResources = AgentResources(),
    image_pull_policy: str = "IfNotPresent",
    report_to_pod: bool = True,
) -> dict:
    """The DaemonSet running ``cache``'s agents (see the module docstring for the choices).

    Raises ``SourceNotAllowed`` when ``sources`` (the admin's setting) does not allow the cache's source, and
    ``AgentSettingsNotAllowed`` when ``agents`` does not allow what it asks for its agents: the agent pods are
    created by the controller, not the user, so these checks are what keep a namespace user's DatasetCache from
    mounting an arbitrary node directory past Pod Security, or running node-critical pods on every node.
    """
    view, budget = _checked(cache)
    refused = source_errors(view.raw, sources)
    if refused:
        raise SourceNotAllowed(aggregate(refused))
    refused = agent_errors(view.raw, agents)
    if refused:
        raise AgentSettingsNotAllowed(aggregate(refused))
    cache_name, namespace, source = view.metadata.name, view.metadata.namespace, view.source
    name = agent_name(cache_name)
    labels = selector_labels(cache_name)
    memory = str(budget + resources.memory_overhead_bytes)
    root = DATA_MOUNT_PATH + (f"/{source.sub_path}" if source.sub_path else "")
    args = [
        "cache-agent",
        f"--root={root}",
        f"--glob={source.shards}",
        f"--socket={SOCKET_DIR_IN_POD}/{SOCKET_FILENAME}",
        f"--memory-budget={budget}",
        f"--http-port={AGENT_HTTP_PORT}",
        f"--dataset={cache_name}",
        f"--socket-group={SOCKET_GROUP_ID}",  # socket 0660 of this group; only peers in it are served
    ]
    if report_to_pod:
        args.append("--report-to-pod")
    # The data source is mounted read-only: type Directory (never created, never a file or socket), and the mount
    # below is recursively read-only where the runtime supports it, so submounts under the root stay read-only too.
    if source.host_path:
        data_volume = {"name": "data", "hostPath": {"path": _mounted_host_path(source), "type": "Directory"}}
    else:
        data_volume = {
            "name": "data",
            "persistentVolumeClaim": {"claimName": source.claim_name, "readOnly": True},
        }
    socket_volume = {
        "name": "socket",
        "hostPath": {"path": socket_host_directory(namespace, cache_name), "type": "DirectoryOrCreate"},
    }
    agent = {
        "name": "agent",
        "image": image,
        "imagePullPolicy": image_pull_policy,
        "command": ["trainguard"],
        "args": args,
        "env": [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        ],
        "ports": [{"name": "http", "containerPort": AGENT_HTTP_PORT, "protocol": "TCP"}],
        "resources": {"requests": {"cpu": resources.cpu_request, "memory": memory},
                      "limits": {"cpu": resources.cpu_limit, "memory": memory}},
        "volumeMounts": [
            {"name": "data", "mountPath": DATA_MOUNT_PATH, "readOnly": True, "recursiveReadOnly": "IfPossible"},
            {"name": "socket", "mountPath": SOCKET_DIR_IN_POD},
        ],
        "readinessProbe": {
            "httpGet": {"path": "/readyz", "port": "http"},
            "periodSeconds": 5,
            "failureThreshold": 1,
        },
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": "http"},
            "periodSeconds": 20,
            "failureThreshold": 3,
        },
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": AGENT_UID,
            "runAsGroup": AGENT_UID,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    # The kubelet creates the hostPath socket directory owned by root; the agent runs as AGENT_UID and must
    # create its socket there. This init container does only that chown, as root with CAP_CHOWN alone.
    prepare = {
        "name": "socket-dir",
        "image": image,
        "imagePullPolicy": image_pull_policy,
        "command": ["trainguard"],
        "args": [
            "cache-agent",
            f"--prepare-socket-dir={SOCKET_DIR_IN_POD}",
            f"--owner-uid={AGENT_UID}",
            f"--socket-group={SOCKET_GROUP_ID}",  # the directory becomes 0750 agent:group
        ],
        "volumeMounts": [{"name": "socket", "mountPath": SOCKET_DIR_IN_POD}],
        "resources": {"requests": dict(PREPARE_REQUESTS), "limits": dict(PREPARE_LIMITS)},
        "securityContext": {
            "runAsNonRoot": False,
            "runAsUser": 0,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"], "add": ["CHOWN"]},
        },
    }
    # Copies (a toleration's fields are all scalars): the DaemonSet is the caller's to change, the cache and
    # GPU_TOLERATION are not.
    tolerations = [dict(GPU_TOLERATION)] + [dict(t) for t in view.tolerations if t != GPU_TOLERATION]
    pod_spec: dict[str, Any] = {
        "serviceAccountName": name,
        "automountServiceAccountToken": report_to_pod,
        # The agent is in the socket's group so that it may give its socket that group (chgrp needs membership).
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}, "supplementalGroups": [SOCKET_GROUP_ID]},
        "initContainers": [prepare],
        "containers": [agent],
        "volumes": [data_volume, socket_volume],
        "tolerations": tolerations,
        "terminationGracePeriodSeconds": 10,
    }
    # The admin's required labels win (agent_errors refused a cache that gives one of them another value).
    node_selector = {**view.node_selector, **dict(agents.required_node_selector)}
    if node_selector:
        pod_spec["nodeSelector"] = node_selector
    if view.priority_class_name:
        pod_spec["priorityClassName"] = view.priority_class_name
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": dict(labels),
            "ownerReferences": [_owner_reference(view)],
        },
        "spec": {
            "selector": {"matchLabels": dict(labels)},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
            "template": {"metadata": {"labels": dict(labels)}, "spec": pod_spec},
        },
    }


def build_agent_rbac(cache: Any) -> list[dict]:
    """ServiceAccount, Role (patch pods) and RoleBinding the agents use to annotate their own Pod.

    The Role is wider than the need; ``cache_agent_policy`` confines every ``trainguard-cache-*``
    ServiceAccount to its own Pod's report annotations (see the module docstring).
    """
    view = buildable_cache(cache)
    name = agent_name(view.metadata.name)
    labels = selector_labels(view.metadata.name)
    meta = {
        "name": name,
        "namespace": view.metadata.namespace,
        "labels": dict(labels),
        "ownerReferences": [_owner_reference(view)],
    }
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": dict(meta)},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": dict(meta),
            # patch only: the reporter sends a merge patch and never reads the Pod. RBAC cannot name the
            # agent's own (generated) Pod, so RBAC alone allows patching any Pod in the namespace; the
            # ValidatingAdmissionPolicy of cache_agent_policy (matching this ServiceAccount by its
            # name) refuses a token bound to no Pod, any other Pod, and any change but the report annotations.
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": dict(meta),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": view.metadata.namespace}],
        },
    ]


def compute_status(
    cache: Any,
    daemonset: Mapping[str, Any] | None,
    pods: Sequence[Mapping[str, Any]],
    *,
    now: datetime,
    previous: Mapping[str, Any] | None = None,
) -> dict:
    """``status`` of a DatasetCache from its DaemonSet and agent pods.

    ``nodesReady`` counts agent pods that are Ready (readiness = warm set resident); ``bytesResident`` sums the
    annotation each ready agent writes. Pods not selected by this cache's labels are ignored, so the caller may
    pass a namespace-wide list. The Ready condition keeps its ``lastTransitionTime`` from ``previous`` unless its
    status changed.
    """
    view = buildable_cache(cache)
    wanted = selector_labels(view.metadata.name)
    desired = int(KubeObject(daemonset).status.get("desiredNumberScheduled") or 0)
    ready_nodes = 0
    resident = 0
    unreported = 0
    shard_counts: list[int] = []
    for pod in pods:
        agent = Pod(pod)
        meta = agent.metadata
        labels = meta.labels
        if any(labels.get(k) != v for k, v in wanted.items()):
            continue
        if not _pod_ready(agent):
            continue
        ready_nodes += 1
        annotations = meta.annotations
        try:
            resident += max(0, int(annotations.get(ANNOTATION_BYTES_RESIDENT)))
        except (TypeError, ValueError):
            unreported += 1
        with contextlib.suppress(TypeError, ValueError):
            shard_counts.append(int(annotations.get(ANNOTATION_SHARDS)))
    if daemonset is None:
        cond_status, reason, message = "False", "DaemonSetMissing", "the agent DaemonSet does not exist yet"
    elif desired == 0:
        cond_status, reason, message = "False", "NoNodesSelected", "no node matches the cache's nodeSelector"
    elif ready_nodes >= desired:
        cond_status, reason, message = "True", "Warm", f"{ready_nodes}/{desired} nodes have the warm set resident"
    else:
        cond_status, reason = "False", "Warming"
        message = f"{ready_nodes}/{desired} nodes have the warm set resident"
    if unreported:
        message += f"; {unreported} ready agent(s) have not reported bytes resident yet"
    transition = kept_transition_time(previous, cond_status, now)
    generation = view.metadata.generation
    status: dict[str, Any] = {
        "nodesDesired": desired,
        "nodesReady": ready_nodes,
        "bytesResident": resident,
        "conditions": [
            {
                "type": "Ready",
                "status": cond_status,
                "reason": reason,
                "message": message,
                "lastTransitionTime": transition,
            }
        ],
    }
    if shard_counts:
        status["shards"] = max(shard_counts)  # nodes of one hostPath dataset can differ; report the largest
    if generation is not None:
        status["observedGeneration"] = generation
    return status


def kept_transition_time(previous: Mapping[str, Any] | None, cond_status: str, now: datetime) -> str:
    """``lastTransitionTime`` of the new Ready condition: the previous status's, while Ready keeps its status;
    ``now`` when it flips or there was none."""
    old = CacheStatus(previous).ready_condition
    if old.status == cond_status and old.last_transition_time:
        return old.last_transition_time
    return format_time(now)


def _pod_ready(pod: Pod) -> bool:
    ready = find_condition(pod.status.get("conditions") or [], "Ready")
    return ready is not None and ready.is_true


def _owner_reference(view: DatasetCacheView) -> dict:
    meta = view.metadata
    return controller_reference(view.api_version or TRAINGUARD_API_VERSION, DATASET_CACHE_KIND,
                                {"metadata": {"name": meta.name, "uid": meta.uid}})


def _bounded(text: str, limit: int) -> str:
    """``text`` if it fits, else a prefix plus a short hash, so long names stay unique and valid."""
    if len(text) <= limit:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{text[: limit - 9].rstrip('-.')}-{digest}"
