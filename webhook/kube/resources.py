"""Resource types: what a REST path is made of, the ones trainguard reads and writes, and the registry from an
object's (apiVersion, kind) to its resource.

A ``Resource`` is the (group, version, plural) triple plus whether it is namespaced; it turns into URL paths.
Keeping the list here means the webhook caches, the reconciler and the tests spell each type the same way.
``resource_for(obj)`` is where a built object (the runtime framework returns plain objects) is applied; an unknown
kind is a programming error in the build, reported with the kind so it is found at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping
from urllib.parse import quote

from trainguard.webhook.api.constants import (
    CLUSTER_TRAINING_RUNTIME_KIND,
    DATASET_CACHE_KIND,
    JOBSET_GROUP,
    JOBSET_KIND,
    JOBSET_VERSION,
    TRAINER_GROUP,
    TRAINER_VERSION,
    TRAINGUARD_GROUP,
    TRAINGUARD_VERSION,
    TRAINING_RUNTIME_KIND,
    TRAINJOB_KIND,
    TRAINJOB_POLICY_KIND,
)


@dataclass(frozen=True)
class Resource:
    group: str  # "" for the core API
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        """The REST path; ``namespace=None`` on a namespaced resource means "across all namespaces" (list/watch)."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.plural}"
        if name is not None:
            if not name:
                raise ValueError(f"empty name for {self.kind}")
            base += f"/{quote(name, safe='')}"
            if subresource:
                base += f"/{subresource}"
        return base


NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
SECRETS = Resource("", "v1", "secrets", "Secret")
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
EVENTS = Resource("events.k8s.io", "v1", "events", "Event")
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease")
PRIORITY_CLASSES = Resource("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False)
MUTATING_WEBHOOK_CONFIGURATIONS = Resource(
    "admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations", "MutatingWebhookConfiguration", False
)
VALIDATING_WEBHOOK_CONFIGURATIONS = Resource(
    "admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations", "ValidatingWebhookConfiguration", False
)
TRAINJOBS = Resource(TRAINER_GROUP, TRAINER_VERSION, "trainjobs", TRAINJOB_KIND)
TRAINING_RUNTIMES = Resource(TRAINER_GROUP, TRAINER_VERSION, "trainingruntimes", TRAINING_RUNTIME_KIND)
CLUSTER_TRAINING_RUNTIMES = Resource(
    TRAINER_GROUP, TRAINER_VERSION, "clustertrainingruntimes", CLUSTER_TRAINING_RUNTIME_KIND, namespaced=False
)
TRAINJOB_POLICIES = Resource(TRAINGUARD_GROUP, TRAINGUARD_VERSION, "trainjobpolicies", TRAINJOB_POLICY_KIND,
                             namespaced=False)
DATASET_CACHES = Resource(TRAINGUARD_GROUP, TRAINGUARD_VERSION, "datasetcaches", DATASET_CACHE_KIND)
JOBSETS = Resource(JOBSET_GROUP, JOBSET_VERSION, "jobsets", JOBSET_KIND)
# Kueue's queueing objects (optional: Kueue may not be installed); read in their storage version.
LOCAL_QUEUES = Resource("kueue.x-k8s.io", "v1beta2", "localqueues", "LocalQueue")
CLUSTER_QUEUES = Resource("kueue.x-k8s.io", "v1beta2", "clusterqueues", "ClusterQueue", namespaced=False)
ADMISSION_CHECKS = Resource("kueue.x-k8s.io", "v1beta2", "admissionchecks", "AdmissionCheck", namespaced=False)
# The reconciler deactivates the Workload of a TrainJob it blocks (``spec.active``), so Kueue gives its quota back.
WORKLOADS = Resource("kueue.x-k8s.io", "v1beta2", "workloads", "Workload")
# What the reconciler writes besides the types above: the DatasetCache agents' objects and the gang PodGroups.
DAEMONSETS = Resource("apps", "v1", "daemonsets", "DaemonSet")
PODS = Resource("", "v1", "pods", "Pod")
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")
ROLES = Resource("rbac.authorization.k8s.io", "v1", "roles", "Role")
ROLE_BINDINGS = Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")
COSCHEDULING_PODGROUPS = Resource("scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup")
VOLCANO_PODGROUPS = Resource("scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup")

# The kinds a build may return, by (apiVersion, kind).
_APPLIED: dict[tuple[str, str], Resource] = {
    (r.api_version, r.kind): r
    for r in (JOBSETS, CONFIGMAPS, SECRETS, DAEMONSETS, PODS, SERVICE_ACCOUNTS, ROLES, ROLE_BINDINGS,
              COSCHEDULING_PODGROUPS, VOLCANO_PODGROUPS)
}


def resource_for(obj: Mapping[str, Any]) -> Resource:
    key = (str(obj.get("apiVersion") or ""), str(obj.get("kind") or ""))
    try:
        return _APPLIED[key]
    except KeyError:
        raise ValueError(f"the reconciler does not know where to apply {key[0]} {key[1]}") from None
