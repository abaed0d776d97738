"""Admission and the JobSet build over a set of manifests, with no cluster: the engine of ``trainguard render``.

Everything here is a function of its arguments: YAML text in (``load_documents``), a cluster snapshot built from the
documents (``build_snapshot``), then every runtime, policy and DatasetCache validated and each TrainJob mutated,
validated and built (``render``) with the webhook's own pipeline (``trainguard.webhook.policy.pipeline``) and the
reconciler's build (``trainguard.webhook.runtime``). The admission time comes in as ``now``; reading files, the clock
and printing belong to the command (``trainguard.webhook.render``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import yaml

from trainguard.webhook.api import strict
from trainguard.webhook.api.constants import LABEL_WEBHOOK_VALIDATION, WEBHOOK_VALIDATION_DISABLED
from trainguard.webhook.api.strict import Schema
from trainguard.webhook.api.views import KubeObject
from trainguard.webhook.policy import pipeline
from trainguard.webhook.policy.dataset_cache import DatasetCacheSources
from trainguard.webhook.policy.dataset_cache_agents import DatasetCacheAgents
from trainguard.webhook.policy.runtime_ref import resolve_runtime
from trainguard.webhook.policy.verdict import AdmissionInput, ClusterSnapshot, Verdict
from trainguard.webhook.runtime import BuildError, build_objects, build_runtime_snapshot, placeholder_keys
from trainguard.webhook.runtime.dataset_cache import referenced_cache_name
from trainguard.webhook.runtime.snapshot import PLACEHOLDER_UID

# The chart's release namespace, where the controller keeps runtime snapshots unless told otherwise.
DEFAULT_SNAPSHOT_NAMESPACE = "trainguard-system"
# Every kind render reads, with the one apiVersion it is served as here (kubectl refuses a pair the cluster lacks).
API_VERSIONS = {
    "TrainJob": "trainer.kubeflow.org/v1alpha1", "TrainingRuntime": "trainer.kubeflow.org/v1alpha1",
    "ClusterTrainingRuntime": "trainer.kubeflow.org/v1alpha1", "TrainJobPolicy": "trainguard.io/v1alpha1",
    "DatasetCache": "trainguard.io/v1alpha1", "Namespace": "v1", "JobSet": "jobset.x-k8s.io/v1alpha2",
    "PriorityClass": "scheduling.k8s.io/v1",
}
KINDS = tuple(API_VERSIONS)
# Built-in kinds with no CRD in crds/: only their metadata is checked strictly.
NON_CRD_KINDS = ("Namespace", "JobSet", "PriorityClass")


class InputError(Exception):
    """Input that cannot be read; the message names the file and line (exit 2)."""


@dataclass(frozen=True)
class Doc:
    obj: dict[str, Any]
    origin: str  # "file:line"

    @property
    def kind(self) -> str:
        return str(KubeObject(self.obj).kind or "")

    @property
    def name(self) -> str:
        return str(KubeObject(self.obj).metadata.name or "")

    @property
    def namespace(self) -> str:
        return str(KubeObject(self.obj).metadata.namespace or "")


def load_documents(path: str, text: str) -> list[Doc]:
    """Every non-empty YAML document of ``text`` with the line it starts on; kinds outside ``KINDS`` are refused."""
    docs: list[Doc] = []
    loader = yaml.SafeLoader(text)
    try:
        while loader.check_node():
            node = loader.get_node()
            line = node.start_mark.line + 1 if node is not None else 0
            obj = loader.construct_document(node) if node is not None else None
            if obj is None:
                continue
            origin = f"{path}:{line}"
            if not isinstance(obj, dict):
                raise InputError(f"{origin}: expected a Kubernetes object (a mapping), got {type(obj).__name__}")
            if obj.get("kind") not in KINDS:
                raise InputError(f"{origin}: unknown kind {obj.get('kind')!r}; render understands {', '.join(KINDS)}")
            if obj.get("apiVersion") != API_VERSIONS[obj["kind"]]:
                got = f"apiVersion {obj['apiVersion']!r}" if obj.get("apiVersion") else "no apiVersion"
                raise InputError(f"{origin}: {obj['kind']} has {got}; set apiVersion: {API_VERSIONS[obj['kind']]}")
            if not KubeObject(obj).metadata.name:
                raise InputError(f"{origin}: {obj['kind']} has no metadata.name")
            docs.append(Doc(obj, origin))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else path
        raise InputError(f"{where}: not valid YAML: {getattr(e, 'problem', None) or e}") from e
    finally:
        loader.dispose()
    return docs


def check_documents(docs: list[Doc], schemas: dict[tuple[str, str], Schema]) -> None:
    """Strict decoding of every document against its CRD's schema (``schemas``: ``strict.schemas_from_crds``), as
    ``kubectl apply --validate=strict``: raise ``InputError`` listing each document's unknown fields and wrong
    types (at most ``strict.MAX_ERRORS`` each). Drops nulls of non-nullable fields, as the apiserver does."""
    problems: list[str] = []
    for d in docs:
        key = (str(d.obj.get("apiVersion")), d.kind)
        schema = strict.METADATA_ONLY if d.kind in NON_CRD_KINDS else schemas.get(key)
        if schema is None:
            problems.append(f"{d.origin}: no CRD schema for {key[0]} {d.kind}")
            continue
        what = f'{d.origin}: {d.kind} "{d.name}"'
        problems += [f"{what} {e}" for e in strict.summary(strict.decode_errors(d.obj, schema))]
    if problems:
        raise InputError("\n".join(problems))


def _namespace(obj: dict[str, Any]) -> str:
    """The namespace of a namespaced object. kubectl puts one that names none (or null) into ``default``; so does
    render, writing it into the object."""
    metadata = obj.setdefault("metadata", {})
    if not metadata.get("namespace"):
        metadata["namespace"] = "default"
    return KubeObject(obj).metadata.namespace


def build_snapshot(docs: list[Doc]) -> ClusterSnapshot:
    training_runtimes, cluster_runtimes, policies, namespaces, caches, jobsets = {}, {}, {}, {}, {}, {}
    priority_classes: set[str] = set()
    for d in docs:
        if d.kind == "TrainingRuntime":
            training_runtimes[(_namespace(d.obj), d.name)] = d.obj
        elif d.kind == "ClusterTrainingRuntime":
            cluster_runtimes[d.name] = d.obj
        elif d.kind == "TrainJobPolicy":
            policies[d.name] = d.obj
        elif d.kind == "Namespace":
            namespaces[d.name] = dict(KubeObject(d.obj).metadata.labels)
        elif d.kind == "DatasetCache":
            caches[(_namespace(d.obj), d.name)] = d.obj
        elif d.kind == "JobSet":
            jobsets[(_namespace(d.obj), d.name)] = d.obj
        elif d.kind == "PriorityClass":
            priority_classes.add(d.name)
    return ClusterSnapshot(
        training_runtimes=training_runtimes, cluster_training_runtimes=cluster_runtimes, policies=policies,
        namespace_labels=namespaces, dataset_caches=caches, jobsets=jobsets,
        priority_classes=frozenset(priority_classes),
    )


class Denied(Exception):
    """Admission (or the build) refused an object (exit 1)."""


@dataclass
class Rendering:
    objects: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


_VALIDATORS = {
    "TrainingRuntime": pipeline.validate_training_runtime,
    "ClusterTrainingRuntime": pipeline.validate_cluster_training_runtime,
    "TrainJobPolicy": pipeline.validate_trainjob_policy,
    "DatasetCache": pipeline.validate_dataset_cache,
}


def _check(verdict: Verdict, what: str, out: Rendering) -> None:
    out.warnings += list(verdict.warnings)
    if not verdict.allowed:
        raise Denied(f"{what} denied: {verdict.message}")


def render(docs: list[Doc], *, now: datetime, operation: str = "CREATE", old_docs: list[Doc] = (),
           out: Rendering | None = None, snapshot_namespace: str = DEFAULT_SNAPSHOT_NAMESPACE,
           dataset_cache_sources: DatasetCacheSources = DatasetCacheSources(),
           dataset_cache_agents: DatasetCacheAgents = DatasetCacheAgents()) -> Rendering:
    """Admit and build every TrainJob in ``docs``; raise ``Denied`` on the first refusal (warnings gathered so far
    stay in ``out``)."""
    # The admin's DatasetCache settings are flags of the webhook, not objects, so they are flags here too.
    snapshot = replace(build_snapshot(docs), dataset_cache_sources=dataset_cache_sources,
                       dataset_cache_agents=dataset_cache_agents)
    out = out if out is not None else Rendering()
    for d in docs:
        validate = _VALIDATORS.get(d.kind)
        labels = KubeObject(d.obj).metadata.labels
        # Upstream's opt-out label counts on admin-written ClusterTrainingRuntimes only, as in the webhook's registration.
        if validate is None or (d.kind == "ClusterTrainingRuntime"
                                and labels.get(LABEL_WEBHOOK_VALIDATION) == WEBHOOK_VALIDATION_DISABLED):
            continue
        _check(validate(AdmissionInput("CREATE", d.obj, None, now, namespace=d.namespace), snapshot),
               f"{d.kind} {d.name!r} ({d.origin})", out)

    olds = {(_namespace(o.obj), o.name): o.obj
            for o in old_docs if o.kind == "TrainJob"}
    for d in docs:
        if d.kind != "TrainJob":
            continue
        obj = d.obj
        namespace = _namespace(obj)
        what = f'TrainJob "{namespace}/{d.name}" ({d.origin})'
        old = olds.get((namespace, d.name)) if operation == "UPDATE" else None
        if operation == "UPDATE" and old is None:
            raise InputError(f"{d.origin}: --operation UPDATE needs the old TrainJob {namespace}/{d.name} in --old")
        review = AdmissionInput(operation, obj, old, now, namespace=namespace)
        mutated = pipeline.mutate_trainjob(review, snapshot)
        _check(mutated, what, out)
        admitted = mutated.obj if mutated.obj is not None else obj
        validated = pipeline.validate_trainjob(
            AdmissionInput(operation, admitted, old, now, namespace=namespace), snapshot)
        _check(validated, what, out)
        runtime = _runtime_of(admitted, namespace, snapshot)
        cache = _dataset_cache_of(admitted, namespace, snapshot)
        try:
            built = build_objects(admitted, runtime, keys=placeholder_keys(), dataset_cache=cache)
            with_uid = {**admitted, "metadata": {"uid": PLACEHOLDER_UID, **KubeObject(admitted).metadata.raw}}
            built.append(build_runtime_snapshot(with_uid, runtime, snapshot_namespace))
        except BuildError as e:
            raise Denied(f"{what}: the runtime build fails: {e}") from e
        out.objects += [admitted] + built
    return out


def _runtime_of(trainjob: dict[str, Any], namespace: str, snapshot: ClusterSnapshot) -> dict[str, Any]:
    runtime = resolve_runtime(trainjob, namespace, snapshot).runtime
    assert runtime is not None, "validate_trainjob admitted a TrainJob whose runtime is missing"
    return runtime


def _dataset_cache_of(trainjob: dict[str, Any], namespace: str, snapshot: ClusterSnapshot) -> Any:
    name = referenced_cache_name(trainjob)
    return snapshot.dataset_caches.get((namespace, name)) if name else None
