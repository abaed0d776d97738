"""Read-only views over wire objects: paths, defaults, the runtimeRef rule, no copies, no writes."""

from __future__ import annotations

import copy

import pytest

from trainguard.webhook.api.views import JobSetTemplate, ReplicatedJob, Runtime, TrainJob, patch_template, resolve


@pytest.mark.parametrize(
    "obj, path, expected",
    [
        ({"a": {"b": 1}}, "a.b", 1),
        ({"a": {"b": 0}}, "a.b", 0),  # a falsy value is a value
        ({"a": {"b": ""}}, "a.b", ""),
        ({"a": {}}, "a.b", "dflt"),
        ({"a": None}, "a.b", "dflt"),  # null reads as absent
        ({"a": {"b": None}}, "a.b", "dflt"),
        ({"a": ["b"]}, "a.b", "dflt"),  # not an object on the way: absent
        ({"a": "text"}, "a.b", "dflt"),
        (None, "a", "dflt"),
        ({"x.y": {"z": 2}}, ("x.y", "z"), 2),  # keys with dots go as a sequence
    ],
)
def test_resolve(obj, path, expected):
    assert resolve(obj, path, "dflt") == expected


# Upstream v2.3: the CRD defaults an ABSENT kind/apiGroup; RuntimeRefToRuntimeRegistryKey dereferences what was sent,
# so "" stays "" and keys the registry as GroupKind{group, kind}.String().
@pytest.mark.parametrize(
    "ref, kind, group, key, training, cluster",
    [
        ({"name": "rt"}, "ClusterTrainingRuntime", "trainer.kubeflow.org", "ClusterTrainingRuntime.trainer.kubeflow.org", False, True),
        ({"name": "rt", "kind": None}, "ClusterTrainingRuntime", "trainer.kubeflow.org", "ClusterTrainingRuntime.trainer.kubeflow.org", False, True),
        ({"name": "rt", "kind": "TrainingRuntime"}, "TrainingRuntime", "trainer.kubeflow.org", "TrainingRuntime.trainer.kubeflow.org", True, False),
        ({"name": "rt", "kind": ""}, "", "trainer.kubeflow.org", ".trainer.kubeflow.org", False, False),
        ({"name": "rt", "apiGroup": ""}, "ClusterTrainingRuntime", "", "ClusterTrainingRuntime", False, False),
        ({"name": "rt", "kind": "Other", "apiGroup": "example.com"}, "Other", "example.com", "Other.example.com", False, False),
    ],
    ids=["absent", "null", "training", "empty-kind", "empty-group", "foreign"],
)
def test_runtime_ref_defaults_only_absent_fields(ref, kind, group, key, training, cluster):
    view = TrainJob({"spec": {"runtimeRef": ref}}).runtime_ref
    assert (view.kind, view.api_group, view.registry_key) == (kind, group, key)
    assert (view.is_training_runtime, view.is_cluster_training_runtime) == (training, cluster)
    assert view.as_dict() == {"name": "rt", "apiGroup": group, "kind": kind}


JOB = {
    "name": "node",
    "replicas": 2,
    "template": {
        "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
        "spec": {
            "parallelism": 4,
            "template": {
                "metadata": {"annotations": {"a": "b"}},
                "spec": {
                    "initContainers": [{"name": "init", "image": "busybox"}],
                    "containers": [{"name": "node", "image": "pytorch", "command": ["torchrun"], "env": [{"name": "X"}]}],
                },
            },
        },
    },
}
RUNTIME = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1",
    "kind": "ClusterTrainingRuntime",
    "metadata": {"name": "torch", "labels": {"l": "v"}},
    "spec": {"mlPolicy": {"numNodes": 3, "torch": {}}, "podGroupPolicy": {"volcano": {}},
             "template": {"metadata": {"labels": {"team": "a"}}, "spec": {"replicatedJobs": [JOB]}}},
}


def test_replicated_job_down_to_the_containers():
    rj = ReplicatedJob(JOB)
    assert (rj.name, rj.replicas, rj.ancestor, rj.parallelism) == ("node", 2, "trainer", 4)
    assert rj.pod_spec is JOB["template"]["spec"]["template"]["spec"]
    assert rj.pod_metadata.annotations == {"a": "b"}
    assert [c.name for c in rj.containers()] == ["node"] and [c.name for c in rj.containers(init=True)] == ["init"]
    node = rj.container("node")
    assert node is not None and (node.image, node.command, node.env) == ("pytorch", ["torchrun"], [{"name": "X"}])
    assert rj.container("init") is None and rj.container("init", init=True) is not None
    assert rj.container_names() == {"init", "node"}


def test_an_empty_replicated_job_reads_as_defaults():
    rj = ReplicatedJob({})
    assert (rj.name, rj.replicas, rj.ancestor, rj.parallelism, dict(rj.pod_spec), rj.containers()) == ("", 1, None, None, {}, [])


@pytest.mark.parametrize("kind", ["TrainingRuntime", "ClusterTrainingRuntime"])
def test_one_runtime_view_for_both_kinds(kind):
    rt = Runtime({**RUNTIME, "kind": kind})
    assert rt.kind == kind and rt.metadata.name == "torch" and rt.metadata.labels == {"l": "v"}
    assert (rt.num_nodes, rt.ml_policy_source("torch"), rt.ml_policy_source("mpi")) == (3, {}, None)
    assert (rt.pod_group_policy_source("volcano"), rt.pod_group_policy_source("coscheduling")) == ({}, None)
    assert rt.template.metadata.labels == {"team": "a"}
    assert [j.name for j in rt.template.replicated_jobs()] == ["node"] and rt.template.job("node").raw is JOB


def test_a_runtime_patch_template_is_read_like_a_runtime_template():
    patch = {"manager": "x.io/m", "trainingRuntimeSpec": {"template": RUNTIME["spec"]["template"]}}
    assert isinstance(patch_template(patch), JobSetTemplate)
    assert patch_template(patch).job("node").container("node").image == "pytorch"
    assert patch_template({"manager": "x.io/m"}).replicated_jobs() == []


def test_trainjob_fields():
    tj = TrainJob({
        "metadata": {"name": "j", "namespace": "ns", "uid": "u", "annotations": {"k": "v"}},
        "spec": {"runtimeRef": {"name": "rt"}, "suspend": True, "managedBy": "m", "activeDeadlineSeconds": 9,
                 "trainer": {"numNodes": 0, "numProcPerNode": "auto", "image": "i", "command": ["c"], "args": ["a"],
                             "env": [{"name": "E"}], "resourcesPerNode": {"limits": {"nvidia.com/gpu": 1}}},
                 "initializer": {"dataset": {"storageUri": "hf://x"}},
                 "runtimePatches": [{"manager": "x.io/m"}]},
        "status": {"conditions": [{"type": "Complete", "status": "True"}]},
    })
    assert (tj.metadata.name, tj.metadata.namespace, tj.metadata.uid, tj.metadata.annotations) == ("j", "ns", "u", {"k": "v"})
    assert (tj.suspend, tj.managed_by, tj.active_deadline_seconds, tj.has_trainer) == (True, "m", 9, True)
    t = tj.trainer
    assert (t.num_nodes, t.num_proc_per_node, t.image, t.command, t.args, t.env) == (0, "auto", "i", ["c"], ["a"], [{"name": "E"}])
    assert t.resources_per_node == {"limits": {"nvidia.com/gpu": 1}}
    assert (tj.initializer("dataset"), tj.initializer("model")) == ({"storageUri": "hf://x"}, None)
    assert tj.runtime_patches == [{"manager": "x.io/m"}] and tj.conditions[0]["type"] == "Complete"


def test_a_trainjob_without_trainer():
    tj = TrainJob({"spec": {"runtimeRef": {"name": "rt"}}})
    assert not tj.has_trainer
    assert (tj.trainer.num_nodes, tj.trainer.env, tj.trainer.command, tj.suspend, tj.runtime_patches) == (None, [], None, False, [])


def test_views_neither_copy_nor_write():
    obj = copy.deepcopy(RUNTIME)
    before = copy.deepcopy(obj)
    rt = Runtime(obj)
    assert rt.raw is obj and rt.template.job("node").raw is obj["spec"]["template"]["spec"]["replicatedJobs"][0]
    # Reading what is not there creates nothing (unlike the draft's writers, which create the path they write).
    empty = {"name": "x"}
    ReplicatedJob(empty).pod_spec, ReplicatedJob(empty).containers(), ReplicatedJob(empty).pod_metadata.labels
    assert empty == {"name": "x"}
    assert obj == before
    with pytest.raises(AttributeError):
        rt.anything = 1  # views hold nothing but the object they wrap


# Code that edits a TrainJob's spec in place (MultiKueue's managedBy, the kept policy runtimePatch) asks first
# whether there is one: only an object counts.
@pytest.mark.parametrize(
    "obj, expected",
    [({}, False), ({"spec": None}, False), ({"spec": []}, False), ({"spec": "x"}, False), ({"spec": {}}, True),
     ({"spec": {"runtimeRef": {"name": "rt"}}}, True)],
    ids=["absent", "null", "list", "string", "empty", "present"],
)
def test_trainjob_has_spec(obj, expected):
    assert TrainJob(obj).has_spec is expected


# The runtimePatches list as the rules iterate it: anything but a list reads as no patches (the door check refuses
# it before a rule runs; the policy and timestamp steps must not fail on it).
@pytest.mark.parametrize(
    "spec, expected",
    [({}, []), ({"runtimePatches": None}, []), ({"runtimePatches": {"manager": "m"}}, []),
     ({"runtimePatches": "m"}, []), ({"runtimePatches": []}, []),
     ({"runtimePatches": [{"manager": "m"}, None]}, [{"manager": "m"}, None])],
    ids=["absent", "null", "object", "string", "empty", "present"],
)
def test_trainjob_runtime_patches(spec, expected):
    assert TrainJob({"spec": spec}).runtime_patches == expected
