"""The checked-in CRDs are exactly what hack/gen_crds.py generates, and carry what users and the API server need."""

from __future__ import annotations

import copy
import functools
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
CRDS = REPO / "crds"
EXPECTED = {
    "trainer.kubeflow.org_trainjobs.yaml", "trainer.kubeflow.org_trainingruntimes.yaml",
    "trainer.kubeflow.org_clustertrainingruntimes.yaml", "trainguard.io_trainjobpolicies.yaml",
    "trainguard.io_datasetcaches.yaml",
}


@functools.cache
def _load(name: str) -> dict:
    # libyaml when PyYAML has it: the runtime CRDs are 0.9 MB, too slow for the pure-Python loader on every test.
    return yaml.load((CRDS / name).read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def load(name: str) -> dict:
    return copy.deepcopy(_load(name))


def schema(name: str) -> dict:
    return load(name)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def at(node: dict, path: str) -> dict:
    for part in path.split("."):
        node = node["items"] if part == "[]" else node["properties"][part]
    return node


@pytest.mark.tools
def test_generated_crds_are_up_to_date(tmp_path):
    """Regenerate into a temp dir and compare byte for byte (needs hack/build-tools.sh openapi crds: Go)."""
    proc = subprocess.run([sys.executable, str(REPO / "hack" / "gen_crds.py"), "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    generated = {p.name: p.read_text() for p in tmp_path.glob("*.yaml")}
    assert set(generated) == EXPECTED
    checked_in = {p.name: p.read_text() for p in CRDS.glob("*.yaml")}
    stale = sorted(n for n in generated if checked_in.get(n) != generated[n])
    assert not stale and set(checked_in) == EXPECTED, f"crds/ is out of date ({stale}): run `python hack/gen_crds.py`"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_size_allows_server_side_apply(name):
    assert (CRDS / name).stat().st_size < 1 << 20


def test_trainjob_columns_status_and_root_rules():
    version = load("trainer.kubeflow.org_trainjobs.yaml")["spec"]["versions"][0]
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert list(columns) == ["State", "Runtime", "Nodes", "GPUs", "Progress", "Age"]
    assert columns["State"] == ".metadata.labels.trainguard\\.io/state", "one state column, in the SDK's words"
    assert columns["Nodes"] == ".metadata.labels.trainguard\\.io/nodes"
    assert columns["GPUs"] == ".metadata.labels.trainguard\\.io/gpus"
    assert columns["Progress"] == ".status.trainerStatus.progressPercentage"
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert status["lastResumeTime"] == {**status["lastResumeTime"], "type": "string", "format": "date-time"}
    assert version["subresources"] == {"status": {}}
    messages = [r["message"] for r in version["schema"]["openAPIV3Schema"]["x-kubernetes-validations"]]
    assert messages == ["metadata.name must match RFC 1035 DNS label format",
                        "metadata.name must be no more than 63 characters"]


def test_trainjobpolicy_columns_show_mode_ready_and_the_counts():
    """``kubectl get tjp``: what an admin reads after a policy change (the controller writes the status)."""
    version = load("trainguard.io_trainjobpolicies.yaml")["spec"]["versions"][0]
    columns = {c["name"]: c for c in version["additionalPrinterColumns"]}
    shown = [c["name"] for c in version["additionalPrinterColumns"] if not c.get("priority")]
    assert shown == ["Mode", "Ready", "Selected", "Pass", "Warn", "Fail", "Age"]
    assert columns["Ready"]["jsonPath"] == '.status.conditions[?(@.type=="Ready")].status'
    assert [columns[n]["jsonPath"] for n in ("Selected", "Pass", "Warn", "Fail")] == [
        ".status.trainJobs.selected", ".status.trainJobs.pass", ".status.trainJobs.warn", ".status.trainJobs.fail"]
    assert version["subresources"] == {"status": {}}
    counts = at(version["schema"]["openAPIV3Schema"], "status.trainJobs")
    assert sorted(counts["properties"]) == ["fail", "pass", "selected", "warn"]


@pytest.mark.parametrize("path, key, value", [
    ("spec.runtimeRef.apiGroup", "default", "trainer.kubeflow.org"),
    ("spec.runtimeRef.kind", "default", "ClusterTrainingRuntime"),
    ("spec.suspend", "default", False),
    ("spec.managedBy", "default", "trainer.kubeflow.org/trainjob-controller"),
    ("spec.activeDeadlineSeconds", "minimum", 1),
    ("spec.activeDeadlineSeconds", "format", "int64"),
    ("spec.trainer.env", "x-kubernetes-list-map-keys", ["name"]),
    ("spec.trainer.env", "maxItems", 128),
    ("spec.trainer.command", "x-kubernetes-list-type", "atomic"),
    ("spec.trainer.command.[]", "maxLength", 1048576),
    ("spec.trainer.image", "maxLength", 500),
    ("spec.runtimePatches", "x-kubernetes-list-map-keys", ["manager"]),
    ("spec.runtimePatches", "maxItems", 16),
    ("spec.initializer.dataset.storageUri", "maxLength", 2048),
    ("status", "minProperties", 1),
    ("status.conditions", "maxItems", 8),
    ("status.jobsStatus", "x-kubernetes-list-map-keys", ["name"]),
])
def test_trainjob_schema_facts(path, key, value):
    assert at(schema("trainer.kubeflow.org_trainjobs.yaml"), path)[key] == value


def test_embedded_core_types_come_from_openapi():
    trainer = at(schema("trainer.kubeflow.org_trainjobs.yaml"), "spec.trainer")
    limits = trainer["properties"]["resourcesPerNode"]["properties"]["limits"]["additionalProperties"]
    assert limits["x-kubernetes-int-or-string"] is True and "pattern" in limits
    env_item = trainer["properties"]["env"]["items"]
    assert {"name", "value", "valueFrom"} <= set(env_item["properties"]) and env_item["required"] == ["name"]
    patch_volumes = at(schema("trainer.kubeflow.org_trainjobs.yaml"),
                       "spec.runtimePatches.[].trainingRuntimeSpec.template.spec.replicatedJobs.[].template.spec."
                       "template.spec.volumes.[]")
    assert "persistentVolumeClaim" in patch_volumes["properties"]


def test_runtime_template_is_the_jobset_spec():
    spec = at(schema("trainer.kubeflow.org_clustertrainingruntimes.yaml"), "spec.template.spec")
    rjob = spec["properties"]["replicatedJobs"]
    assert rjob["x-kubernetes-list-map-keys"] == ["name"]
    assert rjob["items"]["properties"]["replicas"]["default"] == 1
    assert any(r["message"] == "StartupPolicy and DependsOn APIs are mutually exclusive"
               for r in spec["x-kubernetes-validations"])


def test_every_field_of_our_own_types_is_described():
    def walk(node: dict, path: str) -> list[str]:
        missing = [] if node.get("description") or path.count(".") == 0 else [path]
        for key, sub in (node.get("properties") or {}).items():
            missing += walk(sub, f"{path}.{key}")
        if "items" in node:
            missing += walk(node["items"], f"{path}[]") if node["items"].get("properties") else []
        return missing

    # The trainer.kubeflow.org CRDs are upstream's, descriptions included (test_crds_match_upstream.py).
    for name in sorted(n for n in EXPECTED if n.startswith("trainguard.io_")):
        root = schema(name)
        missing = [p for p in walk(root, "") if not p.startswith(".metadata")]
        # Items of lists are described by their list field; embedded upstream schemas describe themselves.
        missing = [p for p in missing if not p.endswith("[]")]
        # The runtime template's JobSet spec is upstream's schema, copied verbatim.
        missing = [p for p in missing if not p.startswith(".spec.template.spec.")]
        assert not missing, f"{name}: fields without description: {missing[:10]}"
