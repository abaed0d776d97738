"""The differential corpus: what is applied, identically, to upstream's manager and to trainguard.

A case is a few objects applied with ``kubectl apply`` in phases: ``runtimes`` (TrainingRuntimes and
ClusterTrainingRuntimes), then ``jobs`` (TrainJobs), then each step of ``updates`` (re-applied manifests). Every case
names its objects after itself, so many cases share one namespace and are applied together.

Sources: upstream's own runtimes (``manifests/base/runtimes``) and examples (``examples/``) read from the Go module at
run time; variations generated on them (numNodes, resources, env, runtimePatches, initializers; torch, DeepSpeed,
MLX/MPI, JAX, XGBoost, Flux, torchtune, coscheduling and Volcano runtimes); invalid inputs; UPDATE sequences.

Cluster-scoped runtimes are renamed ``parity-<name>`` (other tests of a session may own the upstream names) and carry
the test-scope label trainguard's test registration selects on (the same label on both sides).
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import yaml

API = "trainer.kubeflow.org/v1alpha1"
PREFIX = "parity-"


@dataclass(frozen=True)
class Case:
    name: str
    runtimes: tuple[dict[str, Any], ...] = ()
    jobs: tuple[dict[str, Any], ...] = ()
    updates: tuple[tuple[dict[str, Any], ...], ...] = ()
    # DELIBERATE entries (tests/parity/deliberate.py) that explain this case's differences
    deliberate: tuple[str, ...] = ()
    origin: str = "variation"
    note: str = ""

    def objects(self) -> Iterable[dict[str, Any]]:
        yield from self.runtimes
        yield from self.jobs
        for step in self.updates:
            yield from step


# ----------------------------------------------------------------------------------------------- upstream's files

def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


@functools.lru_cache(maxsize=None)
def upstream_runtimes(module_dir: Path) -> dict[str, dict[str, Any]]:
    """Every ClusterTrainingRuntime upstream ships (manifests/base/runtimes, Flux and Volcano from examples/), by
    upstream name."""
    out: dict[str, dict[str, Any]] = {}
    paths = sorted((module_dir / "manifests/base/runtimes").rglob("*.yaml"))
    paths += sorted((module_dir / "examples").rglob("*.yaml"))
    for path in paths:
        if path.name == "kustomization.yaml":
            continue
        for doc in _docs(path):
            if doc.get("kind") == "ClusterTrainingRuntime":
                out.setdefault(doc["metadata"]["name"], doc)
    return out


@functools.lru_cache(maxsize=None)
def upstream_examples(module_dir: Path) -> list[tuple[str, list[dict[str, Any]]]]:
    """(file stem, [TrainingRuntime..., TrainJob...]) for every example file holding a TrainJob."""
    out = []
    for path in sorted((module_dir / "examples").rglob("*.yaml")):
        docs = [d for d in _docs(path) if d.get("kind") in ("TrainJob", "TrainingRuntime")]
        if any(d["kind"] == "TrainJob" for d in docs):
            out.append((path.stem, docs))
    return out


# ------------------------------------------------------------------------------------------------------- builders

def cluster_runtime(upstream: dict[str, Any], scope: dict[str, str]) -> dict[str, Any]:
    rt = copy.deepcopy(upstream)
    rt["metadata"] = {**rt["metadata"], "name": PREFIX + rt["metadata"]["name"],
                      "labels": {**(rt["metadata"].get("labels") or {}), **scope}}
    return rt


def trainjob(name: str, runtime: str, kind: str = "ClusterTrainingRuntime", **spec: Any) -> dict[str, Any]:
    ref = {"name": PREFIX + runtime if kind == "ClusterTrainingRuntime" else runtime, "kind": kind,
           "apiGroup": "trainer.kubeflow.org"}
    return {"apiVersion": API, "kind": "TrainJob", "metadata": {"name": name},
            "spec": {"runtimeRef": ref, **spec}}


def training_runtime(name: str, spec: dict[str, Any], labels: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": API, "kind": "TrainingRuntime", "metadata": meta, "spec": spec}


def job(name: str, containers: list[dict[str, Any]], *, ancestor: str | None = None,
        init_containers: list[dict[str, Any]] | None = None, depends_on: list[dict[str, Any]] | None = None,
        pod_spec: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": containers, **(pod_spec or {})}
    if init_containers:
        spec["initContainers"] = init_containers
    rj: dict[str, Any] = {"name": name, "template": {"spec": {"template": {"spec": spec}}}}
    if ancestor:
        rj["template"]["metadata"] = {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": ancestor}}
    if depends_on:
        rj["dependsOn"] = depends_on
    return rj


def container(name: str, image: str = "busybox:1.36", **extra: Any) -> dict[str, Any]:
    return {"name": name, "image": image, **extra}


INIT_MOUNT = [{"name": "initializer", "mountPath": "/workspace"}]
INIT_VOLUME = [{"name": "initializer", "persistentVolumeClaim": {"claimName": "initializer"}}]


def runtime_spec(ml_policy: dict[str, Any], jobs: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"mlPolicy": ml_policy, "template": {"spec": {"replicatedJobs": jobs}}, **extra}


def torch_with_initializers_spec() -> dict[str, Any]:
    return runtime_spec({"numNodes": 1, "torch": {}}, [
        job("dataset-initializer", [container("dataset-initializer", volumeMounts=INIT_MOUNT)],
            ancestor="dataset-initializer", pod_spec={"volumes": INIT_VOLUME}),
        job("model-initializer", [container("model-initializer", volumeMounts=INIT_MOUNT)],
            ancestor="model-initializer", pod_spec={"volumes": INIT_VOLUME},
            depends_on=[{"name": "dataset-initializer", "status": "Complete"}]),
        job("node", [container("node", "pytorch/pytorch:2.5.0", volumeMounts=INIT_MOUNT),
                     container("sidecar")], ancestor="trainer", pod_spec={"volumes": INIT_VOLUME},
            depends_on=[{"name": "model-initializer", "status": "Complete"}]),
    ])


def plain_spec(pod_group: dict[str, Any] | None = None, resources: dict[str, Any] | None = None) -> dict[str, Any]:
    node = container("node", resources=resources) if resources else container("node")
    spec = runtime_spec({"numNodes": 2}, [job("node", [node], ancestor="trainer")])
    if pod_group:
        spec["podGroupPolicy"] = pod_group
    return spec


def patch(manager: str, jobs: list[dict[str, Any]] | None = None, metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    template: dict[str, Any] = {}
    if metadata:
        template["metadata"] = metadata
    if jobs is not None:
        template["spec"] = {"replicatedJobs": jobs}
    return {"manager": manager, "trainingRuntimeSpec": {"template": template}}


def pod_patch(job_name: str, **pod_spec: Any) -> dict[str, Any]:
    return {"name": job_name, "template": {"spec": {"template": {"spec": pod_spec}}}}


def with_spec(obj: dict[str, Any], **spec: Any) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["spec"].update(spec)
    return out


def with_trainer(obj: dict[str, Any], **trainer: Any) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["spec"].setdefault("trainer", {}).update(trainer)
    return out


# ---------------------------------------------------------------------------------------------------------- corpus

GPU = {"limits": {"nvidia.com/gpu": "2"}, "requests": {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "2"}}
CPU = {"limits": {"cpu": "4", "memory": "8Gi"}, "requests": {"cpu": "2", "memory": "4Gi"}}
ENV = [{"name": "CUSTOM_VAR", "value": "custom"}, {"name": "PYTHONUNBUFFERED", "value": "1"}]

# upstream's built-in runtimes the generated TrainJobs run on (upstream name -> short case prefix)
FAMILIES = {
    "torch-distributed": "torch",
    "deepspeed-distributed": "ds",
    "mlx-distributed": "mlx",
    "jax-distributed": "jax",
    "xgboost-distributed": "xgb",
    "torch-distributed-with-cache": "cache",
    "torch-distributed-volcano": "volcano",
}


def build_corpus(module_dir: Path, scope: dict[str, str]) -> list[Case]:
    cases: list[Case] = []
    runtimes = upstream_runtimes(module_dir)

    # 1. upstream's ClusterTrainingRuntimes themselves: admission and the stored object
    for name, rt in runtimes.items():
        cases.append(Case(f"crt-{name}"[:60], runtimes=(cluster_runtime(rt, scope),), origin="upstream runtime"))

    # 2. upstream's examples, as shipped (runtime references moved to the renamed cluster runtimes)
    for stem, docs in upstream_examples(module_dir):
        case_name = f"ex-{stem}"[:50]
        objs = []
        for i, d in enumerate(docs):
            d = copy.deepcopy(d)
            if d["kind"] == "TrainingRuntime":
                d["metadata"]["name"] = f"{case_name}-rt{i}"
            else:
                d["metadata"]["name"] = case_name if sum(x["kind"] == "TrainJob" for x in docs) == 1 else f"{case_name}-{i}"
                ref = d["spec"]["runtimeRef"]
                if ref.get("kind", "ClusterTrainingRuntime") == "ClusterTrainingRuntime":
                    ref["name"] = PREFIX + ref["name"]
                else:
                    ref["name"] = next(f"{case_name}-rt{j}" for j, x in enumerate(docs)
                                       if x["kind"] == "TrainingRuntime" and x["metadata"]["name"] == ref["name"])
            objs.append(d)
        cases.append(Case(case_name, runtimes=tuple(o for o in objs if o["kind"] == "TrainingRuntime"),
                          jobs=tuple(o for o in objs if o["kind"] == "TrainJob"), origin="upstream example"))

    # 3. generated variations on each built-in runtime
    for rt, short in FAMILIES.items():
        if rt not in runtimes:
            continue
        base = trainjob(f"{short}-default", rt)
        cases.append(Case(f"{short}-default", jobs=(base,)))
        for n in (1, 2, 4):
            cases.append(Case(f"{short}-nodes-{n}", jobs=(trainjob(f"{short}-nodes-{n}", rt, trainer={"numNodes": n}),)))
        cases.append(Case(f"{short}-gpu", jobs=(trainjob(f"{short}-gpu", rt, trainer={
            "numNodes": 2, "resourcesPerNode": GPU}),)))
        cases.append(Case(f"{short}-cpu-env", jobs=(trainjob(f"{short}-cpu-env", rt, trainer={
            "numNodes": 2, "resourcesPerNode": CPU, "env": ENV, "image": "python:3.11-slim",
            "command": ["python3", "-c", "print(1)"], "args": ["--epochs", "1"]}),)))
        cases.append(Case(f"{short}-nodes-0", jobs=(trainjob(f"{short}-nodes-0", rt, trainer={"numNodes": 0}),),
                          note="known: numNodes 0 (issue 12)"))
        cases.append(Case(f"{short}-labels", jobs=(trainjob(f"{short}-labels", rt, runtimePatches=[
            patch("example.io/platform", metadata={"labels": {"team": "ml"}, "annotations": {"a.io/b": "c"}})]),)))
        cases.append(Case(f"{short}-podpatch", jobs=(trainjob(f"{short}-podpatch", rt, trainer={"numNodes": 2},
            runtimePatches=[patch("example.io/platform", [pod_patch(
                "node" if short not in ("mlx",) else "launcher", nodeSelector={"node-type": "training"},
                tolerations=[{"key": "t", "operator": "Equal", "value": "v", "effect": "NoSchedule"}],
                serviceAccountName="training-sa")])]),)))
        cases.append(Case(f"{short}-suspended", jobs=(trainjob(f"{short}-suspended", rt, suspend=True,
                                                              trainer={"numNodes": 2}),)))

    # torch: process counts and reserved envs
    for nproc in (1, 4):
        cases.append(Case(f"torch-nproc-{nproc}", jobs=(trainjob(f"torch-nproc-{nproc}", "torch-distributed", trainer={
            "numNodes": 2, "numProcPerNode": nproc}),)))
    cases.append(Case("torch-gpu-limit-only", jobs=(trainjob("torch-gpu-limit-only", "torch-distributed", trainer={
        "numNodes": 2, "resourcesPerNode": {"limits": {"nvidia.com/gpu": "8"}}}),)))
    cases.append(Case("torch-cpu-fraction", jobs=(trainjob("torch-cpu-fraction", "torch-distributed", trainer={
        "resourcesPerNode": {"requests": {"cpu": "500m"}}}),)))
    cases.append(Case("torch-reserved-env", jobs=(trainjob("torch-reserved-env", "torch-distributed", trainer={
        "env": [{"name": "PET_NNODES", "value": "3"}, {"name": "PET_MASTER_PORT", "value": "1"}]}),),
        origin="invalid"))
    cases.append(Case("torch-tune-cmd", jobs=(trainjob("torch-tune-cmd", "torch-distributed", trainer={
        "command": ["tune", "run"], "args": ["full_finetune_distributed"]}),)))
    # MPI (mlx) reserved env, numProcPerNode
    cases.append(Case("mlx-reserved-env", jobs=(trainjob("mlx-reserved-env", "mlx-distributed", trainer={
        "env": [{"name": "OMPI_MCA_orte_default_hostfile", "value": "/x"}]}),), origin="invalid"))
    cases.append(Case("mlx-nproc-2", jobs=(trainjob("mlx-nproc-2", "mlx-distributed", trainer={
        "numNodes": 3, "numProcPerNode": 2}),)))
    cases.append(Case("ds-nproc-2", jobs=(trainjob("ds-nproc-2", "deepspeed-distributed", trainer={
        "numNodes": 2, "numProcPerNode": 2, "resourcesPerNode": GPU}),)))
    # XGBoost reserved env
    cases.append(Case("xgb-reserved-env", jobs=(trainjob("xgb-reserved-env", "xgboost-distributed", trainer={
        "env": [{"name": "DMLC_TASK_ID", "value": "1"}, {"name": "OK", "value": "1"}]}),), origin="invalid"))
    # torchtune runtimes with their initializers
    for rt in [r for r in runtimes if r.startswith("torchtune-")]:
        short = "tt-" + rt.removeprefix("torchtune-").replace(".", "-")[:20]
        cases.append(Case(short, jobs=(trainjob(short, rt, initializer={
            "dataset": {"storageUri": "hf://tatsu-lab/alpaca/data"},
            "model": {"storageUri": "hf://meta-llama/Llama-3.2-1B-Instruct",
                      "env": [{"name": "ACCESS_TOKEN", "value": "x"}]}},
            trainer={"numNodes": 1, "resourcesPerNode": GPU}),)))
    # Flux: upstream's runtime with numProcPerNode variations
    if "flux-distributed" in runtimes:
        for n, nproc in ((1, None), (2, 4), (3, 0)):
            name = f"flux-n{n}-p{nproc if nproc is not None else 'd'}"
            trainer: dict[str, Any] = {"numNodes": n, "command": ["hostname"]}
            if nproc is not None:
                trainer["numProcPerNode"] = nproc
            cases.append(Case(name, jobs=(trainjob(name, "flux-distributed", trainer=trainer),),
                              origin="invalid" if nproc == 0 else "variation"))
        cases.append(Case("flux-no-numnodes", jobs=(trainjob("flux-no-numnodes", "flux-distributed", trainer={
            "command": ["hostname"]}),), deliberate=("flux-default-numnodes",)))

    # 4. namespaced runtimes: initializers, coscheduling, patches to each job kind
    rt_init = training_runtime("rt-init", torch_with_initializers_spec())
    cases.append(Case("init-both", runtimes=(rt_init,), jobs=(trainjob("init-both", "rt-init", "TrainingRuntime",
        initializer={"dataset": {"storageUri": "s3://bucket/data", "secretRef": {"name": "s3"},
                                 "env": [{"name": "ENDPOINT", "value": "http://minio"}]},
                     "model": {"storageUri": "hf://org/model"}},
        trainer={"numNodes": 2, "resourcesPerNode": CPU}),)))
    cases.append(Case("init-none", jobs=(trainjob("init-none", "rt-init", "TrainingRuntime"),)))
    cases.append(Case("init-dataset-only", jobs=(trainjob("init-dataset-only", "rt-init", "TrainingRuntime",
        initializer={"dataset": {"storageUri": "hf://a/b"}}),)))
    cases.append(Case("init-bad-uri", jobs=(trainjob("init-bad-uri", "rt-init", "TrainingRuntime",
        initializer={"dataset": {"storageUri": "no-scheme"}}),), origin="invalid"))
    cases.append(Case("init-missing-job", jobs=(trainjob("init-missing-job", "torch-distributed",
        initializer={"dataset": {"storageUri": "hf://a/b"}, "model": {"storageUri": "hf://c/d"}}),),
        origin="invalid"))
    cases.append(Case("init-patch-sidecar", jobs=(trainjob("init-patch-sidecar", "rt-init", "TrainingRuntime",
        runtimePatches=[patch("example.io/p", [
            pod_patch("dataset-initializer", nodeSelector={"disk": "ssd"}),
            pod_patch("node", containers=[{"name": "sidecar", "env": [{"name": "X", "value": "1"}],
                                           "volumeMounts": [{"name": "initializer", "mountPath": "/w2"}]}])])]),)))
    cases.append(Case("init-patch-node-env", jobs=(trainjob("init-patch-node-env", "rt-init", "TrainingRuntime",
        runtimePatches=[patch("example.io/p", [pod_patch("node", containers=[
            {"name": "node", "env": [{"name": "X", "value": "1"}]}])])]),), origin="invalid"))
    cases.append(Case("patch-missing-job", jobs=(trainjob("patch-missing-job", "torch-distributed", runtimePatches=[
        patch("example.io/p", [pod_patch("nope", nodeSelector={"a": "b"})])]),),
        deliberate=("runtimepatch-missing-target",), origin="invalid"))
    cases.append(Case("patch-missing-container", jobs=(trainjob("patch-missing-container", "torch-distributed",
        runtimePatches=[patch("example.io/p", [pod_patch("node", containers=[
            {"name": "ghost", "volumeMounts": [{"name": "v", "mountPath": "/v"}]}])])]),),
        deliberate=("runtimepatch-missing-target",), origin="invalid"))
    cases.append(Case("patch-bad-manager", jobs=(trainjob("patch-bad-manager", "torch-distributed", runtimePatches=[
        patch("nodomain", metadata={"labels": {"a": "b"}})]),), origin="invalid"))
    cases.append(Case("patch-two-managers", jobs=(trainjob("patch-two-managers", "torch-distributed", runtimePatches=[
        patch("a.io/first", [pod_patch("node", nodeSelector={"a": "1", "b": "1"})]),
        patch("b.io/second", [pod_patch("node", nodeSelector={"b": "2"},
                                        volumes=[{"name": "scratch", "emptyDir": {}}],
                                        containers=[{"name": "node", "volumeMounts": [
                                            {"name": "scratch", "mountPath": "/scratch"}]}])])]),)))
    cases.append(Case("patch-with-time", jobs=(trainjob("patch-with-time", "torch-distributed", runtimePatches=[
        {**patch("a.io/t", metadata={"labels": {"x": "y"}}), "time": "2024-01-01T00:00:00Z"}]),)))
    cases.append(Case("patch-dup-volume-mount", jobs=(trainjob("patch-dup-volume-mount", "torch-distributed",
        runtimePatches=[patch("a.io/p", [pod_patch("node", volumes=[{"name": "v", "emptyDir": {}}], containers=[
            {"name": "node", "volumeMounts": [{"name": "v", "mountPath": "/a"}, {"name": "v", "mountPath": "/b"}]}])])]),),
        origin="invalid", note="known: CRD list keys (issue 12)"))
    cases.append(Case("patch-dup-pull-secret", jobs=(trainjob("patch-dup-pull-secret", "torch-distributed",
        runtimePatches=[patch("a.io/p", [pod_patch("node", imagePullSecrets=[{"name": "s"}, {"name": "s"}])])]),),
        origin="invalid", note="known: CRD list keys (issue 12)"))
    cases.append(Case("patch-template-name", jobs=(trainjob("patch-template-name", "torch-distributed",
        runtimePatches=[patch("a.io/p", [{"name": "node", "template": {"spec": {"template": {
            "metadata": {"name": "x", "labels": {"l": "v"}}, "spec": {"nodeSelector": {"a": "b"}}}}}}])]),),
        note="known: CRD schema (issue 12)"))
    cases.append(Case("patch-empty-container", jobs=(trainjob("patch-empty-container", "torch-distributed",
        runtimePatches=[patch("a.io/p", [pod_patch("node", containers=[{"name": "", "env": []}])])]),),
        origin="invalid", note="known: CRD schema (issue 12)"))

    azure = {"name": "disk", "azureDisk": {"diskName": "d", "diskURI": "https://example/d"}}
    cases.append(Case("patch-azure-disk", jobs=(trainjob("patch-azure-disk", "torch-distributed", runtimePatches=[
        patch("a.io/p", [pod_patch("node", volumes=[azure], containers=[
            {"name": "node", "volumeMounts": [{"name": "disk", "mountPath": "/disk"}]}])])]),),
        note="known: CRD schema defaults (issue 12)"))
    cases.append(Case("rt-azure-disk", runtimes=(training_runtime("rt-azure", runtime_spec({"torch": {}}, [
        job("node", [container("node", volumeMounts=[{"name": "disk", "mountPath": "/disk"}])], ancestor="trainer",
            pod_spec={"volumes": [azure]})])),),
        jobs=(trainjob("rt-azure-disk", "rt-azure", "TrainingRuntime"),), note="known: CRD schema defaults (issue 12)"))

    spec_cos = plain_spec({"coscheduling": {"scheduleTimeoutSeconds": 90}}, CPU)
    cases.append(Case("cosched", runtimes=(training_runtime("rt-cosched", spec_cos),),
                      jobs=(trainjob("cosched", "rt-cosched", "TrainingRuntime", trainer={"numNodes": 3}),)))
    cases.append(Case("cosched-gpu-limits", runtimes=(training_runtime("rt-cosched-gpu", plain_spec(
        {"coscheduling": {}}, {"limits": {"nvidia.com/gpu": "4", "cpu": "2"}})),),
        jobs=(trainjob("cosched-gpu-limits", "rt-cosched-gpu", "TrainingRuntime"),),
        deliberate=("podgroup-limit-only-resources",)))
    cases.append(Case("plain-default", runtimes=(training_runtime("rt-plain", plain_spec()),),
                      jobs=(trainjob("plain-default", "rt-plain", "TrainingRuntime", trainer={
                          "numNodes": 3, "env": ENV, "resourcesPerNode": GPU}),)))
    cases.append(Case("volcano-ns", runtimes=(training_runtime("rt-volcano", plain_spec({"volcano": {}})),),
                      jobs=(trainjob("volcano-ns", "rt-volcano", "TrainingRuntime"),),
                      note="known: Volcano without its CRD (issue 12)"))
    cases.append(Case("mpi-ns", runtimes=(training_runtime("rt-mpi", runtime_spec(
        {"numNodes": 2, "mpi": {"numProcPerNode": 2, "sshAuthMountPath": "/home/u/.ssh"}},
        [job("launcher", [container("node")], ancestor="trainer"), job("node", [container("node")])])),),
        jobs=(trainjob("mpi-ns", "rt-mpi", "TrainingRuntime", trainer={"numNodes": 3}),)))
    cases.append(Case("mpi-ns-no-launcher", runtimes=(training_runtime("rt-mpi-nl", runtime_spec(
        {"numNodes": 1, "mpi": {"runLauncherAsNode": True}},
        [job("node", [container("node")], ancestor="trainer")])),),
        jobs=(trainjob("mpi-ns-no-launcher", "rt-mpi-nl", "TrainingRuntime", trainer={"numNodes": 2}),),
        origin="invalid"))
    cases.append(Case("rt-mpi-no-node-job", runtimes=(training_runtime("rt-mpi-no-node", runtime_spec(
        {"numNodes": 1, "mpi": {"runLauncherAsNode": True}},
        [job("worker", [container("node")], ancestor="trainer")])),), origin="invalid",
        deliberate=("trainingruntime-stricter-checks",)))
    cases.append(Case("mpi-ns-nproc-0", runtimes=(training_runtime("rt-mpi-0", runtime_spec(
        {"mpi": {"numProcPerNode": 0}}, [job("node", [container("node")], ancestor="trainer")])),),
        origin="invalid", note="known: CRD CEL (issue 12)"))
    cases.append(Case("jax-ns", runtimes=(training_runtime("rt-jax", runtime_spec(
        {"numNodes": 2, "jax": {}}, [job("node", [container("node")], ancestor="trainer")])),),
        jobs=(trainjob("jax-ns", "rt-jax", "TrainingRuntime", trainer={"numNodes": 4, "resourcesPerNode": GPU}),)))
    cases.append(Case("torch-envinj", runtimes=(training_runtime("rt-envinj", runtime_spec(
        {"torch": {"envInjection": {"targets": [{"jobName": "node", "containerNames": ["side"]}]}}},
        [job("node", [container("node"), container("side")], ancestor="trainer")])),),
        jobs=(trainjob("torch-envinj", "rt-envinj", "TrainingRuntime", trainer={"numNodes": 2}),)))
    cases.append(Case("torch-envinj-missing", runtimes=(training_runtime("rt-envinj-x", runtime_spec(
        {"torch": {"envInjection": {"targets": [{"jobName": "node", "containerNames": ["ghost"]}]}}},
        [job("node", [container("node")], ancestor="trainer")])),),
        jobs=(trainjob("torch-envinj-missing", "rt-envinj-x", "TrainingRuntime"),), origin="invalid"))

    # 5. invalid runtimes and TrainJobs
    cases.append(Case("rt-replicas-2", runtimes=(training_runtime("rt-replicas-2", runtime_spec({"torch": {}}, [
        {**job("node", [container("node")], ancestor="trainer"), "replicas": 2}])),), origin="invalid"))
    cases.append(Case("rt-no-node-container", runtimes=(training_runtime("rt-no-node-ctr", runtime_spec(
        {"torch": {}}, [job("node", [container("main")], ancestor="trainer")])),), origin="invalid"))
    cases.append(Case("rt-two-policies", runtimes=(training_runtime("rt-two-policies", runtime_spec(
        {"torch": {}, "mpi": {}}, [job("node", [container("node")], ancestor="trainer")])),), origin="invalid"))
    cases.append(Case("rt-opt-out", runtimes=(training_runtime("rt-opt-out", runtime_spec({"torch": {}}, [
        {**job("node", [container("main")], ancestor="trainer"), "replicas": 3}]),
        labels={"trainer.kubeflow.org/webhook-validation": "disabled"}),),
        deliberate=("runtime-webhook-opt-out",), origin="invalid"))
    ctr_bad = cluster_runtime({"apiVersion": API, "kind": "ClusterTrainingRuntime", "metadata": {"name": "bad-crt"},
                               "spec": runtime_spec({"torch": {}}, [
                                   {**job("node", [container("node")], ancestor="trainer"), "replicas": 2}])}, scope)
    cases.append(Case("crt-invalid", runtimes=(ctr_bad,), origin="invalid"))
    cases.append(Case("missing-crt", jobs=(trainjob("missing-crt", "no-such-runtime"),), origin="invalid",
                      note="known: NotFound wording (issue 12)"))
    cases.append(Case("missing-rt", jobs=(trainjob("missing-rt", "no-such-runtime", "TrainingRuntime"),),
                      origin="invalid", note="known: NotFound wording (issue 12)"))
    cases.append(Case("bad-runtime-kind", jobs=(trainjob("bad-runtime-kind", "torch-distributed", "Runtime"),),
                      origin="invalid"))
    bad_group = trainjob("bad-runtime-group", "torch-distributed")
    bad_group["spec"]["runtimeRef"]["apiGroup"] = "example.com"
    cases.append(Case("bad-runtime-group", jobs=(bad_group,), origin="invalid"))
    cases.append(Case("bad-managed-by", jobs=(trainjob("bad-managed-by", "torch-distributed",
                                                      managedBy="example.com/other"),), origin="invalid"))
    cases.append(Case("multikueue", jobs=(trainjob("multikueue", "torch-distributed",
                                                  managedBy="kueue.x-k8s.io/multikueue"),)))
    cases.append(Case("deadline-0", jobs=(trainjob("deadline-0", "torch-distributed", activeDeadlineSeconds=0),),
                      origin="invalid", deliberate=("door-check",)))
    cases.append(Case("command-too-many", jobs=(trainjob("command-too-many", "torch-distributed", trainer={
        "command": ["x"] * 129}),), origin="invalid", deliberate=("door-check",)))
    cases.append(Case("deadline-60", jobs=(trainjob("deadline-60", "torch-distributed", activeDeadlineSeconds=60),)))
    cases.append(Case("numnodes-negative", jobs=(trainjob("numnodes-negative", "torch-distributed",
                                                         trainer={"numNodes": -1}),), origin="invalid",
                      deliberate=("negative-numnodes",)))
    cases.append(Case("numnodes-string", jobs=(trainjob("numnodes-string", "torch-distributed",
                                                       trainer={"numNodes": "three"}),),
                      origin="invalid", deliberate=("door-check",)))
    cases.append(Case("name-uppercase", jobs=({**trainjob("x", "torch-distributed"), "metadata": {"name": "Name-Upper"}},),
                      origin="invalid"))
    cases.append(Case("unknown-field", jobs=(trainjob("unknown-field", "torch-distributed", bogus=1),),
                      origin="invalid"))
    cases.append(Case("env-dup", jobs=(trainjob("env-dup", "torch-distributed", trainer={
        "env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]}),), origin="invalid"))

    # 6. UPDATE sequences
    def seq(name: str, rt: str, first: dict[str, Any], *steps: dict[str, Any], kind: str = "ClusterTrainingRuntime",
            runtimes_: tuple[dict[str, Any], ...] = (), **kw: Any) -> Case:
        base = trainjob(name, rt, kind, **first)
        ups = []
        for s in steps:
            nxt = copy.deepcopy(base)
            nxt["spec"].update(copy.deepcopy(s))
            ups.append((nxt,))
            base = nxt
        return Case(name, runtimes=runtimes_, jobs=(trainjob(name, rt, kind, **first),), updates=tuple(ups),
                    origin="update", **kw)

    cases.append(seq("up-suspend-resume", "torch-distributed", {"trainer": {"numNodes": 2}},
                     {"suspend": True}, {"suspend": False}, deliberate=("resume-removes-suspended",)))
    cases.append(seq("up-resume", "torch-distributed", {"suspend": True, "trainer": {"numNodes": 2}},
                     {"suspend": False}, deliberate=("resume-removes-suspended",)))
    cases.append(seq("up-mpi-suspend", "mlx-distributed", {"trainer": {"numNodes": 2}}, {"suspend": True}))
    cases.append(seq("up-numnodes-running", "torch-distributed", {"trainer": {"numNodes": 2}},
                     {"trainer": {"numNodes": 4}}))
    cases.append(seq("up-numnodes-suspended", "torch-distributed", {"suspend": True, "trainer": {"numNodes": 2}},
                     {"trainer": {"numNodes": 4}}))
    cases.append(seq("up-runtime-ref", "torch-distributed", {}, {"runtimeRef": {
        "name": PREFIX + "jax-distributed", "kind": "ClusterTrainingRuntime", "apiGroup": "trainer.kubeflow.org"}}))
    cases.append(seq("up-managed-by", "torch-distributed", {}, {"managedBy": "kueue.x-k8s.io/multikueue"}))
    cases.append(seq("up-deadline", "torch-distributed", {"activeDeadlineSeconds": 60},
                     {"activeDeadlineSeconds": 120}))
    cases.append(seq("up-patch-running", "torch-distributed", {"runtimePatches": [
        patch("a.io/p", [pod_patch("node", nodeSelector={"a": "1"})])]},
        {"runtimePatches": [patch("a.io/p", [pod_patch("node", nodeSelector={"a": "2"})])]}))
    cases.append(seq("up-patch-suspended", "torch-distributed", {"suspend": True, "runtimePatches": [
        patch("a.io/p", [pod_patch("node", nodeSelector={"a": "1"})])]},
        {"runtimePatches": [patch("a.io/p", [pod_patch("node", nodeSelector={"a": "2"})])]},
        {"suspend": False}, deliberate=("resume-removes-suspended",)))
    cases.append(seq("up-patch-resume-atomic", "torch-distributed", {"suspend": True},
                     {"suspend": False, "runtimePatches": [patch("kueue.x-k8s.io/manager", [
                         pod_patch("node", nodeSelector={"zone": "a"})])]}, deliberate=("resume-removes-suspended",)))
    cases.append(seq("up-patch-add-manager", "torch-distributed", {"suspend": True, "runtimePatches": [
        patch("a.io/p", metadata={"labels": {"a": "1"}})]},
        {"runtimePatches": [patch("a.io/p", metadata={"labels": {"a": "1"}}),
                            patch("b.io/q", metadata={"labels": {"b": "1"}})]}))
    cases.append(seq("up-patch-immutable-sa", "torch-distributed", {"suspend": True, "runtimePatches": [
        patch("a.io/p", [pod_patch("node", serviceAccountName="a")])]},
        {"runtimePatches": [patch("a.io/p", [pod_patch("node", serviceAccountName="b")])]}))
    cases.append(seq("up-initializer", "rt-init", {"suspend": True, "initializer": {"dataset": {"storageUri": "hf://a/b"}}},
                     {"initializer": {"dataset": {"storageUri": "hf://a/c"}}}, kind="TrainingRuntime"))
    cases.append(seq("up-env-suspended", "torch-distributed", {"suspend": True, "trainer": {"env": ENV}},
                     {"trainer": {"env": ENV[:1]}}))
    cases.append(seq("up-reapply", "torch-distributed", {"trainer": {"numNodes": 2}}, {}))
    cases.append(seq("up-xgb-suspend-resume", "xgboost-distributed", {"trainer": {"numNodes": 3}},
                     {"suspend": True}, {"suspend": False}, deliberate=("resume-removes-suspended",)))
    cases.append(seq("up-cosched-suspend", "rt-cosched", {"trainer": {"numNodes": 2}}, {"suspend": True},
                     kind="TrainingRuntime"))
    # a runtime update: TrainingRuntime validated on CREATE only upstream
    rt_up = training_runtime("rt-upd", runtime_spec({"torch": {}}, [job("node", [container("node")], ancestor="trainer")]))
    rt_up_bad = copy.deepcopy(rt_up)
    rt_up_bad["spec"]["template"]["spec"]["replicatedJobs"][0]["replicas"] = 2
    cases.append(Case("rt-update-invalid", runtimes=(rt_up,), updates=((rt_up_bad,),), origin="update",
                      deliberate=("trainingruntime-update-validation",)))
    crt_up = cluster_runtime({"apiVersion": API, "kind": "ClusterTrainingRuntime", "metadata": {"name": "crt-upd"},
                              "spec": copy.deepcopy(rt_up["spec"])}, scope)
    crt_up_bad = copy.deepcopy(crt_up)
    crt_up_bad["spec"]["template"]["spec"]["replicatedJobs"][0]["replicas"] = 2
    cases.append(Case("crt-update-invalid", runtimes=(crt_up,), updates=((crt_up_bad,),), origin="update"))
    return cases
