"""Worked example 4.3: PlainML + dataset initializer + coscheduling + runtimePatches; PodGroup sizing."""

from __future__ import annotations

from trainguard.webhook.runtime import ExistingObjects, build_objects, effective_job, placeholder_keys, validate_trainjob

from .fixtures import PLAIN_BATCH, TAB_TRAIN, container, deep, env_map, pod, rjob, single_job_runtime, trainjob


def objects(tj=TAB_TRAIN, rt=PLAIN_BATCH, **kw):
    return build_objects(tj, rt, keys=placeholder_keys(), **kw)


def test_worked_example_4_3_jobset():
    js, pg = objects()
    assert js["metadata"]["labels"] == {"team": "a"}
    init, node = rjob(js, "dataset-initializer"), rjob(js, "node")
    for rj in (init, node):
        assert rj["template"]["spec"]["template"]["metadata"]["labels"] == {"scheduling.x-k8s.io/pod-group": "tab-train"}
        assert rj["replicas"] == 1
    assert (init["template"]["spec"]["parallelism"], init["template"]["spec"]["completions"]) == (1, 1)
    assert (node["template"]["spec"]["parallelism"], node["template"]["spec"]["completions"]) == (3, 3)
    ic = container(init, "dataset-initializer")
    assert env_map(ic) == {"STORAGE_URI": "hf://tatsu-lab/alpaca", "IGNORE_PATTERNS": "*.md"}
    assert ic["envFrom"] == [{"secretRef": {"name": "hf-token"}}]
    nc = container(node)
    assert env_map(nc) == {"EPOCHS": "5"}  # no framework env
    assert pod(node)["nodeSelector"] == {"pool": "cpu-large"}
    assert "nodeSelector" not in pod(init)
    assert node["dependsOn"] == [{"name": "dataset-initializer", "status": "Complete"}]


def test_worked_example_4_3_podgroup():
    _, pg = objects()
    assert pg == {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {
            "name": "tab-train",
            "namespace": "team-a",
            "ownerReferences": [
                {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "tab-train", "uid": "tab-uid", "controller": True, "blockOwnerDeletion": True}
            ],
        },
        "spec": {"minMember": 4, "minResources": {"cpu": "13", "memory": "24Gi"}, "scheduleTimeoutSeconds": 120},
    }


def test_upstream_unit_analogue_num_nodes_overrides_runtime():
    rt = deep(PLAIN_BATCH)
    rt["spec"]["mlPolicy"]["numNodes"] = 100
    rt["spec"]["template"]["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    # upstream's default test runtime: dataset-initializer + model-initializer + node, 1 CPU each
    model_init = deep(rt["spec"]["template"]["spec"]["replicatedJobs"][0])
    model_init["name"] = "model-initializer"
    model_init["template"]["metadata"]["labels"]["trainer.kubeflow.org/trainjob-ancestor-step"] = "model-initializer"
    model_init["template"]["spec"]["template"]["spec"]["containers"][0]["name"] = "model-initializer"
    rt["spec"]["template"]["spec"]["replicatedJobs"].insert(1, model_init)
    tj = deep(TAB_TRAIN)
    tj["spec"]["trainer"]["numNodes"] = 30
    pg = objects(tj, rt)[1]
    assert pg["spec"] == {"minMember": 32, "minResources": {"cpu": "32"}, "scheduleTimeoutSeconds": 120}


def test_runtime_num_nodes_used_without_override():
    tj = deep(TAB_TRAIN)
    del tj["spec"]["trainer"]["numNodes"]
    job = effective_job(tj, PLAIN_BATCH)
    assert job.pod_set("node").count == 2 and job.num_nodes == 2 and job.ml_policy == "plain"


def test_limit_only_gpu_counts_in_podgroup():
    rt = single_job_runtime(None, container={"name": "node", "image": "i", "resources": {"limits": {"nvidia.com/gpu": 2}}},
                            pod_group={"coscheduling": {}})
    pg = objects(trainjob(trainer={"numNodes": 2}), rt)[1]
    assert pg["spec"]["minResources"] == {"nvidia.com/gpu": "4"}
    assert pg["spec"]["scheduleTimeoutSeconds"] == 60


def test_podgroup_frozen_unless_suspended():
    assert [o["kind"] for o in objects(existing=ExistingObjects(podgroup=True))] == ["JobSet"]
    suspended = deep(TAB_TRAIN)
    suspended["spec"]["suspend"] = True
    assert [o["kind"] for o in objects(suspended, existing=ExistingObjects(podgroup=True))] == ["JobSet", "PodGroup"]


def test_example_passes_validation():
    assert validate_trainjob(TAB_TRAIN, None, PLAIN_BATCH, None) == ([], [])
