"""``trainguard render``: admission and the JobSet build on files, with no cluster.

A policy author's test bench: feed it TrainJobs with the runtimes, TrainJobPolicies, DatasetCaches and Namespaces
they depend on, and it prints what the cluster would store and build::

    trainguard render -f runtime.yaml -f policy.yaml -f job.yaml [--operation UPDATE --old old-job.yaml]
                      [--now 2026-09-01T12:00:00Z]

It runs exactly what the webhook runs (``trainguard.webhook.policy.pipeline``): every runtime, policy and DatasetCache in the
input is validated first (ClusterTrainingRuntimes labelled ``trainer.kubeflow.org/webhook-validation: disabled`` are
skipped, as the webhook's objectSelector skips them; namespaced TrainingRuntimes never are; DatasetCache sources are checked against the admin's setting, given with
the webhook's flags ``--dataset-cache-allowed-host-path ROOT`` and ``--no-dataset-cache-allow-pvc``, and what they ask
for their agents against ``--dataset-cache-allowed-priority-classes`` and the other agent flags); then each
TrainJob goes through the mutating and then the validating webhook, and the admitted TrainJob through the runtime
build (``trainguard.webhook.runtime``). Output, one YAML stream on stdout: per TrainJob, the admitted (mutated) TrainJob, then
every object the reconciler would apply (JobSet, MPI SSH Secret with a placeholder key, hostfile ConfigMap,
PodGroup, Flux objects, cache wiring inside the JobSet) and the runtime snapshot ConfigMap, in the controller's
namespace (``--snapshot-namespace``, default ``trainguard-system``), named from the TrainJob's UID (a placeholder
UID when the input has none).

The input is read as ``kubectl apply --validate=strict`` reads it: ``-f -`` is stdin, a directory is every *.yaml,
*.yml and *.json under it (recursively, sorted); each document must have its kind's apiVersion and is decoded against
its CRD's schema (``--crds DIR``, default the checkout's ``crds/``; ``trainguard.webhook.api.strict``), so an unknown
field or a wrong type is an error naming the file, the object and the field's path, never ignored or copied out.

Exit status: 0 admitted; 1 denied (or the build fails), the message on stderr; 2 unreadable input, an unknown kind,
a wrong apiVersion, unknown fields or wrong types, naming the file and line; 141 (128 + SIGPIPE, no traceback) when
the reader closes stdout early. Warnings go to stderr as ``Warning: ...``, as kubectl prints them.

This module is the command's shell: it reads the files, the clock (when ``--now`` is not given) and prints; the
engine, ``trainguard.webhook.offline``, is pure.
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import TextIO

import yaml

from trainguard.webhook.cli import Run
from trainguard.webhook.dataset_cache_flags import add_dataset_cache_flags, dataset_cache_agents, dataset_cache_sources
from trainguard.webhook.offline import (
    DEFAULT_SNAPSHOT_NAMESPACE, Denied, Doc, InputError, Rendering, build_snapshot, check_documents, load_documents,
    render,
)
from trainguard.webhook.api.strict import Schema, schemas_from_crds
from trainguard.webhook.policy.dataset_cache import DatasetCacheSources
from trainguard.webhook.policy.dataset_cache_agents import DatasetCacheAgents

# 128 + SIGPIPE: what a shell reports for a filter whose reader closed the pipe.
EXIT_BROKEN_PIPE = 141

__all__ = ["Denied", "Doc", "InputError", "Rendering", "build_snapshot", "configure", "load_documents", "main",
           "parse_now", "read_files", "render"]


# crds/ of the checkout this module runs from (the image does not ship it: pass --crds there).
DEFAULT_CRDS = Path(__file__).resolve().parents[1] / "crds"
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


def read_files(paths: list[str], stdin: TextIO | None = None) -> list[Doc]:
    """The documents of every file, as ``kubectl -f``: ``-`` is stdin, a directory is every *.yaml, *.yml and *.json
    under it, recursively, in sorted order."""
    docs: list[Doc] = []
    for path in paths:
        if path == "-":
            docs += load_documents("<stdin>", (stdin or sys.stdin).read())
            continue
        files = (sorted(str(p) for p in Path(path).rglob("*") if p.suffix in MANIFEST_SUFFIXES and p.is_file())
                 if Path(path).is_dir() else [path])
        for name in files:
            try:
                with open(name, encoding="utf-8") as f:
                    text = f.read()
            except (OSError, UnicodeDecodeError) as e:
                raise InputError(f"{name}: cannot read: {e}") from e
            docs += load_documents(name, text)
    return docs


def read_schemas(crd_dir: Path) -> dict[tuple[str, str], Schema]:
    """The served schemas of the CRDs in ``crd_dir`` (*.yaml)."""
    files = sorted(crd_dir.glob("*.yaml")) if crd_dir.is_dir() else []
    if not files:
        raise InputError(f"{crd_dir}: no CRDs to check the input against; pass --crds DIR (the repository's crds/)")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return schemas_from_crds(doc for f in files for doc in yaml.load_all(f.read_text(encoding="utf-8"), loader)
                                 if isinstance(doc, dict))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise InputError(f"{crd_dir}: cannot read the CRDs: {e}") from e


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
    parser.add_argument("--crds", type=Path, default=DEFAULT_CRDS, metavar="DIR",
                        help="the CRDs the input is checked against, strictly (default: the checkout's crds/)")
    parser.add_argument("--snapshot-namespace", default=DEFAULT_SNAPSHOT_NAMESPACE, metavar="NS",
                        help="the controller's namespace, where it keeps runtime snapshots (default %(default)s)")

    add_dataset_cache_flags(parser)

    def run(args: argparse.Namespace) -> int:
        return main(args.files, operation=args.operation, old=args.old, now=args.now,
                    snapshot_namespace=args.snapshot_namespace, dataset_cache_sources=dataset_cache_sources(args),
                    dataset_cache_agents=dataset_cache_agents(args), crds=args.crds)

    return run


def main(files: list[str], *, operation: str = "CREATE", old: str | None = None, now: datetime | None = None,
         stdout: TextIO | None = None, stderr: TextIO | None = None,
         snapshot_namespace: str = DEFAULT_SNAPSHOT_NAMESPACE,
         dataset_cache_sources: DatasetCacheSources = DatasetCacheSources(),
         dataset_cache_agents: DatasetCacheAgents = DatasetCacheAgents(), crds: Path = DEFAULT_CRDS,
         stdin: TextIO | None = None) -> int:
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    if operation == "UPDATE" and not old:
        print("trainguard render: --operation UPDATE needs --old FILE", file=stderr)
        return 2
    result = Rendering()
    try:
        schemas = read_schemas(crds)
        docs = read_files(files, stdin)
        old_docs = read_files([old], stdin) if old else []
        check_documents(docs + old_docs, schemas)
        render(docs, now=now or datetime.now(timezone.utc), operation=operation, old_docs=old_docs, out=result,
               snapshot_namespace=snapshot_namespace, dataset_cache_sources=dataset_cache_sources,
               dataset_cache_agents=dataset_cache_agents)
    except InputError as e:
        for line in str(e).splitlines():
            print(f"trainguard render: {line}", file=stderr)
        return 2
    except Denied as e:
        _print_warnings(result, stderr)
        print(f"trainguard render: {e}", file=stderr)
        return 1
    _print_warnings(result, stderr)
    try:
        yaml.safe_dump_all(result.objects, stdout, sort_keys=False, explicit_start=True, default_flow_style=False)
        stdout.flush()
    except BrokenPipeError:
        # The reader went away (`render ... | head`): stop quietly with the status a process killed by SIGPIPE has,
        # as kubectl does; point stdout at /dev/null so the interpreter's own flush at exit cannot fail again.
        if stdout is sys.stdout:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    return 0


def _print_warnings(result: Rendering, stderr: TextIO) -> None:
    for w in dict.fromkeys(result.warnings):
        print(f"Warning: {w}", file=stderr)
