"""``trainguard test``: policy tests with expected results, offline, like ``kyverno test``.

    trainguard test PATH... [--junit FILE] [--crds DIR] [--now RFC3339]

Each PATH is a test file (``kind: Test``, see ``trainguard.webhook.expectations``) or a directory searched
recursively for ``trainguard-test.yaml`` files. A test's ``files`` (relative to it) are read and strictly checked
as ``trainguard render`` reads its input; then every expected (TrainJob, policy) result is checked with the
webhook's own pipeline. Prints one line per expectation (``ok`` / ``FAIL`` with what differs) and a summary.

Exit status: 0 every expectation holds; 1 one or more do not; 2 unreadable input (a misspelt key of a test file, an
unknown field of a manifest, a missing file), naming the file and the field. ``--junit FILE`` also writes a JUnit
XML report (one testsuite per test file).

The command's shell: files, clock and output; the engine is pure (``expectations``).
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import TextIO

from trainguard.webhook.cli import Run
from trainguard.webhook.expectations import junit, parse_test, run_test
from trainguard.webhook.offline import InputError, check_documents
from trainguard.webhook.render import DEFAULT_CRDS, parse_now, read_files, read_schemas

TEST_FILE_NAME = "trainguard-test.yaml"


def find_tests(paths: list[str]) -> list[Path]:
    found: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found += sorted(p.rglob(TEST_FILE_NAME))
        elif p.is_file():
            found.append(p)
        else:
            raise InputError(f"{p}: no such file or directory")
    if not found:
        raise InputError(f"no {TEST_FILE_NAME} under {', '.join(paths)}")
    return found


def configure(parser: argparse.ArgumentParser) -> Run:
    parser.description = ("Check expected TrainJobPolicy results (pass / warn / fail / skip / error, optional "
                          "messages and mutated fields) for TrainJobs, offline, with the webhook's own pipeline.")
    parser.add_argument("paths", nargs="+", metavar="PATH", help=f"a test file, or a directory of {TEST_FILE_NAME}")
    parser.add_argument("--junit", type=Path, metavar="FILE", help="also write a JUnit XML report")
    parser.add_argument("--crds", type=Path, default=DEFAULT_CRDS, metavar="DIR",
                        help="the CRDs the manifests are checked against, strictly (default: the checkout's crds/)")
    parser.add_argument("--now", type=parse_now, metavar="RFC3339", help="admission time (default: now)")

    def run(args: argparse.Namespace) -> int:
        return main(args.paths, junit_path=args.junit, crds=args.crds, now=args.now)

    return run


def main(paths: list[str], *, junit_path: Path | None = None, crds: Path = DEFAULT_CRDS,
         now: datetime | None = None, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    now = now or datetime.now(timezone.utc)
    reports: list[str] = []
    failed = total = 0
    try:
        schemas = read_schemas(crds)
        for test_path in find_tests(paths):
            try:
                text = test_path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as e:
                raise InputError(f"{test_path}: cannot read: {e}") from e
            test = parse_test(str(test_path), text)
            docs = read_files([str(test_path.parent / f) for f in test.files])
            check_documents(docs, schemas)
            outcomes = run_test(test, docs, now)
            print(f"{test_path} ({test.metadata.name}):", file=stdout)
            for o in outcomes:
                what = f"{o.expected.trainjob} / {o.expected.policy}: {o.expected.result}"
                print(f"  ok    {what}" if o.ok else f"  FAIL  {what}", file=stdout)
                for problem in o.problems:
                    print(f"        {problem}", file=stdout)
            total += len(outcomes)
            failed += sum(not o.ok for o in outcomes)
            reports.append(junit(test.metadata.name, outcomes))
    except InputError as e:
        for line in str(e).splitlines():
            print(f"trainguard test: {line}", file=stderr)
        return 2
    print(f"{total - failed} of {total} expected results hold", file=stdout)
    if junit_path is not None:
        body = "".join(reports)
        junit_path.write_text(f'<?xml version="1.0" encoding="UTF-8"?>\n<testsuites>\n{body}</testsuites>\n',
                              encoding="utf-8")
    return 1 if failed else 0
