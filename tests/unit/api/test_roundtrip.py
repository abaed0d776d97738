"""Property: for any valid object, ``Model.parse(obj).dump() == obj`` - nothing dropped, added or retyped.

This is what lets trainguard sit in the admission path and the reconciler's apply path without eating fields it
does not know (newer pod fields, other controllers' extensions). Unknown keys are sprinkled at every level.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainguard.webhook.api.jobset import JobSet
from trainguard.webhook.api.trainer import ClusterTrainingRuntime, TrainingRuntime, TrainJob
from trainguard.webhook.api.trainguard import DatasetCache, TrainJobPolicy

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

names = st.from_regex(r"[a-z][a-z0-9-]{0,8}[a-z0-9]", fullmatch=True)
text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
small_int = st.integers(min_value=0, max_value=10_000)
json_value = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(names, inner, max_size=3),
    max_leaves=6,
)
quantity = st.one_of(
    st.sampled_from(["1", "2500m", "3.7", "8", "1Gi", "256Gi", "100Mi", "1e3", "0.5", "12k"]),
    st.integers(min_value=0, max_value=64),
)
# Keys no model defines, at any level (shaped like real future fields and vendor extensions).
unknown = st.dictionaries(st.sampled_from(["futureField", "zzVendorExtension", "newerKubernetesField"]),
                          json_value, max_size=2)


def obj(required: dict[str, Any] | None = None, optional: dict[str, Any] | None = None) -> st.SearchStrategy:
    """A dict with the given keys (optional ones may be absent) plus unknown keys."""
    known = st.fixed_dictionaries(required or {}, optional=optional or {})
    return st.builds(lambda k, u: {**u, **k}, known, unknown)


def keyed_list(item: st.SearchStrategy, key: str, max_size: int = 3) -> st.SearchStrategy:
    return st.lists(item, max_size=max_size, unique_by=lambda d: d[key])


string_map = st.dictionaries(names, text, max_size=3)
env_var = obj({"name": names}, {"value": text, "valueFrom": obj({}, {"fieldRef": obj({"fieldPath": text})})})
env = keyed_list(env_var, "name")
resources = obj({}, {"requests": st.dictionaries(st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]), quantity),
                     "limits": st.dictionaries(st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]), quantity)})
port = obj({"containerPort": st.integers(1, 65535)}, {"protocol": st.sampled_from(["TCP", "UDP"]), "name": names})
mount = obj({"name": names, "mountPath": st.sampled_from(["/workspace", "/data", "/root/.ssh"])},
            {"readOnly": st.booleans()})
container = obj({"name": names}, {
    "image": text, "command": st.lists(text, max_size=3), "args": st.lists(text, max_size=3), "env": env,
    "resources": resources, "ports": keyed_list(port, "containerPort"), "volumeMounts": keyed_list(mount, "mountPath"),
})
toleration = obj({}, {"key": names, "operator": st.sampled_from(["Exists", "Equal"]), "effect": st.just("NoSchedule")})
volume = obj({"name": names}, {"persistentVolumeClaim": obj({"claimName": names}), "emptyDir": obj()})
pod_spec = obj({}, {
    "containers": keyed_list(container, "name"), "initContainers": keyed_list(container, "name"),
    "volumes": keyed_list(volume, "name"), "nodeSelector": string_map, "tolerations": st.lists(toleration, max_size=2),
    "schedulingGates": keyed_list(obj({"name": names}), "name"), "serviceAccountName": names,
})
template_meta = obj({}, {"labels": string_map, "annotations": string_map})
job_template = obj({}, {"metadata": template_meta, "spec": obj({"template": obj({}, {
    "metadata": template_meta, "spec": pod_spec})}, {"parallelism": small_int, "completions": small_int})})
replicated_job = obj({"name": names, "template": job_template}, {
    "replicas": small_int, "groupName": names,
    "dependsOn": st.lists(obj({"name": names, "status": st.sampled_from(["Ready", "Complete"])}), max_size=1),
})
jobset_spec = obj({}, {"replicatedJobs": keyed_list(replicated_job, "name"), "suspend": st.booleans(),
                       "network": obj({}, {"enableDNSHostnames": st.booleans(), "subdomain": names})})
condition = obj({"type": st.sampled_from(["Complete", "Failed", "Suspended"]),
                 "status": st.sampled_from(["True", "False"])},
                {"reason": names, "message": text, "lastTransitionTime": st.just("2026-01-02T03:04:05Z")})
metadata = obj({"name": names}, {"namespace": names, "labels": string_map, "annotations": string_map,
                                 "uid": names, "resourceVersion": st.just("12"), "generation": small_int})

initializer_source = obj({}, {"storageUri": st.sampled_from(["", "hf://org/ds", "s3://b/p"]), "env": env,
                              "secretRef": obj({"name": names})})
trainer = obj({}, {"image": text, "command": st.lists(text, max_size=3), "args": st.lists(text, max_size=3),
                   "env": env, "numNodes": small_int, "numProcPerNode": small_int, "resourcesPerNode": resources})
pod_spec_patch = obj({}, {
    "serviceAccountName": names, "nodeSelector": string_map, "tolerations": st.lists(toleration, max_size=2),
    "volumes": keyed_list(volume, "name"),
    "containers": keyed_list(obj({"name": names}, {"env": env, "volumeMounts": keyed_list(mount, "mountPath")}),
                             "name"),
    "schedulingGates": keyed_list(obj({"name": names}), "name"),
    "terminationGracePeriodSeconds": small_int,
})
runtime_patch = obj({"manager": st.sampled_from(["kueue.x-k8s.io/manager", "acme.io/platform", "trainguard.io/policy"])},
                    {"time": st.just("2026-01-02T03:04:05Z"), "trainingRuntimeSpec": obj({}, {"template": obj({}, {
                        "metadata": template_meta, "spec": obj({}, {"replicatedJobs": keyed_list(obj(
                            {"name": names}, {"template": obj({}, {"metadata": template_meta, "spec": obj({}, {
                                "template": obj({}, {"metadata": template_meta, "spec": pod_spec_patch})})})}),
                            "name")})})})})
trainjob = obj({"apiVersion": st.just("trainer.kubeflow.org/v1alpha1"), "kind": st.just("TrainJob"),
                "metadata": metadata,
                "spec": obj({"runtimeRef": obj({"name": names}, {
                    "kind": st.sampled_from(["TrainingRuntime", "ClusterTrainingRuntime"]),
                    "apiGroup": st.just("trainer.kubeflow.org")})}, {
                    "initializer": obj({}, {"dataset": initializer_source, "model": initializer_source}),
                    "trainer": trainer, "runtimePatches": keyed_list(runtime_patch, "manager"),
                    "suspend": st.booleans(), "activeDeadlineSeconds": st.integers(1, 10**9),
                    "managedBy": st.sampled_from(["trainer.kubeflow.org/trainjob-controller",
                                                  "kueue.x-k8s.io/multikueue"])})},
               {"status": obj({}, {"conditions": keyed_list(condition, "type"), "jobsStatus": keyed_list(obj(
                   {"name": names, "ready": small_int, "succeeded": small_int, "failed": small_int,
                    "active": small_int, "suspended": small_int}), "name"),
                   "trainerStatus": obj({"lastUpdatedTime": st.just("2026-01-02T03:04:05Z")},
                                        {"progressPercentage": st.integers(0, 100),
                                         "metrics": keyed_list(obj({"name": names, "value": names}), "name")})})})

ml_policy = obj({}, {"numNodes": small_int}) .flatmap(lambda base: st.one_of(
    st.just(base),
    obj({}, {"envInjection": obj({}, {"targets": keyed_list(obj({"jobName": names, "containerNames": st.lists(
        names, min_size=1, max_size=3, unique=True)}), "jobName")})}).map(lambda t: {**base, "torch": t}),
    obj({}, {"numProcPerNode": small_int, "mpiImplementation": st.just("OpenMPI"), "sshAuthMountPath": text,
             "runLauncherAsNode": st.booleans()}).map(lambda m: {**base, "mpi": m}),
    obj().map(lambda j: {**base, "jax": j}),
    obj().map(lambda x: {**base, "xgboost": x}),
    obj({}, {"numProcPerNode": st.integers(1, 8)}).map(lambda f: {**base, "flux": f}),
))
pod_group_policy = st.one_of(
    obj({}, {"coscheduling": obj({}, {"scheduleTimeoutSeconds": small_int})}),
    obj({}, {"volcano": obj({}, {"networkTopology": obj({}, {"mode": st.sampled_from(["hard", "soft"]),
                                                             "highestTierAllowed": small_int})})}),
)
runtime_spec = obj({}, {"mlPolicy": ml_policy, "podGroupPolicy": pod_group_policy,
                        "template": obj({}, {"metadata": template_meta, "spec": jobset_spec})})


def runtime(kind: str) -> st.SearchStrategy:
    return obj({"apiVersion": st.just("trainer.kubeflow.org/v1alpha1"), "kind": st.just(kind),
                "metadata": metadata, "spec": runtime_spec})


jobset = obj({"apiVersion": st.just("jobset.x-k8s.io/v1alpha2"), "kind": st.just("JobSet"), "metadata": metadata,
              "spec": jobset_spec},
             {"status": obj({}, {"conditions": keyed_list(condition, "type"), "restarts": small_int,
                                 "terminalState": st.sampled_from(["Completed", "Failed"]),
                                 "replicatedJobsStatus": keyed_list(obj({"name": names}, {
                                     "ready": small_int, "succeeded": small_int, "failed": small_int,
                                     "active": small_int, "suspended": small_int}), "name")})})
selector = obj({}, {"matchLabels": string_map, "matchExpressions": st.lists(obj(
    {"key": names, "operator": st.sampled_from(["In", "NotIn"])}, {"values": st.lists(names, max_size=2)}),
    max_size=2)})
policy = obj({"apiVersion": st.just("trainguard.io/v1alpha1"), "kind": st.just("TrainJobPolicy"),
              "metadata": metadata,
              "spec": obj({}, {
                  "selector": obj({}, {"namespaceSelector": selector, "trainJobSelector": selector,
                                       "runtimeSelector": obj({}, {"names": st.lists(names, max_size=2, unique=True),
                                                                   "labelSelector": selector})}),
                  "mode": st.sampled_from(["Enforce", "Audit"]), "priority": st.integers(-1000, 1000),
                  "scheduling": obj({}, {"kueue": obj({}, {"queueName": names, "priorityClass": names}),
                                         "kai": obj({}, {"queue": names}), "schedulerName": names}),
                  "topology": obj({"levels": keyed_list(obj({"nodeLabel": names, "gpusPerDomain": st.integers(1, 512)}),
                                                        "nodeLabel")},
                                  {"placement": st.sampled_from(["Required", "Preferred"]),
                                   "target": st.sampled_from(["Kueue", "KAI", "Both"]),
                                   "gpuResourceName": st.just("nvidia.com/gpu")}),
                  "limits": obj({}, {"maxNodes": st.integers(1, 100), "maxTotalGpus": small_int,
                                     "allowedImagePrefixes": st.lists(text, max_size=2, unique=True)}),
                  "defaults": obj({}, {"activeDeadlineSeconds": st.integers(1, 10**6), "labels": string_map,
                                       "nodeSelector": string_map, "tolerations": st.lists(toleration, max_size=2)}),
              })})
cache = obj({"apiVersion": st.just("trainguard.io/v1alpha1"), "kind": st.just("DatasetCache"), "metadata": metadata,
             "spec": obj({"source": st.one_of(
                 obj({"hostPath": obj({"path": st.just("/data")}), "shards": st.just("*.arrow")}),
                 obj({"persistentVolumeClaim": obj({"claimName": names}, {"path": st.just("ds")}),
                      "shards": st.just("train-*.parquet")})),
                 "memoryBudget": quantity}, {"nodeSelector": string_map, "holdTrainersUntilWarm": st.booleans()})},
            {"status": obj({}, {"nodesReady": small_int, "bytesResident": st.integers(0, 2**40)})})


def assert_lossless(model: type, wire: dict[str, Any]) -> None:
    before = copy.deepcopy(wire)
    assert model.parse(wire).dump() == before
    assert wire == before  # parsing never mutates its input


@SETTINGS
@given(trainjob)
def test_trainjob_round_trip(wire):
    assert_lossless(TrainJob, wire)


@SETTINGS
@given(st.one_of(runtime("TrainingRuntime"), runtime("ClusterTrainingRuntime")))
def test_runtime_round_trip(wire):
    assert_lossless(TrainingRuntime if wire["kind"] == "TrainingRuntime" else ClusterTrainingRuntime, wire)


@SETTINGS
@given(jobset)
def test_jobset_round_trip(wire):
    assert_lossless(JobSet, wire)


@SETTINGS
@given(policy)
def test_policy_round_trip(wire):
    assert_lossless(TrainJobPolicy, wire)


@SETTINGS
@given(cache)
def test_dataset_cache_round_trip(wire):
    assert_lossless(DatasetCache, wire)


def test_unknown_fields_survive_a_mutation():
    """Changing one typed field leaves every other (known or unknown) key and list order untouched."""
    wire = {"spec": {"runtimeRef": {"name": "r", "futureField": 1},
                     "trainer": {"numNodes": 2, "env": [{"name": "B", "value": "2"}, {"name": "A", "value": "1"}],
                                 "newerKubernetesField": {"x": [1, 2]}}},
            "futureTopLevel": True}
    job = TrainJob.parse(wire)
    assert job.spec is not None and job.spec.trainer is not None
    job.spec.trainer.num_nodes = 4
    out = job.dump()
    assert out["spec"]["trainer"]["numNodes"] == 4
    out["spec"]["trainer"]["numNodes"] = 2
    assert out == wire
