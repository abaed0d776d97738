"""Every schema limit and CEL rule of the generated CRDs, against the real API server.

Table-driven: each rule has an object the API server must reject with HTTP 422 and the upstream message, and
a valid neighbour it must accept. Transition rules (``self == oldSelf``) are exercised with an update.
"""

from __future__ import annotations

from typing import Any, Callable

import pytest

from api_objects import Api, cache, policy, rejection, runtime, trainjob, with_changes

Change = tuple[str, Any]


def job_named(name: str) -> dict:
    return with_changes(trainjob(), ("metadata.name", name))


# (id, valid object factory, changes that break it, message the 422 must contain, changes that keep it valid)
CREATE_RULES: list[tuple[str, Callable[[], dict], list[Change], str, list[Change]]] = [
    ("name-rfc1035", trainjob, [("metadata.name", "9lives")],
     "metadata.name must match RFC 1035 DNS label format", [("metadata.name", "lives9")]),
    ("name-length", trainjob, [("metadata.name", "a" * 64)],
     "metadata.name must be no more than 63 characters", [("metadata.name", "a" * 63)]),
    ("managed-by-values", trainjob, [("spec.managedBy", "acme.io/controller")],
     "ManagedBy must be trainer.kubeflow.org/trainjob-controller or kueue.x-k8s.io/multikueue if set",
     [("spec.managedBy", "kueue.x-k8s.io/multikueue")]),
    ("storage-uri-format", trainjob, [("spec.initializer.dataset.storageUri", "alpaca")],
     "storageUri may be empty, or it must be a valid URI (scheme://...)",
     [("spec.initializer.dataset.storageUri", "")]),
    ("model-storage-uri-format", trainjob, [("spec.initializer.model", {"storageUri": "://x"})],
     "storageUri may be empty, or it must be a valid URI (scheme://...)",
     [("spec.initializer.model", {"storageUri": "hf://meta-llama/Llama-3.2-1B"})]),
    ("active-deadline-min", trainjob, [("spec.activeDeadlineSeconds", 0)],
     "spec.activeDeadlineSeconds: Invalid value: 0: spec.activeDeadlineSeconds in body should be greater than "
     "or equal to 1", [("spec.activeDeadlineSeconds", 1)]),
    ("runtime-ref-name-min", trainjob, [("spec.runtimeRef.name", "")],
     "spec.runtimeRef.name in body should be at least 1 chars long", [("spec.runtimeRef.name", "r")]),
    ("image-max-length", trainjob, [("spec.trainer.image", "x" * 501)],
     "spec.trainer.image: Too long: may not be more than 500 bytes", [("spec.trainer.image", "x" * 500)]),
    ("runtime-patches-max", trainjob,
     [("spec.runtimePatches", [{"manager": f"m{i}.io/x"} for i in range(17)])],
     "spec.runtimePatches: Too many: 17: must have at most 16 items",
     [("spec.runtimePatches", [{"manager": f"m{i}.io/x"} for i in range(16)])]),
    ("runtime-patches-unique-manager", trainjob,
     [("spec.runtimePatches", [{"manager": "a.io/x"}, {"manager": "a.io/x"}])],
     'spec.runtimePatches[1]: Duplicate value: {"manager":"a.io/x"}',
     [("spec.runtimePatches", [{"manager": "a.io/x"}, {"manager": "b.io/x"}])]),
    ("env-unique-name", trainjob,
     [("spec.trainer.env", [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}])],
     "spec.trainer.env[1]: Duplicate value", [("spec.trainer.env", [{"name": "A"}, {"name": "B"}])]),
    ("only-one-ml-policy", runtime, [("spec.mlPolicy", {"torch": {}, "mpi": {}})],
     "Only one of the policy can be configured", [("spec.mlPolicy", {"mpi": {}})]),
    ("only-one-ml-policy-jax-xgboost", runtime, [("spec.mlPolicy", {"jax": {}, "xgboost": {}})],
     "Only one of the policy can be configured", [("spec.mlPolicy", {"xgboost": {}})]),
    ("env-injection-no-node", runtime,
     [("spec.mlPolicy.torch", {"envInjection": {"targets": [{"jobName": "node", "containerNames": ["node"]}]}})],
     "containerNames must not include the main node container because PET_* envs are always injected into it",
     [("spec.mlPolicy.torch", {"envInjection": {"targets": [{"jobName": "node", "containerNames": ["sidecar"]}]}})]),
    ("env-injection-container-names-min", runtime,
     [("spec.mlPolicy.torch", {"envInjection": {"targets": [{"jobName": "node", "containerNames": []}]}})],
     "should have at least 1 items",
     [("spec.mlPolicy.torch", {"envInjection": {"targets": [{"jobName": "node", "containerNames": ["a"]}]}})]),
    ("flux-num-proc", runtime, [("spec.mlPolicy", {"flux": {"numProcPerNode": 0}})],
     "NumProcPerNode in fluxPolicy must be >= 1", [("spec.mlPolicy", {"flux": {"numProcPerNode": 1}})]),
    ("mpi-implementation-enum", runtime, [("spec.mlPolicy", {"mpi": {"mpiImplementation": "Intel"}})],
     'spec.mlPolicy.mpi.mpiImplementation: Unsupported value: "Intel"',
     [("spec.mlPolicy", {"mpi": {"mpiImplementation": "OpenMPI"}})]),
    ("runtime-spec-min-properties", runtime, [("spec", {})],
     "spec: Invalid value: 0: spec in body should have at least 1 properties", [("spec", {"mlPolicy": {}})]),
    ("jobset-startup-vs-depends-on", runtime,
     [("spec.template.spec.startupPolicy", {"startupPolicyOrder": "InOrder"}),
      ("spec.template.spec.replicatedJobs.0.dependsOn", [{"name": "x", "status": "Complete"}])],
     "StartupPolicy and DependsOn APIs are mutually exclusive",
     [("spec.template.spec.startupPolicy", {"startupPolicyOrder": "InOrder"})]),
    ("policy-mode-enum", policy, [("spec.mode", "Sometimes")],
     'spec.mode: Unsupported value: "Sometimes"', [("spec.mode", "Enforce")]),
    ("policy-levels-sorted", policy,
     [("spec.topology.levels", [{"nodeLabel": "b", "gpusPerDomain": 72}, {"nodeLabel": "a", "gpusPerDomain": 8}])],
     "levels must be ordered from the narrowest domain (fewest GPUs) to the widest",
     [("spec.topology.levels", [{"nodeLabel": "a", "gpusPerDomain": 8}])]),
    ("policy-levels-min", policy, [("spec.topology.levels", [])],
     "spec.topology.levels: Invalid value: 0: spec.topology.levels in body should have at least 1 items",
     [("spec.topology.levels", [{"nodeLabel": "a", "gpusPerDomain": 1}])]),
    ("policy-max-nodes-min", policy, [("spec.limits.maxNodes", 0)],
     "spec.limits.maxNodes in body should be greater than or equal to 1", [("spec.limits.maxNodes", 1)]),
    ("cache-one-source", cache,
     [("spec.source.persistentVolumeClaim", {"claimName": "pvc"})],
     "exactly one of hostPath or persistentVolumeClaim must be set",
     [("spec.source.persistentVolumeClaim", {"claimName": "pvc"}), ("spec.source.hostPath", None)]),
    ("cache-no-source", cache, [("spec.source.hostPath", None)],
     "exactly one of hostPath or persistentVolumeClaim must be set", []),
    ("cache-host-path-absolute", cache, [("spec.source.hostPath.path", "data")],
     "path must be absolute", [("spec.source.hostPath.path", "/data")]),
    ("cache-shards-relative", cache, [("spec.source.shards", "../*.arrow")],
     "shards must be a relative glob and must not contain '..'", [("spec.source.shards", "x/*.arrow")]),
    ("cache-shards-wildcards", cache, [("spec.source.shards", "*a*a*a*a*a*a*a*a*b")],
     "shards must contain at most 8 '*' characters", [("spec.source.shards", "*a*a*a*a*a*a*a*b")]),
    ("cache-shards-length", cache, [("spec.source.shards", "a" * 257)],
     "spec.source.shards: Too long: may not be more than 256", [("spec.source.shards", "a" * 256)]),
    ("cache-budget-positive", cache, [("spec.memoryBudget", "0")],
     "memoryBudget must be greater than zero", [("spec.memoryBudget", 1)]),
    ("cache-budget-quantity", cache, [("spec.memoryBudget", "lots")],
     "spec.memoryBudget in body should match", [("spec.memoryBudget", "512Mi")]),
    ("cache-name-length", cache, [("metadata.name", "c" * 53)],
     "metadata.name must be no more than 52 characters", [("metadata.name", "c" * 52)]),
]


@pytest.mark.parametrize("case_id, make, bad, message, good", CREATE_RULES, ids=[c[0] for c in CREATE_RULES])
def test_create_rule(cluster, namespace, case_id, make, bad, message, good):
    api = Api(cluster.api_client(), namespace)
    base = make()
    # Cluster-scoped objects share one namespace-less space across tests: make names unique per test.
    if base["kind"] in ("ClusterTrainingRuntime", "TrainJobPolicy"):
        base = with_changes(base, ("metadata.name", f"{case_id}-{namespace[-6:]}"))
    status, got = rejection(api.create, with_changes(base, *bad))
    assert status == 422, got
    assert message in got
    accepted = api.create(with_changes(base, *good))
    assert accepted["metadata"]["uid"]
    if base["kind"] in ("ClusterTrainingRuntime", "TrainJobPolicy"):
        # A valid policy with an empty selector would match every later test's TrainJobs.
        api.delete(base["kind"], accepted["metadata"]["name"])


# (id, changes applied by an update of a valid TrainJob, message). kube-apiserver 1.35 renders a rejected object
# value as `Invalid value: field is immutable` (older releases printed `Invalid value: "object": ...`).
IMMUTABLE_FIELDS: list[tuple[str, list[Change], str]] = [
    ("runtime-ref", [("spec.runtimeRef.name", "other")], "spec.runtimeRef: Invalid value: field is immutable"),
    ("trainer", [("spec.trainer.numNodes", 8)], "spec.trainer: Invalid value: field is immutable"),
    ("initializer", [("spec.initializer.dataset.storageUri", "s3://b/p")],
     "spec.initializer: Invalid value: field is immutable"),
    ("active-deadline", [("spec.activeDeadlineSeconds", 7200)],
     "spec.activeDeadlineSeconds: Invalid value: 7200: field is immutable"),
    ("managed-by", [("spec.managedBy", "kueue.x-k8s.io/multikueue")],
     'spec.managedBy: Invalid value: "kueue.x-k8s.io/multikueue": field is immutable'),
    ("patch-service-account", [("spec.runtimePatches.0.trainingRuntimeSpec.template.spec.replicatedJobs.0.template."
                                "spec.template.spec.serviceAccountName", "other")], "field is immutable"),
    ("patch-volumes", [("spec.runtimePatches.0.trainingRuntimeSpec.template.spec.replicatedJobs.0.template.spec."
                        "template.spec.volumes", [{"name": "other", "emptyDir": {}}])], "field is immutable"),
]


@pytest.mark.parametrize("case_id, changes, message", IMMUTABLE_FIELDS, ids=[c[0] for c in IMMUTABLE_FIELDS])
def test_immutable_field(cluster, namespace, case_id, changes, message):
    api = Api(cluster.api_client(), namespace)
    created = api.create(with_changes(trainjob(), ("spec.managedBy", "trainer.kubeflow.org/trainjob-controller")))
    status, got = rejection(api.replace, with_changes(created, *changes))
    assert status == 422, got
    assert message in got


def test_mutable_fields_can_change(cluster, namespace):
    """suspend and the scheduling fields of a runtime patch carry no immutability rule."""
    api = Api(cluster.api_client(), namespace)
    created = api.create(trainjob())
    sel = "spec.runtimePatches.0.trainingRuntimeSpec.template.spec.replicatedJobs.0.template.spec.template.spec."
    updated = api.replace(with_changes(created, ("spec.suspend", True), (sel + "nodeSelector", {"pool": "b"}),
                                       (sel + "tolerations", [{"operator": "Exists"}])))
    assert updated["spec"]["suspend"] is True


def test_trainer_status_requires_last_updated_time(cluster, namespace):
    api = Api(cluster.api_client(), namespace)
    created = api.create(trainjob())
    status, got = rejection(api.replace_status, with_changes(created, ("status", {"trainerStatus": {
        "progressPercentage": 10}})))
    assert status == 422
    assert "lastUpdatedTime is required when trainerStatus is present" in got
    ok = api.replace_status(with_changes(created, ("status", {"trainerStatus": {
        "progressPercentage": 10, "lastUpdatedTime": "2026-01-02T03:04:05Z"}})))
    assert ok["status"]["trainerStatus"]["progressPercentage"] == 10


def test_schema_defaults_are_applied(cluster, namespace):
    api = Api(cluster.api_client(), namespace)
    job = api.create({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                      "metadata": {"name": "defaults"}, "spec": {"runtimeRef": {"name": "torch-distributed"}}})
    assert job["spec"]["runtimeRef"] == {"name": "torch-distributed", "apiGroup": "trainer.kubeflow.org",
                                         "kind": "ClusterTrainingRuntime"}
    assert job["spec"]["suspend"] is False
    assert job["spec"]["managedBy"] == "trainer.kubeflow.org/trainjob-controller"
    rt = api.create(runtime("TrainingRuntime", "mpi-defaults", {"mpi": {}}))
    assert rt["spec"]["mlPolicy"]["mpi"] == {"numProcPerNode": 1, "mpiImplementation": "OpenMPI",
                                             "sshAuthMountPath": "/root/.ssh", "runLauncherAsNode": False}
    assert rt["spec"]["template"]["spec"]["replicatedJobs"][0]["replicas"] == 1
