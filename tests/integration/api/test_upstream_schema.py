"""What users hit where trainguard's CRDs used to differ from upstream Kubeflow Trainer v2.3's, through the real
apiserver with ``kubectl apply`` and trainguard's webhooks registered: the answers are now upstream's.

Each case is applied as a user would (``kubectl apply``): a TrainJob whose runtimePatch repeats a volumeMount name
or an imagePullSecret is refused with 422 ``Duplicate value`` (a duplicate pull secret used to be admitted and left
the TrainJob stuck, its JobSet never creatable); a patch's ``template.metadata`` may carry ``name`` (it used to be a
400 unknown field); an empty container or replicatedJob name in a patch is the schema's 422, after trainguard's
mutating webhook has admitted it (it used to be trainguard's 403); an ``azureDisk`` volume gets upstream's defaults
only (``fsType``, ``readOnly``; no ``cachingMode``/``kind``); an MPI runtime with ``numProcPerNode: 0`` is stored (upstream v2.3 has no CEL
rule there).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any, Callable

import pytest

RUNTIME = "rt"
DEFAULTER = "defaulter.trainjob.trainer.kubeflow.org"


def runtime(ml_policy: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime", "metadata": {"name": RUNTIME},
            "spec": {"mlPolicy": ml_policy or {"numNodes": 1, "torch": {}},
                     "template": {"spec": {"replicatedJobs": [{"name": "node", "template": {
                         "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                         "spec": {"template": {"spec": {
                             "containers": [{"name": "node", "image": "x"}],
                             "volumes": [{"name": "data", "emptyDir": {}}, {"name": "cache", "emptyDir": {}}]}}}}}]}}}}


def job_with_patch(pod_spec: dict[str, Any] | None = None, *, rjob_name: str = "node",
                   jobset_meta: dict | None = None, job_meta: dict | None = None,
                   pod_meta: dict | None = None) -> dict[str, Any]:
    """A TrainJob on ``rt`` with one runtimePatch of replicatedJob ``rjob_name`` (pod spec and metadata at each level)."""
    pod_template: dict[str, Any] = {}
    if pod_spec is not None:
        pod_template["spec"] = pod_spec
    if pod_meta is not None:
        pod_template["metadata"] = pod_meta
    job_template: dict[str, Any] = {"spec": {"template": pod_template}}
    if job_meta is not None:
        job_template["metadata"] = job_meta
    template: dict[str, Any] = {"spec": {"replicatedJobs": [{"name": rjob_name, "template": job_template}]}}
    if jobset_meta is not None:
        template["metadata"] = jobset_meta
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": "job"},
            "spec": {"runtimeRef": {"name": RUNTIME, "kind": "TrainingRuntime"},
                     "runtimePatches": [{"manager": "acme.io/platform",
                                         "trainingRuntimeSpec": {"template": template}}]}}


def container(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, **fields}


def patched_pod(obj: dict[str, Any]) -> dict[str, Any]:
    rjob = obj["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
    return rjob["template"]["spec"]["template"]


@dataclass(frozen=True)
class Case:
    id: str
    objects: Callable[[], list[dict[str, Any]]]
    # "422" with substrings of kubectl's error, or "stored" with a check of the stored last object
    outcome: str
    messages: tuple[str, ...] = ()
    stored: Callable[[dict[str, Any]], None] | None = None


def _names_kept(obj: dict[str, Any]) -> None:
    template = obj["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]
    assert template["metadata"] == {"name": "js", "labels": {"a": "b"}}
    rjob = template["spec"]["replicatedJobs"][0]["template"]
    assert rjob["metadata"] == {"name": "j", "namespace": "elsewhere", "finalizers": ["acme.io/f"]}
    assert rjob["spec"]["template"]["metadata"] == {"name": "pod"}


def _azure_disk_upstream_defaults(obj: dict[str, Any]) -> None:
    (volume,) = patched_pod(obj)["spec"]["volumes"]
    # Upstream's CRD defaults fsType and readOnly (kubebuilder markers of core/v1) but not cachingMode or kind.
    assert volume["azureDisk"] == {"diskName": "d", "diskURI": "uri", "fsType": "ext4", "readOnly": False}, volume


def _mpi_zero_kept(obj: dict[str, Any]) -> None:
    assert obj["spec"]["mlPolicy"]["mpi"]["numProcPerNode"] == 0


CASES = [
    Case("duplicate-volume-mount-name",
         lambda: [runtime(), job_with_patch({"containers": [container("node", volumeMounts=[
             {"name": "data", "mountPath": "/a"}, {"name": "data", "mountPath": "/b"}])]})],
         "422", ("is invalid", "containers[0].volumeMounts[1]: Duplicate value", '"name":"data"')),
    Case("distinct-volume-mount-names",
         lambda: [runtime(), job_with_patch({"containers": [container("node", volumeMounts=[
             {"name": "data", "mountPath": "/a"}, {"name": "cache", "mountPath": "/b"}])]})],
         "stored", stored=lambda o: None),
    Case("duplicate-init-container-volume-mount-name",
         lambda: [runtime(), job_with_patch({"initContainers": [container("init", volumeMounts=[
             {"name": "data", "mountPath": "/a"}, {"name": "data", "mountPath": "/b"}])]})],
         "422", ("initContainers[0].volumeMounts[1]: Duplicate value",)),
    Case("duplicate-image-pull-secret",
         lambda: [runtime(), job_with_patch({"imagePullSecrets": [{"name": "s"}, {"name": "s"}]})],
         "422", ("is invalid", "imagePullSecrets[1]: Duplicate value", '"name":"s"')),
    Case("template-metadata-name",
         lambda: [runtime(), job_with_patch(jobset_meta={"name": "js", "labels": {"a": "b"}},
                                            job_meta={"name": "j", "namespace": "elsewhere",
                                                      "finalizers": ["acme.io/f"]},
                                            pod_meta={"name": "pod"})],
         "stored", stored=_names_kept),
    Case("empty-container-name",
         lambda: [runtime(), job_with_patch({"containers": [container("", env=[{"name": "A", "value": "1"}])]})],
         "422", ("is invalid", "containers[0].name: Invalid value: \"\"", "should be at least 1 chars long")),
    Case("empty-init-container-name",
         lambda: [runtime(), job_with_patch({"initContainers": [container("")]})],
         "422", ("initContainers[0].name: Invalid value: \"\"", "should be at least 1 chars long")),
    Case("empty-replicated-job-name",
         lambda: [runtime(), job_with_patch({"nodeSelector": {"a": "b"}}, rjob_name="")],
         "422", ("replicatedJobs[0].name: Invalid value: \"\"", "should be at least 1 chars long")),
    Case("azure-disk-volume",
         lambda: [runtime(), job_with_patch({"volumes": [{"name": "disk", "azureDisk": {
             "diskName": "d", "diskURI": "uri"}}]})],
         "stored", stored=_azure_disk_upstream_defaults),
    Case("mpi-num-proc-per-node-zero",
         lambda: [runtime({"numNodes": 1, "mpi": {"numProcPerNode": 0}})],
         "stored", stored=_mpi_zero_kept),
]


def kubectl_apply(cluster: Any, namespace: str, obj: dict[str, Any]):
    return cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(obj), check=False)


def stored(cluster: Any, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
    plural = {"TrainJob": "trainjobs", "TrainingRuntime": "trainingruntimes"}[obj["kind"]]
    got = cluster.kubectl("get", "-n", namespace, f"{plural}.trainer.kubeflow.org", obj["metadata"]["name"],
                          "-o", "json")
    return json.loads(got.stdout)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_upstream_answer(cluster, namespace, admission, case: Case):
    *setup, last = [copy.deepcopy(o) for o in case.objects()]
    for obj in setup:
        proc = kubectl_apply(cluster, namespace, obj)
        assert proc.returncode == 0, proc.stderr
    defaulted_before = admission.server.metric("trainguard_admission_requests_total", webhook=DEFAULTER)
    proc = kubectl_apply(cluster, namespace, last)
    if case.outcome == "422":
        assert proc.returncode != 0, f"admitted: {proc.stdout}"
        assert "Forbidden" not in proc.stderr and "denied the request" not in proc.stderr, proc.stderr
        for message in case.messages:
            assert message in proc.stderr, proc.stderr
        # The schema answered after trainguard's mutating webhook admitted the object (not instead of it).
        assert admission.server.metric("trainguard_admission_requests_total", webhook=DEFAULTER) > defaulted_before
    else:
        assert proc.returncode == 0, proc.stderr
        assert case.stored is not None
        case.stored(stored(cluster, namespace, last))
