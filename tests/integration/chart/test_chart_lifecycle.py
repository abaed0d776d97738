"""The chart's life on a cluster, with the real helm against a private control plane (tests/integration/chart/
chart_harness.py: host processes stand in for the pods, reached by the apiserver through the chart's Service).

- CRDs are chart templates: ``helm install`` creates them, ``helm upgrade`` to a chart with a changed CRD updates
  them, ``helm uninstall`` and an upgrade with ``crds.enabled=false`` keep them and the users' TrainJobs, and a
  later install of the same release adopts them again.
- Admission through the chart's own Service, webhook Secret and RBAC: a TrainJob is mutated and denied as a policy
  says; a ``helm upgrade`` that rolls both webhook replicas while TrainJobs are applied in a loop loses no admission;
  ``helm uninstall`` leaves no webhook configuration behind (a leftover Fail-policy webhook with no pods would block
  every TrainJob) and keeps CRDs and user data.
- The issue's done-when: from a cluster with nothing of trainguard, one ``helm install -f values.yaml`` (a GPU
  policy and the torch runtime from values) enforces the policy and runs a TrainJob on the torch runtime to a JobSet.

Deliberate differences from Kubeflow Trainer v2.3's chart, each pinned here: its CRD templates carry no resource
policy, so its ``helm uninstall`` deletes the CRDs and every TrainJob with them, where trainguard's keep them
(``test_crds_are_installed_upgraded_and_kept_by_helm``); its ``jobset.install`` defaults to true, trainguard's to
false (``test_jobset_chart_version_is_the_pinned_module_and_the_declared_dependency``).
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from tests.conftest import REPO, upstream_crds, wait_for_crds
from tests.integration.chart.chart_harness import (
    CHART,
    PLAIN_RUNTIME,
    ApplyLoop,
    ChartCluster,
    Release,
    chart_control_plane,
)

NAMESPACE = "trainguard-system"
RELEASE = "trainguard"
# crds/<group>_<plural>.yaml holds the CRD <plural>.<group>.
CRD_NAMES = sorted(".".join(reversed(p.stem.split("_", 1))) for p in (REPO / "crds").glob("*.yaml"))
IF_CRDS, END = "{{- if .Values.crds.enabled }}\n", "{{- end }}\n"


def trainjob(name: str, namespace: str, runtime: str = "plain", gpus: int = 0, nodes: int = 1) -> dict[str, Any]:
    trainer: dict[str, Any] = {"numNodes": nodes}
    if gpus:
        trainer["resourcesPerNode"] = {"limits": {"nvidia.com/gpu": gpus}}
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"runtimeRef": {"name": runtime, "kind": "ClusterTrainingRuntime"}, "trainer": trainer}}


@pytest.fixture
def chart_cluster() -> Iterator[ChartCluster]:
    with chart_control_plane() as c:
        yield c


@pytest.fixture
def release(chart_cluster: ChartCluster, tmp_path: Path) -> Iterator[Release]:
    r = Release(chart_cluster, RELEASE, NAMESPACE, tmp_path)
    try:
        yield r
    finally:
        r.stop_all()


def install_jobset_crd(c: ChartCluster) -> None:
    """The cluster runs JobSet, which TrainJobs need (``jobset.install=true`` would bring it; its controller cannot
    run here without a node): its CRD, from the module the tests pin."""
    c.kubectl("apply", "--server-side", *[a for p in upstream_crds(c.bin_dir, "jobset") for a in ("-f", str(p))])
    wait_for_crds(c)


def crd(c: ChartCluster, name: str) -> dict[str, Any] | None:
    return c.get("crd", name)


def webhook_configurations(c: ChartCluster) -> list[str]:
    out = c.kubectl("get", "mutatingwebhookconfigurations,validatingwebhookconfigurations", "-o", "name").stdout
    return sorted(out.split())


def changed_chart(tmp_path: Path) -> Path:
    """A copy of the chart whose TrainJob CRD has one more printer column and one more (optional) spec field, as
    the next trainguard version might."""
    chart = tmp_path / "chart-next"
    shutil.copytree(CHART, chart)
    path = chart / "templates" / "crds" / "trainer.kubeflow.org_trainjobs.yaml"
    head, rest = path.read_text().split(IF_CRDS, 1)
    body, tail = rest.rsplit(END, 1)
    doc = yaml.load(body, Loader=yaml.CSafeLoader)
    version = doc["spec"]["versions"][0]
    version["additionalPrinterColumns"].insert(0, {"jsonPath": ".spec.suspend", "name": "Suspended",
                                                   "type": "boolean"})
    version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["nextVersionField"] = {"type": "string"}
    path.write_text(head + IF_CRDS + yaml.dump(doc, Dumper=yaml.CSafeDumper, sort_keys=False) + END + tail)
    return chart


def test_crds_are_installed_upgraded_and_kept_by_helm(chart_cluster: ChartCluster, release: Release,
                                                      tmp_path: Path) -> None:
    c = chart_cluster
    # No webhook process in this test: Ignore lets the users' writes through while no pod answers.
    release.helm("install", CHART, "--create-namespace", "--set", "webhook.failurePolicy=Ignore")
    for name in CRD_NAMES:
        got = crd(c, name)
        assert got is not None, f"helm install did not create CRD {name}"
        annotations = got["metadata"]["annotations"]
        assert annotations["helm.sh/resource-policy"] == "keep"
        assert annotations["meta.helm.sh/release-name"] == RELEASE
    wait_for_crds(c)
    # The stored release fits the apiserver's 1 MiB Secret limit (the CRDs make most of it).
    secret = json.loads(c.kubectl("get", "secret", "-n", NAMESPACE, "-l", f"owner=helm,name={RELEASE}",
                                  "-o", "json").stdout)["items"][0]
    release_bytes = len(secret["data"]["release"]) * 3 // 4
    assert release_bytes < 1 << 20, release_bytes
    print(f"release Secret: {release_bytes} bytes of 1048576")

    c.kubectl("create", "namespace", "team-a")
    c.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(PLAIN_RUNTIME))
    c.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(trainjob("before-upgrade", "team-a")))

    # helm upgrade to a chart whose TrainJob CRD changed: the live CRD follows.
    release.helm("upgrade", changed_chart(tmp_path), "--reuse-values")
    got = crd(c, "trainjobs.trainer.kubeflow.org")
    assert got is not None
    version = got["spec"]["versions"][0]
    assert "Suspended" in [col["name"] for col in version["additionalPrinterColumns"]]
    assert "nextVersionField" in version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    wait_for_crds(c)
    # The new field is stored, not pruned: the apiserver serves the upgraded schema.
    job = trainjob("after-upgrade", "team-a")
    job["spec"]["nextVersionField"] = "kept"
    c.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(job))
    stored = c.get("trainjob", "after-upgrade", "-n", "team-a")
    assert stored is not None and stored["spec"].get("nextVersionField") == "kept"
    table = c.kubectl("get", "trainjobs", "-n", "team-a").stdout
    assert "SUSPENDED" in table.splitlines()[0], table

    # helm uninstall: the release's objects go, the CRDs and every TrainJob stay, and no webhook is left over.
    release.c.helm("uninstall", RELEASE, "-n", NAMESPACE)
    assert webhook_configurations(c) == []
    assert c.get("deployment", f"{RELEASE}-webhook", "-n", NAMESPACE) is None
    for name in CRD_NAMES:
        assert crd(c, name) is not None, f"helm uninstall deleted CRD {name}"
    assert c.get("trainjob", "before-upgrade", "-n", "team-a") is not None
    assert c.get("trainjob", "after-upgrade", "-n", "team-a") is not None

    # Installing the same release again adopts the kept CRDs and brings them back to the chart's version.
    release.helm("install", CHART, "--set", "webhook.failurePolicy=Ignore")
    got = crd(c, "trainjobs.trainer.kubeflow.org")
    assert got is not None
    assert "Suspended" not in [col["name"] for col in got["spec"]["versions"][0]["additionalPrinterColumns"]]

    # crds.enabled=false on an upgrade drops the CRDs from the release, not from the cluster.
    release.helm("upgrade", CHART, "--reuse-values", "--set", "crds.enabled=false")
    manifest_kinds = {d["kind"] for d in c.manifest(RELEASE, NAMESPACE)}
    assert "CustomResourceDefinition" not in manifest_kinds
    for name in CRD_NAMES:
        assert crd(c, name) is not None, f"an upgrade with crds.enabled=false deleted CRD {name}"
    assert c.get("trainjob", "before-upgrade", "-n", "team-a") is not None


GPU_POLICY = {
    "apiVersion": "trainguard.io/v1alpha1", "kind": "TrainJobPolicy",
    "metadata": {"name": "gpu-teams"},
    "spec": {"mode": "Enforce", "selector": {"namespaceSelector": {"matchLabels": {"trainguard.io/tier": "gpu"}}},
             "scheduling": {"kueue": {"queueName": "team-gpu"}}, "limits": {"maxGpusPerNode": 8}},
}



def test_admission_through_the_chart_service_survives_an_upgrade_and_uninstall_leaves_no_webhook(
        chart_cluster: ChartCluster, release: Release) -> None:
    c = chart_cluster
    install_jobset_crd(c)
    release.helm("install", CHART, "--create-namespace")
    assert len(webhook_configurations(c)) == 2
    release.start_webhook()
    release.start_webhook()
    release.start_controller()

    # Runtime and policy go through their validating webhooks, through the Service, like the TrainJobs.
    c.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(PLAIN_RUNTIME))
    c.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(GPU_POLICY))
    c.kubectl("create", "namespace", "team-a")
    c.kubectl("label", "namespace", "team-a", "trainguard.io/tier=gpu")
    admitted = json.loads(c.kubectl("create", "-o", "json", "-f", "-",
                                    input=json.dumps(trainjob("fits", "team-a", gpus=8))).stdout)
    assert admitted["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-gpu"
    denied = c.kubectl("create", "-f", "-", input=json.dumps(trainjob("too-big", "team-a", gpus=16)), check=False)
    assert denied.returncode != 0
    assert 'admission webhook "validator.trainjob.trainer.kubeflow.org" denied the request' in denied.stderr
    assert "exceed maxGpusPerNode 8" in denied.stderr, denied.stderr

    # helm upgrade (a changed webhook setting rewrites both webhook configurations) and a rolling update of both
    # webhook replicas, while TrainJobs are created without pause.
    loop = ApplyLoop(c, "team-a", lambda name: trainjob(name, "team-a"), interval=0.05)
    loop.start()
    try:
        time.sleep(1)
        release.helm("upgrade", CHART, "--reuse-values", "--set", "webhook.timeoutSeconds=6")
        release.roll_webhooks()
        time.sleep(1)
    finally:
        loop.halt.set()
        loop.join(timeout=60)
    assert len(loop.created) >= 10, len(loop.created)
    unlabelled = [j["metadata"]["name"] for j in loop.created
                  if (j["metadata"].get("labels") or {}).get("kueue.x-k8s.io/queue-name") != "team-gpu"]
    assert unlabelled == [], f"created without the policy's mutation: {unlabelled}"
    timeouts = {w["timeoutSeconds"] for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration")
                for w in json.loads(c.kubectl("get", kind, "-o", "json").stdout)["items"][0]["webhooks"]}
    assert timeouts == {6}
    print(f"{len(loop.created)} TrainJobs admitted during the upgrade and rolling update, "
          f"{len(loop.failures)} failed")

    # helm uninstall while the webhook processes still run (pods terminate after their Deployment is gone).
    release.c.helm("uninstall", RELEASE, "-n", NAMESPACE)
    time.sleep(2)
    release.stop_all()
    assert webhook_configurations(c) == [], "helm uninstall left a webhook configuration behind"
    for name in CRD_NAMES:
        assert crd(c, name) is not None, f"helm uninstall deleted CRD {name}"
    assert c.get("trainjob", "fits", "-n", "team-a") is not None
    assert c.get("trainjobpolicy", "gpu-teams") is not None
    # Nothing blocks a TrainJob now (no webhook answers, none is registered).
    c.kubectl("create", "-f", "-", input=json.dumps(trainjob("after-uninstall", "team-a", gpus=16)))

    # Checked last, so that a loss does not hide the checks above.
    assert loop.failures == [], (f"{len(loop.failures)} of {len(loop.failures) + len(loop.created)} TrainJob "
                                 f"creates failed during the rolling update: {loop.failures[:3]}")


# The admin's values file of the issue's done-when, in the keys of the chart's values.yaml: a GPU policy in the
# short form and upstream's torch runtime.
ADMIN_VALUES = {
    "defaultPolicy": {"enabled": True, "name": "gpu-limits", "mode": "Enforce", "limits": {"maxGpusPerNode": 8}},
    "runtimes": {"torchDistributed": {"enabled": True}},
}


def test_one_helm_install_gives_an_enforced_gpu_policy_and_a_working_torch_runtime(
        chart_cluster: ChartCluster, release: Release, tmp_path: Path) -> None:
    c = chart_cluster
    install_jobset_crd(c)
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(ADMIN_VALUES))

    started = time.monotonic()
    done = release.install_and_wait(CHART, "--create-namespace", "-f", str(values))
    assert done.returncode == 0, done.stderr
    print(f"helm install --wait -f values.yaml: {time.monotonic() - started:.1f} s")
    policy = c.get("trainjobpolicy", "gpu-limits")
    assert policy is not None and policy["spec"]["limits"] == {"maxGpusPerNode": 8}
    assert c.get("clustertrainingruntime", "torch-distributed") is not None

    c.kubectl("create", "namespace", "team-a")
    over = trainjob("over-limit", "team-a", runtime="torch-distributed", gpus=16, nodes=2)
    denied = c.kubectl("create", "-f", "-", input=json.dumps(over), check=False)
    assert denied.returncode != 0
    assert "16 nvidia.com/gpu per node exceed maxGpusPerNode 8" in denied.stderr, denied.stderr
    assert "gpu-limits" in denied.stderr, denied.stderr

    c.kubectl("create", "-f", "-", input=json.dumps(trainjob("ddp", "team-a", runtime="torch-distributed",
                                                                gpus=8, nodes=2)))
    deadline = time.monotonic() + 90
    while (jobset := c.get("jobset", "ddp", "-n", "team-a")) is None:
        assert time.monotonic() < deadline, "the controller built no JobSet:\n" + release.controllers[0].log()
        time.sleep(0.5)
    (node,) = [j for j in jobset["spec"]["replicatedJobs"] if j["name"] == "node"]
    assert node["template"]["spec"]["parallelism"] == 2
    (container,) = node["template"]["spec"]["template"]["spec"]["containers"]
    assert container["image"].startswith("pytorch/pytorch:")
    assert container["resources"]["limits"]["nvidia.com/gpu"] in (8, "8")
    assert any(e["name"] == "PET_NNODES" for e in container["env"])

    # Uninstall: the chart's policy and runtime go with the release, the users' TrainJob and the CRDs stay.
    c.helm("uninstall", RELEASE, "-n", NAMESPACE)
    release.stop_all()
    assert webhook_configurations(c) == []
    assert c.get("trainjobpolicy", "gpu-limits") is None
    assert c.get("trainjob", "ddp", "-n", "team-a") is not None
    for name in CRD_NAMES:
        assert crd(c, name) is not None


def helm_template(c_bin: Path, *sets: str, crds: bool = False) -> list[dict[str, Any]]:
    import subprocess

    args = [str(c_bin / "helm"), "template", RELEASE, str(CHART), "-n", NAMESPACE]
    for s in sets:
        args += ["--set", s]
    if crds:
        args.append("--include-crds")
    out = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.load_all(out.stdout, Loader=yaml.CSafeLoader) if d]


def test_crd_templates_are_crds_verbatim_with_keep_and_follow_crds_enabled() -> None:
    from tests.conftest import build_tools

    bin_dir = build_tools("helm")
    rendered = {d["metadata"]["name"]: d for d in helm_template(bin_dir)
                if d["kind"] == "CustomResourceDefinition"}
    assert sorted(rendered) == CRD_NAMES
    for path in (REPO / "crds").glob("*.yaml"):
        source = yaml.load(path.read_text(), Loader=yaml.CSafeLoader)
        got = rendered[source["metadata"]["name"]]
        assert got["spec"] == source["spec"], path.name
        assert got["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep",
                                                  **(source["metadata"].get("annotations") or {})}
    assert [d for d in helm_template(bin_dir, "crds.enabled=false") if d["kind"] == "CustomResourceDefinition"] == []


@pytest.mark.parametrize("install", [False, True], ids=["jobset-off", "jobset-on"])
def test_jobset_is_an_optional_dependency(install: bool) -> None:
    from tests.conftest import build_tools

    bin_dir = build_tools("helm")
    docs = helm_template(bin_dir, f"jobset.install={str(install).lower()}", crds=True)
    jobset_objects = [d for d in docs if d["metadata"]["name"].startswith("jobset")]
    crds = {d["metadata"]["name"] for d in docs if d["kind"] == "CustomResourceDefinition"}
    assert ("jobsets.jobset.x-k8s.io" in crds) is install
    assert sorted(crds - {"jobsets.jobset.x-k8s.io"}) == CRD_NAMES
    if not install:
        assert jobset_objects == []
        return
    (deployment,) = [d for d in jobset_objects if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    # The released JobSet v0.12.0 image, as the published chart sets it (the module's chart says "main").
    assert container["image"] == "registry.k8s.io/jobset/jobset:v0.12.0"
    assert container["imagePullPolicy"] == "IfNotPresent"
    kinds = {d["kind"] for d in jobset_objects}
    assert {"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "Service"} <= kinds
    assert {d["metadata"]["namespace"] for d in jobset_objects if "namespace" in d["metadata"]} == {NAMESPACE}


def test_jobset_chart_version_is_the_pinned_module_and_the_declared_dependency() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    (dep,) = [d for d in chart["dependencies"] if d["name"] == "jobset"]
    vendored = yaml.safe_load((CHART / "charts" / "jobset" / "Chart.yaml").read_text())
    pinned = [line.split()[1] for line in (REPO / "hack" / "tools" / "crds" / "go.mod").read_text().splitlines()
              if line.split()[:1] == ["sigs.k8s.io/jobset"]]
    assert dep["condition"] == "jobset.install"
    assert dep["version"] == vendored["version"] == pinned[0].lstrip("v")
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["jobset"]["install"] is False
    assert values["jobset"]["image"]["tag"] == pinned[0]
