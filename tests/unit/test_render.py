"""``trainguard render`` on the worked examples (examples/), plus its exit statuses."""

from __future__ import annotations

import io
import json
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml

from trainguard.webhook.render import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NOW = datetime(2026, 9, 1, 12, 0, 0, tzinfo=timezone.utc)


def render(*files, **kw):
    out, err = io.StringIO(), io.StringIO()
    code = main([str(f) for f in files], now=NOW, stdout=out, stderr=err, **kw)
    return code, list(yaml.safe_load_all(out.getvalue())), err.getvalue()


def by_kind(objects, kind):
    return [o for o in objects if o["kind"] == kind]


def test_torch_multi_node_gpu_prints_the_reference_jobset():
    code, objects, err = render(EXAMPLES / "torch-distributed-gpu.yaml")
    assert code == 0 and err == ""
    assert [o["kind"] for o in objects] == ["TrainJob", "JobSet", "ConfigMap"]
    jobset = objects[1]
    assert jobset["metadata"]["name"] == "llm-ddp" and jobset["metadata"]["namespace"] == "team-a"
    assert jobset["metadata"]["ownerReferences"][0]["kind"] == "TrainJob"
    assert jobset["spec"]["suspend"] is False
    (node,) = jobset["spec"]["replicatedJobs"]
    assert node["replicas"] == 1
    assert node["template"]["spec"]["parallelism"] == node["template"]["spec"]["completions"] == 4
    (container,) = node["template"]["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "ghcr.io/acme/train:1.0"
    assert container["command"] == ["torchrun", "/app/train.py"] and container["args"] == ["--epochs=3"]
    assert container["ports"] == [{"containerPort": 29500}]
    assert [(e["name"], e.get("value")) for e in container["env"]] == [
        ("NCCL_DEBUG", "INFO"), ("PET_NNODES", "4"), ("PET_NPROC_PER_NODE", "auto"), ("PET_NODE_RANK", None),
        ("PET_MASTER_ADDR", "llm-ddp-node-0-0.llm-ddp"), ("PET_MASTER_PORT", "29500")]
    snapshot = objects[2]
    # Where the controller keeps it: its own namespace, named from the TrainJob's UID (a placeholder here), JSON.
    assert snapshot["metadata"]["name"] == "runtime-snapshot-00000000-0000-0000-0000-000000000000"
    assert snapshot["metadata"]["namespace"] == "trainguard-system"
    assert snapshot["metadata"]["labels"]["trainguard.io/runtime-snapshot-of-name"] == "llm-ddp"
    assert json.loads(snapshot["data"]["runtime.json"])["kind"] == "ClusterTrainingRuntime"


def test_snapshot_namespace_flag_places_the_snapshot():
    code, objects, err = render(EXAMPLES / "torch-distributed-gpu.yaml", snapshot_namespace="ops")
    assert code == 0, err
    assert by_kind(objects, "ConfigMap")[-1]["metadata"]["namespace"] == "ops"


def test_plain_ml_with_initializer_coscheduling_and_patch():
    code, objects, err = render(EXAMPLES / "plain-batch-initializer.yaml")
    assert code == 0, err
    trainjob, jobset, podgroup = objects[0], by_kind(objects, "JobSet")[0], by_kind(objects, "PodGroup")[0]
    assert trainjob["spec"]["runtimePatches"][0]["time"] == "2026-09-01T12:00:00Z"
    assert jobset["metadata"]["labels"] == {"team": "a"}
    init, node = jobset["spec"]["replicatedJobs"]
    for rj in (init, node):
        assert rj["template"]["spec"]["template"]["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "tab-train"
    init_container = init["template"]["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "STORAGE_URI", "value": "hf://tatsu-lab/alpaca"} in init_container["env"]
    assert {"name": "IGNORE_PATTERNS", "value": "*.md"} in init_container["env"]
    assert init_container["envFrom"] == [{"secretRef": {"name": "hf-token"}}]
    assert node["template"]["spec"]["parallelism"] == 3
    assert node["template"]["spec"]["template"]["spec"]["nodeSelector"] == {"pool": "cpu-large"}
    assert podgroup["spec"] == {"minMember": 4, "minResources": {"cpu": "13", "memory": "24Gi"},
                                "scheduleTimeoutSeconds": 120}


def test_policy_example_admits_with_topology_hint():
    code, objects, err = render(EXAMPLES / "torch-distributed-gpu.yaml", EXAMPLES / "gpu-topology-policy.yaml")
    assert code == 0, err
    trainjob = objects[0]
    assert trainjob["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-gpu"
    assert trainjob["spec"]["suspend"] is True
    (patch,) = trainjob["spec"]["runtimePatches"]
    assert patch["manager"] == "trainguard.io/policy"
    jobset = by_kind(objects, "JobSet")[0]
    pod = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    assert pod["metadata"]["annotations"]["kueue.x-k8s.io/podset-required-topology"] == "nvidia.com/gpu.clique"
    assert jobset["spec"]["suspend"] is True


def test_denial_exits_1_with_the_message(tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text((EXAMPLES / "torch-distributed-gpu.yaml").read_text().replace("numNodes: 4", "numNodes: 100"))
    code, objects, err = render(job, EXAMPLES / "gpu-topology-policy.yaml")
    assert code == 1 and objects == []
    assert 'TrainJob "team-a/llm-ddp"' in err and "denied" in err
    assert "800 nvidia.com/gpu in total (100 nodes x 8), more than maxTotalGpus 512" in err


def test_a_pinned_priority_class_is_denied_offline_as_at_apply(tmp_path):
    """Issue 22: render runs the webhook's pipeline, so a priority class the Enforce policy does not allow is
    denied here with the same message as at kubectl apply, and the policy's own value is admitted."""
    text = (EXAMPLES / "torch-distributed-gpu.yaml").read_text()
    assert "metadata: {name: llm-ddp, namespace: team-a}" in text
    job = tmp_path / "job.yaml"
    labelled = "metadata: {name: llm-ddp, namespace: team-a, labels: {kueue.x-k8s.io/priority-class: %s}}"
    job.write_text(text.replace("metadata: {name: llm-ddp, namespace: team-a}", labelled % "top"))
    code, objects, err = render(job, EXAMPLES / "gpu-topology-policy.yaml")
    assert code == 1 and objects == []
    assert ('metadata.labels[kueue.x-k8s.io/priority-class]: Invalid value: "top": TrainJobPolicy "gpu-teams" '
            'allows only ["standard"] (spec.scheduling.kueue.priorityClass); leave the label out to get "standard"'
            in err), err
    job.write_text(text.replace("metadata: {name: llm-ddp, namespace: team-a}", labelled % "standard"))
    code, objects, err = render(job, EXAMPLES / "gpu-topology-policy.yaml")
    assert code == 0, err


def test_warnings_go_to_stderr(tmp_path):
    audit = tmp_path / "audit.yaml"
    audit.write_text((EXAMPLES / "gpu-topology-policy.yaml").read_text().replace("mode: Enforce", "mode: Audit")
                     .replace("ghcr.io/acme/]", "quay.io/other/]"))
    code, objects, err = render(EXAMPLES / "torch-distributed-gpu.yaml", audit)
    assert code == 0 and objects
    assert err.startswith("Warning: spec.trainer.image:") and "Audit mode: allowed" in err


@pytest.mark.parametrize(("text", "where", "what"), [
    ("apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n", ":1", "unknown kind 'Pod'"),
    ("apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: a}\n---\n\nkind: Deployment\n"
     "metadata: {name: b}\n", ":6",
     "unknown kind 'Deployment'"),
    ("kind: TrainJob\nmetadata: {name: a\nspec: [\n", ":3", "not valid YAML"),
])
def test_unreadable_input_exits_2_naming_file_and_line(tmp_path, text, where, what):
    f = tmp_path / "in.yaml"
    f.write_text(text)
    code, objects, err = render(f)
    assert code == 2 and objects == []
    assert f"{f}{where}" in err and what in err


def test_missing_file_exits_2(tmp_path):
    code, _, err = render(tmp_path / "nope.yaml")
    assert code == 2 and "nope.yaml: cannot read" in err


def test_update_operation_keeps_unchanged_patch_time(tmp_path):
    old = tmp_path / "old.yaml"
    code, objects, _ = render(EXAMPLES / "plain-batch-initializer.yaml")
    stored = objects[0]
    stored["spec"]["runtimePatches"][0]["time"] = "2026-01-01T00:00:00Z"
    old.write_text(yaml.safe_dump(stored))
    code, objects, err = render(EXAMPLES / "plain-batch-initializer.yaml", operation="UPDATE", old=str(old))
    assert code == 0, err
    assert objects[0]["spec"]["runtimePatches"][0]["time"] == "2026-01-01T00:00:00Z"


def test_broken_runtime_in_input_is_denied(tmp_path):
    f = tmp_path / "rt.yaml"
    f.write_text((EXAMPLES / "torch-distributed-gpu.yaml").read_text().replace("- name: node\n", "- name: node\n        replicas: 2\n", 1))
    code, _, err = render(f)
    assert code == 1 and "spec.template.spec.replicatedJobs[0].replicas: Invalid value: 2: always must be 1" in err


def test_cli_entry_point_is_wired():
    from trainguard.webhook.cli import build_parser

    args = build_parser().parse_args(["render", "-f", str(EXAMPLES / "torch-distributed-gpu.yaml"),
                                      "--now", "2026-09-01T12:00:00Z"])
    assert args.files and args.now == NOW


@pytest.mark.parametrize("kind, validated", [("ClusterTrainingRuntime", False), ("TrainingRuntime", True)])
def test_upstream_opt_out_label_skips_only_admin_written_runtimes(tmp_path, kind, validated):
    # As the webhook's registration: a namespace user's TrainingRuntime is validated whatever its labels say.
    text = (EXAMPLES / "torch-distributed-gpu.yaml").read_text()
    runtime = text.split("\n---\n")[0] if "\n---\n" in text else text.split("---")[0]
    runtime = runtime.replace("- name: node\n", "- name: node\n        replicas: 2\n", 1)
    runtime = runtime.replace("kind: ClusterTrainingRuntime", f"kind: {kind}")
    runtime = runtime.replace("metadata: {name: torch-distributed, labels: {",
                              "metadata: {name: torch-distributed, namespace: team-a, labels: {"
                              "trainer.kubeflow.org/webhook-validation: disabled, ")
    f = tmp_path / "rt.yaml"
    f.write_text(runtime)
    code, _, err = render(f)
    refused = "spec.template.spec.replicatedJobs[0].replicas: Invalid value: 2: always must be 1" in err
    assert (code, refused) == ((1, True) if validated else (0, False)), err
