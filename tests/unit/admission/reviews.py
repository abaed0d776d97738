"""Builders for AdmissionReview bodies and fake policy functions, shared by the admission unit and fuzz tests."""

from __future__ import annotations

import copy
import uuid
from typing import Any

from trainguard.webhook.admission.routes import ROUTES, bind_routes
from trainguard.webhook.policy.verdict import AdmissionInput, ClusterSnapshot, Verdict

TRAINJOB = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1",
    "kind": "TrainJob",
    "metadata": {"name": "job", "namespace": "team-a", "labels": {"a": "b"}},
    "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 2, "env": [{"name": "X", "value": "1"}]}},
}

KINDS = {r.path: r for r in ROUTES}


def review(
    path: str = "/validate-trainer-kubeflow-org-v1alpha1-trainjob",
    obj: dict[str, Any] | None = None,
    *,
    operation: str = "CREATE",
    old: dict[str, Any] | None = None,
    dry_run: bool = False,
    uid: str | None = None,
) -> dict[str, Any]:
    route = KINDS[path]
    if obj is None:
        obj = copy.deepcopy(TRAINJOB) if route.kind == "TrainJob" else {
            "apiVersion": route.api_version, "kind": route.kind, "metadata": {"name": "x"}, "spec": {}
        }
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid or str(uuid.uuid4()),
            "kind": {"group": route.group, "version": route.version, "kind": route.kind},
            "resource": {"group": route.group, "version": route.version, "resource": route.resource},
            "requestKind": {"group": route.group, "version": route.version, "kind": route.kind},
            "name": obj.get("metadata", {}).get("name", ""),
            "namespace": obj.get("metadata", {}).get("namespace", ""),
            "operation": operation,
            "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
            "object": obj,
            "oldObject": old if old is not None else (copy.deepcopy(obj) if operation == "UPDATE" else None),
            "dryRun": dry_run,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }


def label_mutation(inp: AdmissionInput, snap: ClusterSnapshot) -> Verdict:
    """Idempotent: adds a label and a default only when absent."""
    obj = copy.deepcopy(inp.obj)
    obj["metadata"].setdefault("labels", {})["trainguard.io/checked"] = "true"
    obj["spec"].setdefault("suspend", False)
    return Verdict.allow(obj, ["audit: numNodes above team budget"])


def deny_big(inp: AdmissionInput, snap: ClusterSnapshot) -> Verdict:
    nodes = ((inp.obj.get("spec") or {}).get("trainer") or {}).get("numNodes", 0)
    if isinstance(nodes, int) and nodes > 4:
        return Verdict.deny(f"spec.trainer.numNodes: Invalid value: {nodes}: must be no more than 4", "PolicyLimits")
    return Verdict.allow()


def allow(inp: AdmissionInput, snap: ClusterSnapshot) -> Verdict:
    return Verdict.allow()


def explode(inp: AdmissionInput, snap: ClusterSnapshot) -> Verdict:
    raise KeyError("policy bug")


FAKE_POLICIES = {
    "mutate_trainjob": label_mutation,
    "validate_trainjob": deny_big,
    "validate_training_runtime": allow,
    "validate_cluster_training_runtime": allow,
    "validate_trainjob_policy": explode,
    "validate_dataset_cache": allow,
}


def fake_routes():
    return bind_routes(FAKE_POLICIES)
