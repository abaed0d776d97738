"""A small real cluster for fuzzing the pipeline: the examples, the runtime tests' runtimes and a DatasetCache.

Everything here is what a cluster would hold: the shipped examples (``examples/*.yaml``: the torch runtime, the
namespaced plain-batch runtime, the GPU policy and its team namespace, two TrainJobs), the runtimes of
the runtime-framework tests (MPI, plus one single-job runtime per remaining ML policy), an Audit-mode KAI policy
beside the Enforce one, and a DatasetCache a TrainJob opts into. ``mutations`` turns one of these objects into a
hostile variant the way a user's client could send it: wrong JSON types, over-limit lists and strings, malformed
quantities, deleted or unknown fields, duplicated items.
"""

from __future__ import annotations

import copy
import random
from pathlib import Path
from typing import Any

import yaml

from tests.unit.runtime.fixtures import LLM_DDP, MPI_RUNTIME, single_job_runtime
from trainguard.webhook.policy.verdict import ClusterSnapshot

REPO = Path(__file__).resolve().parents[3]
NAMESPACE = "team-a"


def _examples() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted((REPO / "examples").glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


EXAMPLES = _examples()


def _of(kind: str) -> list[dict[str, Any]]:
    return [d for d in EXAMPLES if d["kind"] == kind]


def _runtime(name: str, ml_policy: dict | None, pod_group: dict | None = None) -> dict[str, Any]:
    rt = single_job_runtime(ml_policy, name=name, pod_group=pod_group,
                            container={"name": "node", "image": "ghcr.io/acme/train:1",
                                       "resources": {"requests": {"cpu": "4", "memory": "16Gi"},
                                                     "limits": {"nvidia.com/gpu": 8}}})
    return rt


CLUSTER_RUNTIMES = {r["metadata"]["name"]: r for r in _of("ClusterTrainingRuntime") + [
    MPI_RUNTIME,
    _runtime("jax-distributed", {"numNodes": 1, "jax": {}}),
    _runtime("xgboost-distributed", {"numNodes": 1, "xgboost": {}}),
    _runtime("flux-distributed", {"numNodes": 1, "flux": {"numProcPerNode": 2}}),
    _runtime("plain-volcano", {"numNodes": 1}, {"volcano": {"networkTopology": {"mode": "hard"}}}),
]}
TRAINING_RUNTIMES = {(r["metadata"]["namespace"], r["metadata"]["name"]): r for r in _of("TrainingRuntime")}

AUDIT_POLICY = {
    "apiVersion": "trainguard.io/v1alpha1", "kind": "TrainJobPolicy", "metadata": {"name": "kai-audit"},
    "spec": {"mode": "Audit", "priority": -1,
             "scheduling": {"kai": {"queue": "research"}},
             "topology": {"placement": "Preferred", "target": "KAI", "kaiTopology": "gpu-topology",
                          "levels": [{"nodeLabel": "kubernetes.io/hostname", "gpusPerDomain": 8}]},
             "limits": {"maxNodes": 64}}}
POLICIES = {p["metadata"]["name"]: p for p in _of("TrainJobPolicy") + [AUDIT_POLICY]}
NAMESPACES = {n["metadata"]["name"]: n["metadata"].get("labels") or {} for n in _of("Namespace")}

DATASET_CACHE = {
    "apiVersion": "trainguard.io/v1alpha1", "kind": "DatasetCache",
    "metadata": {"name": "imagenet", "namespace": NAMESPACE},
    "spec": {"source": {"hostPath": {"path": "/data"}, "shards": "*.arrow"}, "memoryBudget": "1Gi",
             "nodeSelector": {"nvidia.com/gpu.present": "true"}},
}


def snapshot() -> ClusterSnapshot:
    return ClusterSnapshot(
        training_runtimes=TRAINING_RUNTIMES, cluster_training_runtimes=CLUSTER_RUNTIMES, policies=POLICIES,
        namespace_labels=NAMESPACES, dataset_caches={(NAMESPACE, "imagenet"): DATASET_CACHE},
    )


def _trainjobs() -> list[dict[str, Any]]:
    jobs = [copy.deepcopy(j) for j in _of("TrainJob")]
    for name in CLUSTER_RUNTIMES:
        job = copy.deepcopy(LLM_DDP)
        job["metadata"] = {"name": f"on-{name}", "namespace": NAMESPACE,
                           "annotations": {"trainguard.io/dataset-cache": "imagenet"}}
        job["spec"]["runtimeRef"] = {"name": name}
        job["spec"]["trainer"]["image"] = "ghcr.io/acme/train:1"
        job["spec"]["runtimePatches"] = [{"manager": "acme.io/platform", "trainingRuntimeSpec": {"template": {"spec": {
            "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {
                "nodeSelector": {"pool": "a"}, "tolerations": [{"key": "k", "operator": "Exists"}]}}}}}]}}}}]
        jobs.append(job)
    return jobs


TRAINJOBS = _trainjobs()
OBJECTS: dict[str, list[dict[str, Any]]] = {
    "TrainJob": TRAINJOBS,
    "TrainingRuntime": list(TRAINING_RUNTIMES.values()),
    "ClusterTrainingRuntime": list(CLUSTER_RUNTIMES.values()),
    "TrainJobPolicy": list(POLICIES.values()),
    "DatasetCache": [DATASET_CACHE],
}


# --- mutations ------------------------------------------------------------------------------------------------

SCALARS: list[Any] = [None, True, False, 0, -1, 1, 7, 2**31, 2**63, -(2**63) - 1, 1.5, float("1e300"), "", "x",
                      "8 ", " 8", "8", "1Gi", "-1", "1e3", "NaN", "torch-distributed", "TrainingRuntime",
                      "Enforce", "node", "a" * 300, "ü" * 70, "$patch", "delete"]


def _values(rng: random.Random) -> Any:
    roll = rng.random()
    if roll < 0.55:
        return rng.choice(SCALARS)
    if roll < 0.65:
        return []
    if roll < 0.75:
        return {}
    if roll < 0.82:
        return [rng.choice(SCALARS) for _ in range(rng.randint(1, 3))]
    if roll < 0.88:
        return {rng.choice(["name", "manager", "key", "x", "$patch"]): rng.choice(SCALARS)}
    if roll < 0.94:
        return [{"name": f"N{i}", "value": "v"} for i in range(rng.choice([129, 300, 1000]))]  # over every maxItems
    return {f"k{i}": "v" for i in range(rng.choice([65, 300]))}


SAME_TYPE: dict[type, list[Any]] = {
    str: ["", "x", "node", "launcher", "trainer", "8", "1Gi", "500m", "torch-distributed", "plain-batch",
          "TrainingRuntime", "ClusterTrainingRuntime", "kueue.x-k8s.io/manager", "trainguard.io/policy",
          "ghcr.io/acme/x", "evil.io/x", "Exists", "Audit", "2026-09-01T11:59:59Z", "not a time"],
    int: [0, -1, 1, 3, 8, 9, 64, 1000, 2**31, 2**62],
    bool: [True, False],
    float: [0.5, 1.0, 2.5],
}


def _same_type(value: Any, rng: random.Random) -> Any:
    """A value of the same JSON type: well-formed, so the rules behind the door get exercised."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (str, int, float)):
        return rng.choice(SAME_TYPE[type(value)])
    if isinstance(value, list):
        return value[: rng.randint(0, len(value))]
    if isinstance(value, dict):
        return {k: v for k, v in value.items() if rng.random() < 0.7}
    return value


def _paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, prefix + (i,))
    return out


def mutate_once(obj: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """One to three random edits of a copy of ``obj`` (``metadata.name``/``namespace`` kept, so lookups still hit)."""
    out = copy.deepcopy(obj)
    for _ in range(rng.randint(1, 3)):
        paths = [p for p in _paths(out) if p and p[:2] not in (("metadata", "name"), ("metadata", "namespace"))
                 and p != ("kind",)]
        target = rng.choice(paths)
        parent = out
        for key in target[:-1]:
            parent = parent[key]
        last = target[-1]
        action = rng.random()
        if action < 0.45:
            parent[last] = _same_type(parent[last], rng)
        elif action < 0.55:
            parent.pop(last)
        elif action < 0.62 and isinstance(parent[last], list) and parent[last]:
            parent[last].append(copy.deepcopy(rng.choice(parent[last])))
        elif action < 0.7 and isinstance(parent[last], dict):
            parent[last][rng.choice(["futureField", "name", "$patch", "time"])] = _values(rng)
        else:
            parent[last] = _values(rng)
    return out
