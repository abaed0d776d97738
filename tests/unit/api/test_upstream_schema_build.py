"""What trainguard admits and builds for the objects upstream's CRDs store and trainguard's used to refuse.

``trainguard render`` runs the admission pipeline (door check, mutating and validating TrainJob webhooks) and the
build on files: a runtimePatch whose templates carry ``metadata.name`` (and namespace, finalizers) is admitted and
merged as upstream's strategic merge does (the JobSet keeps its own name; a replicatedJob's and a pod template's
metadata are merged as sent); an MPI runtime with ``numProcPerNode: 0`` builds 0 slots, as upstream v2.3 does (only a
value of 1 is raised to the GPU count).
"""

from __future__ import annotations

import io
import json
from datetime import datetime, timezone

import pytest
import yaml

from trainguard.webhook.render import main

NOW = datetime(2026, 9, 1, 12, 0, 0, tzinfo=timezone.utc)
ANCESTOR = {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}


def render(tmp_path, *objects):
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    out, err = io.StringIO(), io.StringIO()
    code = main([str(path)], now=NOW, stdout=out, stderr=err)
    return code, [o for o in yaml.safe_load_all(out.getvalue()) if o], err.getvalue()


def torch_runtime():
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
            "metadata": {"name": "rt"},
            "spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "template": {
                "metadata": {"labels": {"team": "a"}},
                "spec": {"replicatedJobs": [{"name": "node", "template": {
                    "metadata": {"labels": ANCESTOR},
                    "spec": {"template": {"metadata": {"labels": {"app": "t"}},
                                          "spec": {"containers": [{"name": "node", "image": "x"}]}}}}}]}}}}


def mpi_runtime(num_proc_per_node):
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
            "metadata": {"name": "mpi"},
            "spec": {"mlPolicy": {"numNodes": 1, "mpi": {"numProcPerNode": num_proc_per_node}}, "template": {
                "spec": {"replicatedJobs": [
                    {"name": "launcher", "template": {"spec": {"template": {"spec": {
                        "containers": [{"name": "node", "image": "mpi"}]}}}}},
                    {"name": "node", "template": {"metadata": {"labels": ANCESTOR}, "spec": {"template": {"spec": {
                        "containers": [{"name": "node", "image": "mpi",
                                        "resources": {"limits": {"nvidia.com/gpu": 4}}}]}}}}}]}}}}


def trainjob(runtime, **spec):
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": "job", "namespace": "ns"},
            "spec": {"runtimeRef": {"name": runtime}, **spec}}


def test_patch_template_metadata_names_are_admitted_and_merged_as_upstream(tmp_path):
    patch = {"manager": "acme.io/platform", "trainingRuntimeSpec": {"template": {
        "metadata": {"name": "js", "namespace": "other", "labels": {"p": "1"}},
        "spec": {"replicatedJobs": [{"name": "node", "template": {
            "metadata": {"name": "j", "namespace": "elsewhere", "finalizers": ["acme.io/f"]},
            "spec": {"template": {"metadata": {"name": "pod", "labels": {"q": "2"}}}}}}]}}}}
    code, objects, err = render(tmp_path, torch_runtime(), trainjob("rt", runtimePatches=[patch]))
    assert code == 0, err
    (jobset,) = [o for o in objects if o["kind"] == "JobSet"]
    # Only labels and annotations of the patch's JobSet metadata reach the JobSet: its name is the TrainJob's.
    assert jobset["metadata"]["name"] == "job" and jobset["metadata"]["namespace"] == "ns"
    assert jobset["metadata"]["labels"]["p"] == "1" and jobset["metadata"]["labels"]["team"] == "a"
    (node,) = jobset["spec"]["replicatedJobs"]
    assert node["template"]["metadata"]["name"] == "j"
    assert node["template"]["metadata"]["namespace"] == "elsewhere"
    assert node["template"]["metadata"]["finalizers"] == ["acme.io/f"]
    assert node["template"]["metadata"]["labels"] == ANCESTOR
    pod_meta = node["template"]["spec"]["template"]["metadata"]
    assert pod_meta["name"] == "pod" and pod_meta["labels"]["q"] == "2" and pod_meta["labels"]["app"] == "t"


@pytest.mark.parametrize("runtime_value, override, slots", [
    (0, None, "0"),   # upstream: only a runtime value of exactly 1 is replaced by the GPU count
    (1, None, "4"),   # 1 and 4 GPUs per node -> 4 slots
    (3, None, "3"),
    (0, 2, "2"),      # trainer.numProcPerNode wins
])
def test_mpi_slots_follow_upstream(tmp_path, runtime_value, override, slots):
    trainer = {"numNodes": 2} if override is None else {"numNodes": 2, "numProcPerNode": override}
    code, objects, err = render(tmp_path, mpi_runtime(runtime_value), trainjob("mpi", trainer=trainer))
    assert code == 0, err
    (jobset,) = [o for o in objects if o["kind"] == "JobSet"]
    launcher = next(rj for rj in jobset["spec"]["replicatedJobs"] if rj["name"] == "launcher")
    env = {e["name"]: e.get("value") for e in launcher["template"]["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["OMPI_MCA_orte_set_default_slots"] == slots
    hostfile = next(o for o in objects if o["kind"] == "ConfigMap" and "hostfile" in (o.get("data") or {}))
    assert hostfile["data"]["hostfile"] == "".join(f"job-node-0-{i}.job slots={slots}\n" for i in range(2))
    assert json.dumps(objects)  # everything rendered is plain JSON
