"""Which REST resource a built object goes to, for the kinds the reconciler writes beyond ``trainguard.webhook.kube``'s list.

The runtime framework returns plain objects (apiVersion + kind); the client needs a ``Resource``. Unknown kinds
are a programming error in the build, reported with the kind so it is found at once.
"""

from __future__ import annotations

from typing import Any, Mapping

from trainguard.webhook.kube.resources import CONFIGMAPS, JOBSETS, SECRETS, Resource

DAEMONSETS = Resource("apps", "v1", "daemonsets", "DaemonSet")
PODS = Resource("", "v1", "pods", "Pod")
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")
ROLES = Resource("rbac.authorization.k8s.io", "v1", "roles", "Role")
ROLE_BINDINGS = Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")
COSCHEDULING_PODGROUPS = Resource("scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup")
VOLCANO_PODGROUPS = Resource("scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup")

_BY_TYPE: dict[tuple[str, str], Resource] = {
    (r.api_version, r.kind): r
    for r in (JOBSETS, CONFIGMAPS, SECRETS, DAEMONSETS, PODS, SERVICE_ACCOUNTS, ROLES, ROLE_BINDINGS,
              COSCHEDULING_PODGROUPS, VOLCANO_PODGROUPS)
}


def resource_for(obj: Mapping[str, Any]) -> Resource:
    key = (str(obj.get("apiVersion") or ""), str(obj.get("kind") or ""))
    try:
        return _BY_TYPE[key]
    except KeyError:
        raise ValueError(f"the reconciler does not know where to apply {key[0]} {key[1]}") from None


def controller_owner(obj: Mapping[str, Any], kind: str, group: str) -> str | None:
    """Name of the controlling owner of ``kind`` in API ``group`` (any version), or None."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == kind and str(ref.get("apiVersion", "")).split("/")[0] == group:
            return ref.get("name")
    return None
