"""Strategic merge semantics, the runtimePatches layer and the trainer layer."""

from __future__ import annotations

import pytest

from trainguard.webhook.runtime.merge import (
    MergeError,
    merge_resources,
    merge_runtime_patches,
    merge_template_metadata,
    override_container,
    strategic_merge,
    upsert,
    upsert_ports,
)

POD = {
    "containers": [
        {
            "name": "node",
            "image": "a",
            "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
            "volumeMounts": [{"name": "v", "mountPath": "/data"}],
            "ports": [{"containerPort": 80}],
            "args": ["x", "y"],
        },
        {"name": "side", "image": "s"},
    ],
    "tolerations": [{"key": "a", "operator": "Exists"}],
    "nodeSelector": {"zone": "z1"},
    "volumes": [{"name": "v", "emptyDir": {}}],
}


@pytest.mark.parametrize(
    "patch, check",
    [
        # containers merge by name, env by name (in place), others kept
        (
            {"containers": [{"name": "node", "env": [{"name": "B", "value": "9"}, {"name": "C", "value": "3"}]}]},
            lambda r: r["containers"][0]["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "9"}, {"name": "C", "value": "3"}]
            and r["containers"][1] == {"name": "side", "image": "s"},
        ),
        # a new container is appended
        ({"containers": [{"name": "new", "image": "n"}]}, lambda r: [c["name"] for c in r["containers"]] == ["node", "side", "new"]),
        # volumeMounts merge by mountPath
        (
            {"containers": [{"name": "node", "volumeMounts": [{"name": "w", "mountPath": "/data"}, {"name": "x", "mountPath": "/x"}]}]},
            lambda r: r["containers"][0]["volumeMounts"] == [{"name": "w", "mountPath": "/data"}, {"name": "x", "mountPath": "/x"}],
        ),
        # ports merge by containerPort
        (
            {"containers": [{"name": "node", "ports": [{"containerPort": 80, "name": "http"}, {"containerPort": 81}]}]},
            lambda r: r["containers"][0]["ports"] == [{"containerPort": 80, "name": "http"}, {"containerPort": 81}],
        ),
        # tolerations are replaced, not merged
        ({"tolerations": [{"key": "b", "operator": "Exists"}]}, lambda r: r["tolerations"] == [{"key": "b", "operator": "Exists"}]),
        # args (no merge key) replaced
        ({"containers": [{"name": "node", "args": ["z"]}]}, lambda r: r["containers"][0]["args"] == ["z"]),
        # maps merged
        ({"nodeSelector": {"pool": "p"}}, lambda r: r["nodeSelector"] == {"zone": "z1", "pool": "p"}),
        # null deletes a key
        ({"nodeSelector": {"zone": None}}, lambda r: r["nodeSelector"] == {}),
        # $patch: delete removes a list item
        ({"containers": [{"name": "side", "$patch": "delete"}]}, lambda r: [c["name"] for c in r["containers"]] == ["node"]),
        # volumes by name; imagePullSecrets, schedulingGates by name
        (
            {"volumes": [{"name": "v", "emptyDir": {"medium": "Memory"}}], "schedulingGates": [{"name": "g"}], "imagePullSecrets": [{"name": "r"}]},
            lambda r: r["volumes"] == [{"name": "v", "emptyDir": {"medium": "Memory"}}] and r["schedulingGates"] == [{"name": "g"}],
        ),
    ],
)
def test_strategic_merge(patch, check):
    before = repr(POD)
    assert check(strategic_merge(POD, patch))
    assert repr(POD) == before  # never mutates its input


def test_keyed_list_item_without_key_is_an_error():
    with pytest.raises(MergeError, match="containers"):
        strategic_merge(POD, {"containers": [{"image": "x"}]})


def _job(name, **pod):
    return {"name": name, "template": {"spec": {"template": {"spec": {"containers": [{"name": "node"}], **pod}}}}}


def _patch(manager, *jobs, labels=None):
    template = {"spec": {"replicatedJobs": list(jobs)}}
    if labels:
        template["metadata"] = {"labels": labels}
    return {"manager": manager, "trainingRuntimeSpec": {"template": template}}


def test_patches_apply_in_order_later_wins_and_job_order_is_kept():
    spec = {"replicatedJobs": [_job("init"), _job("node")]}
    patches = [
        _patch("a.io/x", {"name": "node", "template": {"spec": {"template": {"spec": {"nodeSelector": {"pool": "a"}}}}}}),
        _patch("b.io/x", {"name": "node", "template": {"spec": {"template": {"spec": {"nodeSelector": {"pool": "b"}}}}}},
               {"name": "init", "template": {"spec": {"template": {"spec": {"nodeSelector": {"pool": "i"}}}}}}),
    ]
    merged = merge_runtime_patches(spec, patches)
    assert [rj["name"] for rj in merged["replicatedJobs"]] == ["init", "node"]
    assert merged["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]["nodeSelector"] == {"pool": "b"}
    assert merged["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["nodeSelector"] == {"pool": "i"}
    assert spec == {"replicatedJobs": [_job("init"), _job("node")]}


def test_depends_on_merges_by_name():
    spec = {"replicatedJobs": [{**_job("node"), "dependsOn": [{"name": "init", "status": "Complete"}]}]}
    merged = merge_runtime_patches(spec, [_patch("a.io/x", {"name": "node", "dependsOn": [{"name": "init", "status": "Ready"}]})])
    assert merged["replicatedJobs"][0]["dependsOn"] == [{"name": "init", "status": "Ready"}]


def test_metadata_later_patch_wins():
    labels, annotations = merge_template_metadata(
        {"labels": {"team": "a", "x": "runtime"}},
        [_patch("a.io/x", labels={"x": "first"}), _patch("b.io/x", labels={"x": "second"})],
    )
    assert labels == {"team": "a", "x": "second"} and annotations == {}


def test_resources_merge_per_resource():
    c = {"name": "node", "resources": {"requests": {"cpu": "4"}, "limits": {"nvidia.com/gpu": 8}}}
    out = merge_resources(c, {"requests": {"memory": "8Gi"}, "limits": {"cpu": "8"}})
    assert out["resources"] == {"requests": {"cpu": "4", "memory": "8Gi"}, "limits": {"nvidia.com/gpu": 8, "cpu": "8"}}


def test_override_container_replaces_and_upserts():
    c = {"name": "node", "image": "a", "command": ["a"], "args": ["1"], "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "1"}]}
    out = override_container(c, image="b", command=["b"], args=["2"], env=[{"name": "Y", "value": "2"}, {"name": "Z", "value": "3"}])
    assert out == {
        "name": "node",
        "image": "b",
        "command": ["b"],
        "args": ["2"],
        "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}, {"name": "Z", "value": "3"}],
    }
    assert override_container(c) == c


def test_upsert_helpers():
    assert upsert([{"name": "a", "v": 1}], [{"name": "a", "v": 2}, {"name": "b"}], "name") == [{"name": "a", "v": 2}, {"name": "b"}]
    assert upsert_ports([{"containerPort": 1, "name": "x"}], [{"containerPort": 2, "name": "x"}]) == [{"containerPort": 2, "name": "x"}]


# -- patches are typed upstream: nulls and $-directives are inert (review fix) ---------------------------------


def test_runtime_patch_delete_directive_cannot_remove_a_runtime_container_or_job():
    spec = {"replicatedJobs": [_job("init"), _job("node", nodeSelector={"pool": "a"})]}
    patches = [
        _patch("a.io/x", {"name": "node", "template": {"spec": {"template": {"spec": {"containers": [{"name": "node", "$patch": "delete"}]}}}}}),
        _patch("b.io/x", {"name": "init", "$patch": "delete"}),
        _patch("c.io/x", {"name": "node", "template": {"spec": {"template": {"$patch": "replace", "spec": {"hostNetwork": True}}}}}),
    ]
    merged = merge_runtime_patches(spec, patches)
    assert [rj["name"] for rj in merged["replicatedJobs"]] == ["init", "node"]
    node_pod = merged["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]
    assert node_pod == {"containers": [{"name": "node"}], "nodeSelector": {"pool": "a"}, "hostNetwork": True}


def test_runtime_patch_null_values_do_not_delete():
    spec = {"replicatedJobs": [_job("node", nodeSelector={"pool": "a"}, tolerations=[{"key": "gpu"}])]}
    patch = _patch("a.io/x", {"name": "node", "template": {"spec": {"template": {"spec": {
        "nodeSelector": {"pool": None, "zone": "z"}, "tolerations": None}}}}})
    pod = merge_runtime_patches(spec, [patch])["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"pool": "a", "zone": "z"}
    assert pod["tolerations"] == [{"key": "gpu"}]


def test_resources_per_node_null_keeps_runtime_resources_and_claims_merge_by_name():
    c = {"name": "node", "resources": {"limits": {"nvidia.com/gpu": 8}, "claims": [{"name": "gpu", "request": "a"}]}}
    out = merge_resources(c, {"limits": None, "requests": {"cpu": "2"}, "claims": [{"name": "gpu", "request": "b"}, {"name": "nic"}]})
    assert out["resources"] == {
        "limits": {"nvidia.com/gpu": 8},
        "claims": [{"name": "gpu", "request": "b"}, {"name": "nic"}],
        "requests": {"cpu": "2"},
    }
    assert c["resources"]["claims"] == [{"name": "gpu", "request": "a"}]


def test_patch_added_job_is_restored_after_runtime_jobs():
    spec = {"replicatedJobs": [_job("a"), _job("b"), _job("c")]}
    patches = [_patch("a.io/x", {"name": "extra"}, {"name": "c", "template": {"metadata": {"labels": {"x": "1"}}}}, {"name": "a"})]
    merged = merge_runtime_patches(spec, patches)
    assert [rj["name"] for rj in merged["replicatedJobs"]] == ["a", "b", "c", "extra"]


def test_upsert_env_value_from_replaces_value_wholesale():
    out = upsert([{"name": "X", "value": "1"}], [{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}], "name")
    assert out == [{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
