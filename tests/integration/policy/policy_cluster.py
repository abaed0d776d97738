"""Builders and kubectl helpers for the policy integration tests (``tests/integration/policy``).

Every object goes through ``kubectl apply`` against the session's real apiserver, with ``trainguard webhook``
registered for the test's namespace by the ``admission`` fixture (cluster-scoped objects carry the
``trainguard.io/test-scope: <namespace>`` label so that this test's registration sees them).

The webhook reads runtimes, policies and DatasetCaches from watch-backed caches, so an object created a moment
before may not be visible yet. ``Kube.apply`` therefore retries ONLY while the answer is the "not in the cache
yet" denial for an object this test created; policies are waited for with ``Kube.wait_policy`` (a marker label
every test policy sets as a default, observed in a server-side dry run).
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

import yaml

GROUP = "trainer.kubeflow.org"
API = f"{GROUP}/v1alpha1"
TG_API = "trainguard.io/v1alpha1"
SCOPE_LABEL = "trainguard.io/test-scope"
ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
TRAINJOB_VALIDATOR = "validator.trainjob.trainer.kubeflow.org"
TR_VALIDATOR = "validator.trainingruntime.trainer.kubeflow.org"
CTR_VALIDATOR = "validator.clustertrainingruntime.trainer.kubeflow.org"
POLICY_VALIDATOR = "validator.trainjobpolicy.trainguard.io"
CACHE_VALIDATOR = "validator.datasetcache.trainguard.io"
POLICY_MANAGER = "trainguard.io/policy"
NOT_CACHED_YET = ("must be created before the TrainJob is created", "no DatasetCache ")

Object = dict[str, Any]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


# --- builders -----------------------------------------------------------------------------------------------------


def rjob(name: str, *, ancestor: str | None = None, containers: tuple[str, ...] = ("node",), replicas: int | None = None,
         depends_on: tuple[str, ...] = (), mounts: dict[str, list[str]] | None = None, gpus: int | None = None,
         init_containers: tuple[str, ...] = (), image: str = "ghcr.io/acme/base:1") -> Object:
    """A replicatedJob; ``mounts`` maps container -> volumeMount names; ``gpus`` is the node container's request."""
    def container(c: str) -> Object:
        out: Object = {"name": c, "image": image}
        if mounts and c in mounts:
            out["volumeMounts"] = [{"name": m, "mountPath": f"/{m}"} for m in mounts[c]]
        if gpus is not None and c == "node":
            out["resources"] = {"requests": {"nvidia.com/gpu": str(gpus)}, "limits": {"nvidia.com/gpu": str(gpus)}}
        return out

    pod: Object = {"containers": [container(c) for c in containers]}
    if init_containers:
        pod["initContainers"] = [{"name": c, "image": image} for c in init_containers]
    if mounts:
        pod["volumes"] = [{"name": m, "emptyDir": {}} for m in sorted({m for ms in mounts.values() for m in ms})]
    job: Object = {"name": name, "template": {"spec": {"template": {"spec": pod}}}}
    if ancestor:
        job["template"]["metadata"] = {"labels": {ANCESTOR: ancestor}}
    if replicas is not None:
        job["replicas"] = replicas
    if depends_on:
        job["dependsOn"] = [{"name": d, "status": "Complete"} for d in depends_on]
    return job


def trainer_job(**kw: Any) -> Object:
    return rjob("node", ancestor="trainer", **kw)


def runtime(name: str, namespace: str, *, kind: str = "ClusterTrainingRuntime", jobs: list[Object] | None = None,
            ml_policy: Object | None = None, labels: dict[str, str] | None = None,
            annotations: dict[str, str] | None = None) -> Object:
    """A runtime; cluster-scoped ones carry the test-scope label so this test's webhook registration sees them."""
    meta: Object = {"name": name, "labels": {"trainer.kubeflow.org/framework": "torch", **(labels or {})}}
    if kind == "ClusterTrainingRuntime":
        meta["labels"][SCOPE_LABEL] = namespace
    else:
        meta["namespace"] = namespace
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": API, "kind": kind, "metadata": meta, "spec": {
        "mlPolicy": ml_policy if ml_policy is not None else {"numNodes": 1, "torch": {}},
        "template": {"spec": {"replicatedJobs": jobs if jobs is not None else [trainer_job()]}},
    }}


def trainjob(name: str, namespace: str, runtime_name: str, *, kind: str = "ClusterTrainingRuntime",
             trainer: Object | None = None, patches: list[Object] | None = None, labels: dict[str, str] | None = None,
             annotations: dict[str, str] | None = None, suspend: bool | None = None, **spec: Any) -> Object:
    meta: Object = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    body: Object = {"runtimeRef": {"name": runtime_name, "kind": kind, "apiGroup": GROUP}, **spec}
    if trainer is not None:
        body["trainer"] = trainer
    if patches is not None:
        body["runtimePatches"] = patches
    if suspend is not None:
        body["suspend"] = suspend
    return {"apiVersion": API, "kind": "TrainJob", "metadata": meta, "spec": body}


def patch(manager: str, jobs: list[Object] | None = None, labels: dict[str, str] | None = None,
          time_: str | None = None) -> Object:
    template: Object = {}
    if labels:
        template["metadata"] = {"labels": labels}
    if jobs is not None:
        template["spec"] = {"replicatedJobs": jobs}
    out: Object = {"manager": manager, "trainingRuntimeSpec": {"template": template}}
    if time_:
        out["time"] = time_
    return out


def container_patch(job: str, container: str, *, env: dict[str, str] | None = None, init: bool = False) -> Object:
    c: Object = {"name": container}
    if env:
        c["env"] = [{"name": k, "value": v} for k, v in env.items()]
    key = "initContainers" if init else "containers"
    return {"name": job, "template": {"spec": {"template": {"spec": {key: [c]}}}}}


def policy(name: str, namespace: str, spec: Object, *, extra_namespaces: tuple[str, ...] = ()) -> Object:
    """A TrainJobPolicy selecting only ``namespace`` (plus ``extra_namespaces``), with the test-scope label and a
    marker default label ``sync.trainguard.io/<name>`` that ``Kube.wait_policy`` watches for."""
    spec = json.loads(json.dumps(spec))
    spec.setdefault("selector", {})["namespaceSelector"] = {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": [namespace, *extra_namespaces]}]}
    spec.setdefault("defaults", {}).setdefault("labels", {})[marker(name)] = "on"
    return {"apiVersion": TG_API, "kind": "TrainJobPolicy", "metadata": {"name": name, "labels": {SCOPE_LABEL: namespace}},
            "spec": spec}


def marker(policy_name: str) -> str:
    return f"sync.trainguard.io/{policy_name}"


def dataset_cache(name: str, namespace: str, **spec: Any) -> Object:
    body: Object = {"source": {"hostPath": {"path": "/data"}, "shards": "train-*.arrow"}, "memoryBudget": "1Gi", **spec}
    return {"apiVersion": TG_API, "kind": "DatasetCache", "metadata": {"name": name, "namespace": namespace}, "spec": body}


# --- outcomes -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Admitted:
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Denied:
    """HTTP 403 from a validating webhook: kubectl prints ``Error from server (Forbidden)`` and the apiserver's
    ``admission webhook "<webhook>" denied the request: <message>``; every ``parts`` substring must appear."""

    webhook: str
    parts: tuple[str, ...]
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Invalid:
    """HTTP 422 from the CRD schema / CEL: ``The <Kind> "<name>" is invalid: ...``, the webhook never consulted."""

    parts: tuple[str, ...]


Outcome = Admitted | Denied | Invalid


def warning_lines(stderr: str) -> list[str]:
    return [line[len("Warning: "):] for line in stderr.splitlines() if line.startswith("Warning: ")]


def check(proc: Any, expected: Outcome) -> None:
    """Assert ``proc`` (a kubectl apply/create) ended as ``expected``."""
    err = proc.stderr
    if isinstance(expected, Admitted):
        assert proc.returncode == 0, err
        shown = warning_lines(err)
        for w in expected.warnings:
            assert any(w in line for line in shown), f"warning {w!r} not printed; got {shown}"
        if not expected.warnings:
            assert shown == [], f"unexpected warnings {shown}"
    elif isinstance(expected, Denied):
        assert proc.returncode != 0, f"admitted, expected a denial by {expected.webhook}"
        assert "Error from server (Forbidden)" in err, err
        assert f'admission webhook "{expected.webhook}" denied the request: ' in err, err
        message = err.split("denied the request: ", 1)[1]
        for p in expected.parts:
            assert p in message, f"{p!r} not in denial: {message}"
        for w in expected.warnings:
            assert any(w in line for line in warning_lines(err)), f"warning {w!r} not printed; got {err}"
    else:
        assert proc.returncode != 0, "admitted, expected a 422"
        assert " is invalid: " in err and "admission webhook" not in err, err
        for p in expected.parts:
            assert p in err, f"{p!r} not in: {err}"


# --- kubectl ------------------------------------------------------------------------------------------------------


@dataclass
class Kube:
    cluster: Any
    namespace: str
    cleanup: list[tuple[str, str]] = field(default_factory=list)  # cluster-scoped (kind, name) to delete

    def apply(self, obj: Object | str, *, dry_run: bool = False, wait_cache: bool = True, retries: int = 75) -> Any:
        """``kubectl apply -o json``; with ``wait_cache``, retried while the webhook's cache has not yet seen a
        runtime or DatasetCache this test just created (the only denial that means "not yet")."""
        text = obj if isinstance(obj, str) else json.dumps(obj)
        if not isinstance(obj, str) and not (obj.get("metadata") or {}).get("namespace") and obj["kind"] in (
                "ClusterTrainingRuntime", "TrainJobPolicy"):
            self.cleanup.append((obj["kind"], obj["metadata"]["name"]))
        args = ["apply", "-o", "json", "-f", "-"] + (["--dry-run=server"] if dry_run else [])
        proc = None
        for _ in range(retries if wait_cache else 1):
            proc = self.cluster.kubectl(*args, input=text, check=False)
            if proc.returncode == 0 or not any(s in proc.stderr for s in NOT_CACHED_YET):
                return proc
            time.sleep(0.2)
        return proc

    def create(self, obj: Object) -> Object:
        proc = self.apply(obj)
        check(proc, Admitted(tuple(warning_lines(proc.stderr))))  # any warnings are the caller's to assert
        return json.loads(proc.stdout)

    def get(self, resource: str, name: str, namespaced: bool = True) -> Object:
        args = ["get", resource, name, "-o", "json"] + (["-n", self.namespace] if namespaced else [])
        return json.loads(self.cluster.kubectl(*args).stdout)

    def wait_policy(self, probe: Object, *names: str, timeout: float = 30) -> None:
        """Block until a server-side dry run of ``probe`` (an admissible TrainJob) carries every named policy's
        marker label: the webhook's policy cache has seen them."""
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            proc = self.apply(probe, dry_run=True)
            # A denial or warning naming every policy also proves they are cached (limits refusing the probe).
            if all(f'TrainJobPolicy "{n}"' in proc.stderr for n in names):
                return
            if proc.returncode == 0:
                labels = json.loads(proc.stdout)["metadata"].get("labels") or {}
                if all(labels.get(marker(n)) == "on" for n in names):
                    return
                last = json.dumps(labels)
            else:
                last = proc.stderr
            time.sleep(0.2)
        raise AssertionError(f"policies {names} never reached the webhook's cache: {last}")

    def wait_cached(self, probe: Callable[[], bool], what: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if probe():
                return
            time.sleep(0.2)
        raise AssertionError(f"{what} never reached the webhook's cache")

    def delete_cluster_objects(self) -> None:
        for kind, name in reversed(self.cleanup):
            self.cluster.kubectl("delete", kind.lower(), name, "--ignore-not-found", "--wait=false", check=False)


def dump(objs: list[Object]) -> str:
    return yaml.safe_dump_all(objs)
