"""``trainguard render``: admission and the JobSet build on files, with no cluster.

A policy author's test bench: feed it TrainJobs with the runtimes, TrainJobPolicies, DatasetCaches and Namespaces
they depend on, and it prints what the cluster would store and build::

    trainguard render -f runtime.yaml -f policy.yaml -f job.yaml [--operation UPDATE --old old-job.yaml]
                      [--now 2026-09-01T12:00:00Z]

It runs exactly what the webhook runs (``trainguard.webhook.policy.pipeline``): every runtime, policy and DatasetCache in the
input is validated first (ClusterTrainingRuntimes labelled ``trainer.kubeflow.org/webhook-validation: disabled`` are
skipped, as the webhook's objectSelector skips them; namespaced TrainingRuntimes never are; DatasetCache sources are checked against the admin's setting, given with
the webhook's flags ``--dataset-cache-allowed-host-path ROOT`` and ``--no-dataset-cache-allow-pvc``); then each
TrainJob goes through the mutating and then the validating webhook, and the admitted TrainJob through the runtime
build (``trainguard.webhook.runtime``). Output, one YAML stream on stdout: per TrainJob, the admitted (mutated) TrainJob, then
every object the reconciler would apply (JobSet, MPI SSH Secret with a placeholder key, hostfile ConfigMap,
PodGroup, Flux objects, cache wiring inside the JobSet) and the runtime snapshot ConfigMap, in the controller's
namespace (``--snapshot-namespace``, default ``trainguard-system``), named from the TrainJob's UID (a placeholder
UID when the input has none).

Exit status: 0 admitted; 1 denied (or the build fails), the message on stderr; 2 unreadable input or an unknown
kind, naming the file and line. Warnings go to stderr as ``Warning: ...``, as kubectl prints them.

This module is the CLI edge: it reads files and, when ``--now`` is not given, the clock; the engine it calls is pure.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, TextIO

import yaml

from trainguard.webhook.api.constants import LABEL_WEBHOOK_VALIDATION, WEBHOOK_VALIDATION_DISABLED
from trainguard.webhook.cli import Run
from trainguard.webhook.dataset_cache_flags import add_dataset_cache_source_flags, dataset_cache_sources
from trainguard.webhook.policy import pipeline
from trainguard.webhook.policy.dataset_cache import DatasetCacheSources
from trainguard.webhook.policy.verdict import AdmissionInput, ClusterSnapshot, Verdict

TRAINER_API = "trainer.kubeflow.org/v1alpha1"
# The chart's release namespace, where the controller keeps runtime snapshots unless told otherwise.
DEFAULT_SNAPSHOT_NAMESPACE = "trainguard-system"
KINDS = ("TrainJob", "TrainingRuntime", "ClusterTrainingRuntime", "TrainJobPolicy", "DatasetCache", "Namespace",
         "JobSet", "PriorityClass")


class InputError(Exception):
    """Input that cannot be read; the message names the file and line (exit 2)."""


@dataclass(frozen=True)
class Doc:
    obj: dict[str, Any]
    origin: str  # "file:line"

    @property
    def kind(self) -> str:
        return str(self.obj.get("kind") or "")

    @property
    def name(self) -> str:
        return str((self.obj.get("metadata") or {}).get("name") or "")

    @property
    def namespace(self) -> str:
        return str((self.obj.get("metadata") or {}).get("namespace") or "")


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
            if not isinstance(obj.get("metadata"), dict) or not obj["metadata"].get("name"):
                raise InputError(f"{origin}: {obj['kind']} has no metadata.name")
            docs.append(Doc(obj, origin))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else path
        raise InputError(f"{where}: not valid YAML: {getattr(e, 'problem', None) or e}") from e
    finally:
        loader.dispose()
    return docs


def read_files(paths: list[str]) -> list[Doc]:
    docs: list[Doc] = []
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise InputError(f"{path}: cannot read: {e}") from e
        docs += load_documents(path, text)
    return docs


def _with_default_namespace(obj: dict[str, Any]) -> dict[str, Any]:
    """kubectl puts namespaced objects without a namespace into ``default``; so does render."""
    meta = obj.setdefault("metadata", {})
    meta.setdefault("namespace", "default")
    return obj


def build_snapshot(docs: list[Doc]) -> ClusterSnapshot:
    training_runtimes, cluster_runtimes, policies, namespaces, caches, jobsets = {}, {}, {}, {}, {}, {}
    priority_classes: set[str] = set()
    for d in docs:
        if d.kind == "TrainingRuntime":
            training_runtimes[(_with_default_namespace(d.obj)["metadata"]["namespace"], d.name)] = d.obj
        elif d.kind == "ClusterTrainingRuntime":
            cluster_runtimes[d.name] = d.obj
        elif d.kind == "TrainJobPolicy":
            policies[d.name] = d.obj
        elif d.kind == "Namespace":
            namespaces[d.name] = dict((d.obj.get("metadata") or {}).get("labels") or {})
        elif d.kind == "DatasetCache":
            caches[(_with_default_namespace(d.obj)["metadata"]["namespace"], d.name)] = d.obj
        elif d.kind == "JobSet":
            jobsets[(_with_default_namespace(d.obj)["metadata"]["namespace"], d.name)] = d.obj
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
           dataset_cache_sources: DatasetCacheSources = DatasetCacheSources()) -> Rendering:
    """Admit and build every TrainJob in ``docs``; raise ``Denied`` on the first refusal (warnings gathered so far
    stay in ``out``)."""
    from trainguard.webhook.runtime import BuildError, build_objects, build_runtime_snapshot, placeholder_keys
    from trainguard.webhook.runtime.snapshot import PLACEHOLDER_UID

    # The admin's DatasetCache source setting is a flag of the webhook, not an object, so it is a flag here too.
    snapshot = replace(build_snapshot(docs), dataset_cache_sources=dataset_cache_sources)
    out = out if out is not None else Rendering()
    for d in docs:
        validate = _VALIDATORS.get(d.kind)
        labels = (d.obj.get("metadata") or {}).get("labels") or {}
        # Upstream's opt-out label counts on admin-written ClusterTrainingRuntimes only, as in the webhook's registration.
        if validate is None or (d.kind == "ClusterTrainingRuntime"
                                and labels.get(LABEL_WEBHOOK_VALIDATION) == WEBHOOK_VALIDATION_DISABLED):
            continue
        _check(validate(AdmissionInput("CREATE", d.obj, None, now, namespace=d.namespace), snapshot),
               f"{d.kind} {d.name!r} ({d.origin})", out)

    olds = {(_with_default_namespace(o.obj)["metadata"]["namespace"], o.name): o.obj
            for o in old_docs if o.kind == "TrainJob"}
    for d in docs:
        if d.kind != "TrainJob":
            continue
        obj = _with_default_namespace(d.obj)
        namespace = obj["metadata"]["namespace"]
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
            with_uid = {**admitted, "metadata": {"uid": PLACEHOLDER_UID, **admitted.get("metadata", {})}}
            built.append(build_runtime_snapshot(with_uid, runtime, snapshot_namespace))
        except BuildError as e:
            raise Denied(f"{what}: the runtime build fails: {e}") from e
        out.objects += [admitted] + built
    return out


def _runtime_of(trainjob: dict[str, Any], namespace: str, snapshot: ClusterSnapshot) -> dict[str, Any]:
    from trainguard.webhook.policy.runtime_ref import resolve_runtime

    runtime = resolve_runtime(trainjob, namespace, snapshot).runtime
    assert runtime is not None, "validate_trainjob admitted a TrainJob whose runtime is missing"
    return runtime


def _dataset_cache_of(trainjob: dict[str, Any], namespace: str, snapshot: ClusterSnapshot) -> Any:
    from trainguard.webhook.runtime.dataset_cache import referenced_cache_name

    name = referenced_cache_name(trainjob)
    return snapshot.dataset_caches.get((namespace, name)) if name else None


def parse_now(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"--now must be an RFC 3339 time such as 2026-09-01T12:00:00Z: {e}") from e
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def configure(parser: argparse.ArgumentParser) -> Run:
    parser.description = (
        "Run trainguard's admission (mutating + validating webhooks) and the JobSet build on manifest files, "
        "offline. Prints the admitted TrainJob and every object the reconciler would create."
    )
    parser.add_argument("-f", "--filename", dest="files", action="append", required=True, metavar="FILE",
                        help="multi-document YAML with TrainJobs, runtimes, TrainJobPolicies, DatasetCaches, "
                             "Namespaces (repeatable)")
    parser.add_argument("--operation", choices=("CREATE", "UPDATE"), default="CREATE",
                        help="admission operation to simulate (default CREATE)")
    parser.add_argument("--old", metavar="FILE", help="the stored TrainJob(s), for --operation UPDATE")
    parser.add_argument("--now", type=parse_now, metavar="RFC3339",
                        help="admission time (runtimePatches[].time); default: the current time")
    parser.add_argument("--snapshot-namespace", default=DEFAULT_SNAPSHOT_NAMESPACE, metavar="NS",
                        help="the controller's namespace, where it keeps runtime snapshots (default %(default)s)")

    add_dataset_cache_source_flags(parser)

    def run(args: argparse.Namespace) -> int:
        return main(args.files, operation=args.operation, old=args.old, now=args.now,
                    snapshot_namespace=args.snapshot_namespace, dataset_cache_sources=dataset_cache_sources(args))

    return run


def main(files: list[str], *, operation: str = "CREATE", old: str | None = None, now: datetime | None = None,
         stdout: TextIO | None = None, stderr: TextIO | None = None,
         snapshot_namespace: str = DEFAULT_SNAPSHOT_NAMESPACE,
         dataset_cache_sources: DatasetCacheSources = DatasetCacheSources()) -> int:
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    if operation == "UPDATE" and not old:
        print("trainguard render: --operation UPDATE needs --old FILE", file=stderr)
        return 2
    result = Rendering()
    try:
        docs = read_files(files)
        old_docs = read_files([old]) if old else []
        render(docs, now=now or datetime.now(timezone.utc), operation=operation, old_docs=old_docs, out=result,
               snapshot_namespace=snapshot_namespace, dataset_cache_sources=dataset_cache_sources)
    except InputError as e:
        print(f"trainguard render: {e}", file=stderr)
        return 2
    except Denied as e:
        _print_warnings(result, stderr)
        print(f"trainguard render: {e}", file=stderr)
        return 1
    _print_warnings(result, stderr)
    yaml.safe_dump_all(result.objects, stdout, sort_keys=False, explicit_start=True, default_flow_style=False)
    return 0


def _print_warnings(result: Rendering, stderr: TextIO) -> None:
    for w in dict.fromkeys(result.warnings):
        print(f"Warning: {w}", file=stderr)
