"""Family 1: upstream parity (TrainJob and runtime webhooks) through ``kubectl apply`` against the real apiserver.

Each case applies a runtime (admitted) and then a TrainJob, or a runtime alone, and asserts the outcome as the user
sees it: admitted (with the warnings kubectl prints), a 403 ``admission webhook "..." denied the request: ...``
with the upstream path and message, or a 422 from the CRD schema/CEL (the webhook never consulted).
``{rt}`` in an expected string is replaced by the case's runtime name.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from policy_cluster import (
    CTR_VALIDATOR,
    TR_VALIDATOR,
    TRAINJOB_VALIDATOR,
    Admitted,
    Denied,
    Invalid,
    Kube,
    Outcome,
    check,
    container_patch,
    patch,
    rjob,
    runtime,
    trainer_job,
    trainjob,
    unique,
)

DEPRECATED = {"trainer.kubeflow.org/support": "deprecated"}
DATASET = {"dataset": {"storageUri": "hf://acme/data"}}
MODEL = {"model": {"storageUri": "hf://acme/model"}}
INIT_JOB_OK = rjob("dataset-initializer", ancestor="dataset-initializer", containers=("dataset-initializer",),
                   mounts={"dataset-initializer": ["initializer"]})
MPI = {"numNodes": 1, "mpi": {"runLauncherAsNode": True, "mpiImplementation": "OpenMPI", "numProcPerNode": 1}}


@dataclass(frozen=True)
class JobCase:
    id: str
    expected: Outcome
    runtime: dict[str, Any] = field(default_factory=dict)  # kwargs of policy_cluster.runtime; None name: no runtime
    create_runtime: bool = True
    job: dict[str, Any] = field(default_factory=dict)      # kwargs of policy_cluster.trainjob
    runtime_warnings: tuple[str, ...] = ()


def deny(*parts: str, warnings: tuple[str, ...] = ()) -> Denied:
    return Denied(TRAINJOB_VALIDATOR, parts, warnings)


JOB_CASES = [
    # the runtime lookup: missing runtimes, with upstream's capitalised spec.RuntimeRef quirk for the cluster kind.
    JobCase("missing-trainingruntime", deny(
        "spec.runtimeRef: Invalid value: ",
        'TrainingRuntime.trainer.kubeflow.org "{rt}" not found: specified trainingRuntime must be created before '
        "the TrainJob is created"), runtime={"kind": "TrainingRuntime"}, create_runtime=False,
        job={"kind": "TrainingRuntime"}),
    JobCase("missing-clustertrainingruntime", deny(
        "spec.RuntimeRef: Invalid value: ",
        'ClusterTrainingRuntime.trainer.kubeflow.org "{rt}" not found: specified clusterTrainingRuntime must be '
        "created before the TrainJob is created"), create_runtime=False),
    JobCase("existing-trainingruntime", Admitted(), runtime={"kind": "TrainingRuntime"}, job={"kind": "TrainingRuntime"}),
    # a deprecated runtime (trainer.kubeflow.org/support=deprecated) -> warning on the TrainJob and on its own create.
    JobCase("deprecated-runtime-warns", Admitted((
        'Referenced ClusterTrainingRuntime "{rt}" is deprecated and will be removed in a future release of Kubeflow '
        "Trainer. See runtime deprecation policy: https://trainer.kubeflow.org/en/latest/operator-guides/"
        "runtime.html#runtime-deprecation-policy",)),
        runtime={"labels": DEPRECATED}, runtime_warnings=('ClusterTrainingRuntime "{rt}" is deprecated',)),
    # JobSet plugin: initializer job / container / volumeMount.
    JobCase("dataset-initializer-job-missing", deny(
        "spec.runtimeRef: Invalid value: ",
        "must have dataset-initializer job when trainJob is configured with input datasetConfig"),
        job={"initializer": DATASET}),
    JobCase("model-initializer-job-missing", deny(
        "must have model-initializer job when trainJob is configured with input modelConfig"), job={"initializer": MODEL}),
    JobCase("dataset-initializer-container-missing", deny(
        "must have container with name - dataset-initializer in the dataset-initializer job"),
        runtime={"jobs": [rjob("dataset-initializer", containers=("fetch",)), trainer_job()]}, job={"initializer": DATASET}),
    JobCase("dataset-initializer-volumemount-missing", deny(
        "must have volumeMount with name - initializer in container dataset-initializer of the dataset-initializer job"),
        runtime={"jobs": [rjob("dataset-initializer", ancestor="dataset-initializer", containers=("dataset-initializer",)),
                          trainer_job()]}, job={"initializer": DATASET}),
    JobCase("dataset-initializer-complete", Admitted(), runtime={"jobs": [INIT_JOB_OK, trainer_job()]},
            job={"initializer": DATASET}),
    # JobSet plugin: runtimePatches.
    JobCase("patch-manager-not-domain-prefixed", deny(
        'spec.runtimePatches.manager: Invalid value: "scheduler": must be a domain-prefixed path (such as "acme.io/foo")'),
        job={"patches": [patch("scheduler", labels={"a": "b"})]}),
    JobCase("patch-unknown-replicated-job", deny(
        "spec.runtimePatches: Invalid value: ",
        "must not have replicated job that doesn't exist in the runtime job template"),
        job={"patches": [patch("acme.io/p", [container_patch("worker", "node")])]}),
    JobCase("patch-unknown-container", deny("must not have container that doesn't exist in the runtime job node"),
            job={"patches": [patch("acme.io/p", [container_patch("node", "sidecar")])]}),
    JobCase("patch-unknown-init-container", deny("must not have initContainer that doesn't exist in the runtime job node"),
            job={"patches": [patch("acme.io/p", [container_patch("node", "setup", init=True)])]}),
    JobCase("patch-env-on-node-container", deny(
        "must not have envs for the dataset-initializer, model-initializer, node containers"),
        job={"patches": [patch("acme.io/p", [container_patch("node", "node", env={"A": "1"})])]}),
    JobCase("patch-existing-container-ok", Admitted(), runtime={"jobs": [trainer_job(containers=("node", "sidecar"))]},
            job={"patches": [patch("acme.io/p", [container_patch("node", "sidecar", env={"A": "1"})])]}),
    # Torch: reserved PET_* envs (one error, names sorted).
    JobCase("torch-reserved-env", deny(
        "spec.trainer.env: Invalid value: ",
        "must not have reserved envs, invalid envs configured: [PET_MASTER_PORT PET_NNODES]"),
        job={"trainer": {"env": [{"name": "PET_NNODES", "value": "2"}, {"name": "PET_MASTER_PORT", "value": "1"},
                                 {"name": "OK", "value": "1"}]}}),
    JobCase("torch-plain-env-ok", Admitted(), job={"trainer": {"env": [{"name": "NCCL_DEBUG", "value": "INFO"}]}}),
    # MPI: runLauncherAsNode without a launcher job; reserved OMPI_* envs.
    JobCase("mpi-launcher-as-node-two-nodes", deny(
        "spec.trainer.numNodes: Invalid value: 2: must have 1 when MPI trainingRuntime with enabled runLauncherAsNode "
        "does not have either launcher and node"), runtime={"ml_policy": MPI}, job={"trainer": {"numNodes": 2}}),
    JobCase("mpi-launcher-as-node-one-node", Admitted(), runtime={"ml_policy": MPI}, job={"trainer": {"numNodes": 1}}),
    JobCase("mpi-reserved-env", deny(
        "must not have reserved envs, invalid envs configured: [OMPI_MCA_orte_default_hostfile]"),
        runtime={"ml_policy": MPI}, job={"trainer": {"env": [{"name": "OMPI_MCA_orte_default_hostfile", "value": "/x"}]}}),
    # XGBoost: each reserved DMLC_* env is a Forbidden at its index.
    JobCase("xgboost-reserved-env", deny(
        "spec.trainer.env[1]: Forbidden: DMLC_TRACKER_URI is reserved for the XGBoost runtime"),
        runtime={"ml_policy": {"numNodes": 1, "xgboost": {}}},
        job={"trainer": {"env": [{"name": "A", "value": "1"}, {"name": "DMLC_TRACKER_URI", "value": "x"}]}}),
    # Flux: numProcPerNode < 1 from the TrainJob is the webhook's (403); from the runtime it is CEL's (422, below).
    JobCase("flux-numprocpernode-zero", deny(
        "spec.trainer.numProcPerNode: Invalid value: 0: must be greater than or equal to 1 for Flux TrainJob"),
        runtime={"ml_policy": {"numNodes": 1, "flux": {}}}, job={"trainer": {"numProcPerNode": 0}}),
    JobCase("flux-installer-reserved", deny(
        "spec.trainer.initContainers: Invalid value: \"flux-installer\": InitContainer 'flux-installer' is reserved"),
        runtime={"ml_policy": {"numNodes": 1, "flux": {}}, "jobs": [trainer_job(init_containers=("flux-installer",))]}),
    JobCase("flux-ok", Admitted(), runtime={"ml_policy": {"numNodes": 1, "flux": {}}}, job={"trainer": {"numProcPerNode": 2}}),
    # Schema/CEL failures are 422 from the apiserver itself, never a webhook 403.
    JobCase("managedby-cel-422", Invalid((
        "spec.managedBy: Invalid value: ",
        "ManagedBy must be trainer.kubeflow.org/trainjob-controller or kueue.x-k8s.io/multikueue if set")),
        job={"managedBy": "acme.io/controller"}),
]


def _fill(text: str, rt: str) -> str:
    return text.replace("{rt}", rt)


def _filled(expected: Outcome, rt: str) -> Outcome:
    if isinstance(expected, Admitted):
        return Admitted(tuple(_fill(w, rt) for w in expected.warnings))
    if isinstance(expected, Denied):
        return Denied(expected.webhook, tuple(_fill(p, rt) for p in expected.parts),
                      tuple(_fill(w, rt) for w in expected.warnings))
    return Invalid(tuple(_fill(p, rt) for p in expected.parts))


@pytest.mark.parametrize("case", JOB_CASES, ids=lambda c: c.id)
def test_trainjob_rule(kube: Kube, namespace: str, case: JobCase) -> None:
    rt = unique("rt")
    kind = case.runtime.get("kind", "ClusterTrainingRuntime")
    if case.create_runtime:
        proc = kube.apply(runtime(rt, namespace, **case.runtime))
        check(proc, Admitted(tuple(_fill(w, rt) for w in case.runtime_warnings)))
    job_kw = dict(case.job)
    job_kw.setdefault("kind", kind)
    proc = kube.apply(trainjob(unique("tj"), namespace, rt, **job_kw), wait_cache=case.create_runtime)
    check(proc, _filled(case.expected, rt))


# --- runtimePatches[].time stamping, and patch changes only while suspended --------------------------------------


def _patches(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["manager"]: p for p in obj["spec"].get("runtimePatches") or []}


def test_runtime_patch_times_stamped_on_create_and_kept_on_reapply(kube: Kube, namespace: str) -> None:
    rt, name = unique("rt"), unique("tj")
    kube.create(runtime(rt, namespace))
    client_time = "2020-01-02T03:04:05Z"
    job = trainjob(name, namespace, rt, suspend=True, patches=[
        patch("acme.io/a", labels={"a": "1"}), patch("acme.io/b", labels={"b": "1"}, time_=client_time)])
    check(proc := kube.apply(job), Admitted())
    stored = _patches(json.loads(proc.stdout))
    stamped = stored["acme.io/a"]["time"]
    assert stamped.endswith("Z") and stamped != client_time
    assert stored["acme.io/b"]["time"] == client_time  # CREATE keeps a client-supplied time

    # Re-apply the same manifest (no times for a): an UPDATE whose entries are equal ignoring time keeps the old
    # times, even though kubectl's merge now sends a time for b that the client changes.
    job["spec"]["runtimePatches"][1]["time"] = "2021-01-01T00:00:00Z"
    check(again := kube.apply(job), Admitted())
    stored = _patches(json.loads(again.stdout))
    assert stored["acme.io/a"]["time"] == stamped
    assert stored["acme.io/b"]["time"] == client_time

    # Content change of b while suspended: admitted, b re-stamped to the admission time, a untouched.
    job["spec"]["runtimePatches"][1] = patch("acme.io/b", labels={"b": "2"}, time_=client_time)
    check(changed := kube.apply(job), Admitted())
    stored = _patches(json.loads(changed.stdout))
    assert stored["acme.io/a"]["time"] == stamped
    assert stored["acme.io/b"]["time"] not in (client_time, "2021-01-01T00:00:00Z")
    assert stored["acme.io/b"]["trainingRuntimeSpec"]["template"]["metadata"]["labels"] == {"b": "2"}


def test_runtime_patch_change_only_while_suspended(kube: Kube, namespace: str) -> None:
    rt, name = unique("rt"), unique("tj")
    kube.create(runtime(rt, namespace))
    job = trainjob(name, namespace, rt, suspend=False, patches=[patch("acme.io/a", labels={"a": "1"})])
    check(kube.apply(job), Admitted())
    job["spec"]["runtimePatches"] = [patch("acme.io/a", labels={"a": "2"})]
    check(kube.apply(job), Denied(TRAINJOB_VALIDATOR, (
        "spec.runtimePatches: Forbidden: RuntimePatches can only be modified when the TrainJob is suspended before "
        "or after the update",)))
    # Suspending in the same request is allowed (2.2.1+: suspended before OR after), as Kueue relies on.
    job["spec"]["suspend"] = True
    check(kube.apply(job), Admitted())
    assert _patches(kube.get("trainjob", name))["acme.io/a"]["trainingRuntimeSpec"]["template"]["metadata"]["labels"] == {"a": "2"}
    # Immutable runtimeRef: CEL (422), not the webhook.
    job["spec"]["runtimeRef"]["name"] = "other"
    check(kube.apply(job, wait_cache=False), Invalid(("spec.runtimeRef: Invalid value: ", "field is immutable")))


# --- upstream's runtime webhooks and trainguard's stricter runtime checks ----------------------------------------


@dataclass(frozen=True)
class RuntimeCase:
    id: str
    jobs: list[dict[str, Any]]
    parts: tuple[str, ...]  # () = admitted
    ml_policy: dict[str, Any] | None = None
    labels: dict[str, str] = field(default_factory=dict)
    invalid: bool = False   # a 422 from CEL instead of a webhook denial


P = "spec.template.spec.replicatedJobs"
RUNTIME_CASES = [
    RuntimeCase("trainer-replicas-not-one", [trainer_job(replicas=2)], (f"{P}[0].replicas: Invalid value: 2: always must be 1",)),
    RuntimeCase("initializer-replicas-not-one",
                [rjob("model-initializer", ancestor="model-initializer", containers=("model-initializer",), replicas=3),
                 trainer_job()], (f"{P}[0].replicas: Invalid value: 3: always must be 1",)),
    RuntimeCase("trainer-without-node-container", [rjob("node", ancestor="trainer", containers=("main",))],
                (f'{P}[0].template.spec.template.spec.containers: Invalid value: [{{"image":"ghcr.io/acme/base:1","name":"main","resources":{{}}}}]: '
                 "must contain the required container for the ancestor: trainer",)),
    RuntimeCase("dataset-initializer-without-its-container",
                [rjob("dataset-initializer", ancestor="dataset-initializer", containers=("x",)), trainer_job()],
                ("must contain the required container for the ancestor: dataset-initializer",)),
    RuntimeCase("unknown-ancestor-ignored", [rjob("aux", ancestor="evaluator", containers=("x",), replicas=2), trainer_job()], ()),
    # trainguard's stricter checks (upstream admits these and fails at the first TrainJob).
    # Duplicate names: the CRD declares replicatedJobs a list-map keyed by name, so the apiserver answers 422 before
    # any webhook; trainguard's own duplicate check is reachable only through `trainguard render`.
    RuntimeCase("duplicate-replicated-job-names", [trainer_job(), rjob("node")],
                (f'{P}[1]: Duplicate value: {{"name":"node"}}',), invalid=True),
    RuntimeCase("depends-on-missing-job", [trainer_job(), rjob("eval", containers=("eval",), depends_on=("prep",))],
                (f'{P}[1].dependsOn[0].name: Invalid value: "prep": must name a replicatedJob defined before eval; '
                 "this one does not exist (replicatedJobs: node, eval)",)),
    RuntimeCase("depends-on-later-job", [rjob("prep", containers=("p",), depends_on=("node",)), trainer_job()],
                ("this one is defined after this job",)),
    RuntimeCase("depends-on-earlier-job-ok", [rjob("prep", containers=("p",)), trainer_job(depends_on=("prep",))], ()),
    RuntimeCase("torch-without-node-job", [rjob("trainer", containers=("t",))],
                (f'{P}: Invalid value: ["trainer"]: mlPolicy.torch needs a replicatedJob named "node"',)),
    # 422: the runtime CRD's CEL rule, before any webhook.
    RuntimeCase("flux-runtime-numprocpernode-cel", [trainer_job()], ("NumProcPerNode in fluxPolicy must be >= 1",),
                ml_policy={"numNodes": 1, "flux": {"numProcPerNode": 0}}, invalid=True),
]


@pytest.mark.parametrize("kind", ["ClusterTrainingRuntime", "TrainingRuntime"])
@pytest.mark.parametrize("case", RUNTIME_CASES, ids=lambda c: c.id)
def test_runtime_rule(kube: Kube, namespace: str, case: RuntimeCase, kind: str) -> None:
    obj = runtime(unique("rt"), namespace, kind=kind, jobs=case.jobs, ml_policy=case.ml_policy, labels=case.labels)
    proc = kube.apply(obj)
    if case.invalid:
        check(proc, Invalid(case.parts))
    elif case.parts:
        check(proc, Denied(CTR_VALIDATOR if kind == "ClusterTrainingRuntime" else TR_VALIDATOR, case.parts))
    else:
        check(proc, Admitted())


@pytest.mark.parametrize(("kind", "skipped"), [("ClusterTrainingRuntime", True), ("TrainingRuntime", False)])
def test_upstream_opt_out_label_only_on_admin_written_runtimes(kube: Kube, namespace: str, kind: str, skipped: bool) -> None:
    """Upstream's ``trainer.kubeflow.org/webhook-validation: disabled`` (objectSelector) skips the webhook for a
    ClusterTrainingRuntime, which only cluster admins write; a namespaced TrainingRuntime, written by namespace users,
    is validated anyway (issue 10: no object opts itself out; a deliberate difference from upstream v2.3)."""
    obj = runtime(unique("rt"), namespace, kind=kind, jobs=[trainer_job(replicas=2)],
                  labels={"trainer.kubeflow.org/webhook-validation": "disabled"})
    if skipped:
        check(kube.apply(obj), Admitted())
    else:
        check(kube.apply(obj), Denied(TR_VALIDATOR, (f"{P}[0].replicas: Invalid value: 2: always must be 1",)))


@pytest.mark.parametrize("kind", ["ClusterTrainingRuntime", "TrainingRuntime"])
def test_runtime_update_is_validated(kube: Kube, namespace: str, kind: str) -> None:
    """Upstream skips TrainingRuntime UPDATEs; trainguard validates both kinds on UPDATE."""
    obj = runtime(unique("rt"), namespace, kind=kind)
    check(kube.apply(obj), Admitted())
    obj["spec"]["template"]["spec"]["replicatedJobs"][0]["replicas"] = 4
    check(kube.apply(obj), Denied(CTR_VALIDATOR if kind == "ClusterTrainingRuntime" else TR_VALIDATOR,
                                  (f"{P}[0].replicas: Invalid value: 4: always must be 1",)))


def test_deprecated_cluster_runtime_warns_on_create_only(kube: Kube, namespace: str) -> None:
    rt = unique("rt")
    obj = runtime(rt, namespace, labels=DEPRECATED)
    check(kube.apply(obj), Admitted((
        f'ClusterTrainingRuntime "{rt}" is deprecated and will be removed in a future release of Kubeflow Trainer',)))
    obj["metadata"]["annotations"] = {"note": "edited"}
    check(kube.apply(obj), Admitted())  # UPDATE: validated, no warning (upstream warns on CREATE only)
