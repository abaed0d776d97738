#!/usr/bin/env python3
"""A CI rehearsal whose figures are stored: ``bash .ci/run`` on a clean clone of HEAD, its pytest summaries kept.

The README's suite size and durations (``make test``: N passed in M min S s; ``make test-node``: ...; the wall time of
the whole run) are read from ``bench/results/ci_rehearsal.json``, which this writes, not from a commit message.

    hack/rehearse.py                  clone HEAD into a temp directory, run `bash .ci/run` there (about 30 minutes;
                                      root, as .ci/run's make test-node needs), stream its output to a log, write
                                      bench/results/ci_rehearsal.{json,md}
    hack/rehearse.py --log FILE       parse an existing log instead (no run: commit, wall time and exit code are
                                      what the options say, the result is marked "source": "log")
    hack/rehearse.py --cold           the same from empty caches, as CI on a new machine: refuses unless the caches
                                      .ci/run fills (trainguard's build cache, Go's module and build caches, pip's
                                      cache) are absent or empty, so the run fills them itself; the result records
                                      "cold": true and the directories checked
    --cold --cache-root DIR           empty caches of its own under DIR (XDG_CACHE_HOME, GOMODCACHE, GOCACHE,
                                      PIP_CACHE_DIR there), leaving this machine's caches alone; DIR must be empty
    --out PREFIX                      where the .json and .md go (default bench/results/ci_rehearsal)

Only committed work is rehearsed (``git clone`` of HEAD): a dirty tree is not what CI would run. The pytest summary
lines (``=== 2927 passed, 12 deselected in 1437.21s (0:23:57) ===``) are taken in order: the first is ``make test``,
the second ``make test-node`` (.ci/run runs them in that order under ``set -e``, so a failing ``make test`` leaves
one summary, or none when it failed before pytest). A failed run still writes its result, the failure recorded, and
exits non-zero with a message; so does a run that exits 0 with fewer summaries than commands, or with failures in
them. Standard library only.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterable, TextIO

REPO = Path(__file__).resolve().parents[1]
COMMANDS = ("make test", "make test-node")  # .ci/run's order: the n-th pytest summary is the n-th command's
COUNTED = ("passed", "failed", "errors", "skipped", "deselected", "xfailed", "xpassed", "warnings")
# pytest's words for a count, singular or plural, to the key it is stored under (any other word: not a summary)
WORDS = {**{k: k for k in COUNTED}, "error": "errors", "warning": "warnings", "rerun": "reruns", "reruns": "reruns"}

ANSI = re.compile(r"\x1b\[[0-9;]*m")
# ==== 3 failed, 2920 passed, 12 deselected, 5 warnings, 2 errors in 1437.21s (0:23:57) ====
SUMMARY = re.compile(r"^=+ (?P<counts>.+?) in (?P<seconds>\d+(?:\.\d+)?)s(?: \((?P<hms>\d+:\d{2}:\d{2})\))? =+$")
COUNT = re.compile(r"^(?P<n>\d+) (?P<word>[a-z]+)$")
TAIL_LINES = 40
# What the installs print when a step ends: `build-tools: kube-apiserver: built in 312 s`, `torch-env: built in 166 s`,
# `images: base: built in 95 s (312M)`, `build-tools: done in 1803 s`.
BUILT = re.compile(r"^(?P<tool>build-tools|torch-env|images): (?:(?P<what>[\w./-]+): )?(?:built|done) in (?P<s>\d+) s")
# pytest --durations=0 lines: `12.34s call     tests/unit/x.py::test_a[p]`
DURATION = re.compile(r"^(?P<s>\d+(?:\.\d+)?)s (?P<phase>setup|call|teardown) +(?P<test>tests/\S+)")
# The rehearsal asks pytest for every test's durations (setup, call, teardown: a module's or session's fixtures are
# in its first test's setup), so the time of a suite can be put on its folders.
PYTEST_ADDOPTS = "--durations=0 --durations-min=0"


def parse_summary(line: str) -> dict[str, Any] | None:
    """The counts and duration of one pytest summary line, or None when the line is not one.

    Every key of COUNTED is present (0 when pytest did not print it); ``seconds`` is pytest's own float (the
    ``(h:mm:ss)`` pytest adds past a minute is its rounding and must agree with it). A line like a summary whose
    parts are not all ``<n> <one of pytest's words>`` (a test's own output) is not one.
    """
    found = SUMMARY.match(ANSI.sub("", line).strip())
    if not found:
        return None
    result: dict[str, Any] = dict.fromkeys(COUNTED, 0)
    body = found["counts"]
    if body != "no tests ran":
        for part in body.split(", "):
            count = COUNT.match(part)
            if not count or count["word"] not in WORDS:
                return None
            word = WORDS[count["word"]]
            result[word] = result.get(word, 0) + int(count["n"])
    result["seconds"] = float(found["seconds"])
    if found["hms"]:
        h, m, s = (int(x) for x in found["hms"].split(":"))
        if abs(h * 3600 + m * 60 + s - result["seconds"]) > 1:
            raise ValueError(f"pytest's summary disagrees with itself: {line.strip()!r}")
    result["summary"] = ANSI.sub("", line).strip().strip("= ")
    return result


def summaries(lines: Iterable[str]) -> list[dict[str, Any]]:
    return [s for s in map(parse_summary, lines) if s is not None]


def build_steps(lines: Iterable[str]) -> list[dict[str, Any]]:
    """Each install step that reported its time, in order (a cached step prints no time and is absent)."""
    out = []
    for line in lines:
        found = BUILT.match(ANSI.sub("", line).strip())
        if found:
            what = found["what"] or ("total" if " done in " in found.group(0) else "all")
            out.append({"tool": found["tool"], "what": what, "seconds": int(found["s"])})
    return out


def folder_seconds(lines: Iterable[str], depth: int = 3) -> list[dict[str, Any]]:
    """Seconds of setup + call + teardown per test folder (``tests/integration/chart``: the first ``depth`` parts
    of the path), slowest first, from pytest's ``--durations=0`` report."""
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for line in lines:
        found = DURATION.match(ANSI.sub("", line).strip())
        if not found:
            continue
        parts = found["test"].split("::")[0].split("/")
        folder = "/".join(parts[:depth]) if len(parts) > depth else "/".join(parts[:-1])
        sums[folder] = sums.get(folder, 0.0) + float(found["s"])
        if found["phase"] == "call":
            counts[folder] = counts.get(folder, 0) + 1
    return [{"folder": f, "seconds": round(t, 1), "tests": counts.get(f, 0)}
            for f, t in sorted(sums.items(), key=lambda kv: -kv[1])]


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def utc_now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def git(*args: str, cwd: Path = REPO) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def cache_dirs(env: dict[str, str]) -> dict[str, Path]:
    """The caches a run of .ci/run fills, where ``env`` puts them (the tools' own defaults otherwise)."""
    home = Path(env.get("HOME", str(Path.home())))
    xdg = Path(env.get("XDG_CACHE_HOME") or home / ".cache")
    return {
        "trainguard": xdg / "trainguard",
        "go-modules": Path(env.get("GOMODCACHE") or Path(env.get("GOPATH") or home / "go") / "pkg" / "mod"),
        "go-build": Path(env.get("GOCACHE") or xdg / "go-build"),
        "pip": Path(env.get("PIP_CACHE_DIR") or xdg / "pip"),
    }


def filled(dirs: dict[str, Path]) -> list[str]:
    """The caches among ``dirs`` that hold anything: a cold run needs none."""
    return [f"{name} ({path})" for name, path in dirs.items() if path.is_dir() and any(path.iterdir())]


def cold_env(root: Path | None) -> dict[str, str]:
    """The environment of a cold run: this one, or one whose caches all live in the empty directory ``root``."""
    env = dict(os.environ)
    if root is not None:
        env.update(XDG_CACHE_HOME=str(root / "cache"), GOMODCACHE=str(root / "gomod"), GOCACHE=str(root / "gobuild"),
                   PIP_CACHE_DIR=str(root / "pip"))
    return env


def run_env(base: dict[str, str] | None) -> dict[str, str]:
    env = dict(base if base is not None else os.environ)
    env["PYTEST_ADDOPTS"] = (env.get("PYTEST_ADDOPTS", "") + " " + PYTEST_ADDOPTS).strip()
    return env


def run_ci(clone: Path, log: TextIO, env: dict[str, str] | None = None) -> tuple[int, list[float]]:
    """``bash .ci/run`` in ``clone``, every output line written to ``log`` as it comes; (exit code, the offset in
    seconds from the start at which each pytest summary line appeared)."""
    start = time.monotonic()
    at: list[float] = []
    proc = subprocess.Popen(["bash", ".ci/run"], cwd=clone, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, text=True, errors="replace", bufsize=1, start_new_session=True,
                            env=run_env(env))
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            log.write(line)
            log.flush()
            if SUMMARY.match(ANSI.sub("", line).strip()):
                at.append(round(time.monotonic() - start, 1))
        return proc.wait(), at
    except KeyboardInterrupt:
        os.killpg(proc.pid, signal.SIGTERM)  # .ci/run's whole process group: make, pytest, the clusters it started
        proc.wait()
        log.write("\nrehearse: interrupted\n")
        return 130, at


def result_of(lines: list[str], *, source: str, commit: str, started: str | None, finished: str | None,
              load_start: list[float] | None, load_end: list[float] | None, wall: float | None,
              exit_code: int | None, at: list[float] | None = None, log: str | None = None,
              cold: dict[str, str] | None = None) -> dict[str, Any]:
    found = summaries(lines)
    commands = []
    for i, name in enumerate(COMMANDS):
        entry: dict[str, Any] = {"name": name, "ran": i < len(found)}
        if i < len(found):
            entry.update(found[i])
            if at and i < len(at):
                entry["finished_at_seconds"] = at[i]
        commands.append(entry)
    problems = []
    if exit_code not in (0, None):
        problems.append(f"bash .ci/run exited {exit_code}")
    if len(found) > len(COMMANDS):
        problems.append(f"{len(found)} pytest summaries, expected {len(COMMANDS)}: which is which is unknown")
    for c in commands:
        if not c["ran"]:
            problems.append(f"{c['name']}: no pytest summary (it did not run, or failed before pytest)")
        elif c["failed"] or c["errors"]:
            problems.append(f"{c['name']}: {c['failed']} failed, {c['errors']} errors")
    return {
        "source": source,  # "run": this script ran .ci/run; "log": parsed from an existing log (figures unverified)
        "commit": commit,
        "started_utc": started,
        "finished_utc": finished,
        "cpus": os.cpu_count(),
        "loadavg_start": load_start,
        "loadavg_end": load_end,
        "exit_code": exit_code,
        "wall_seconds": wall,
        # the caches the run started without (each absent or empty, checked before it), or null: warm caches
        "cold": cold is not None,
        "cold_caches": cold,
        "ok": not problems,
        "problems": problems,
        "commands": commands,
        "build_steps": build_steps(lines),
        "folders": folder_seconds(lines),
        "log": log,
        "log_tail": [ANSI.sub("", line.rstrip("\n")) for line in lines[-TAIL_LINES:]] if problems else [],
    }


def minutes(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    m, s = divmod(round(seconds), 60)
    return f"{m} min {s:02d} s"


def markdown(result: dict[str, Any]) -> str:
    out = [
        "# CI rehearsal (`bash .ci/run` on a clean clone)",
        "",
        (f"Commit `{result['commit']}`, started {result['started_utc']}, finished {result['finished_utc']}; "
         f"{result['cpus']} CPUs, load average {result['loadavg_start']} at the start, {result['loadavg_end']} at the "
         "end. " + ("**Cold**: every cache empty at the start (" + ", ".join(f"{k} `{v}`" for k, v in
                                                                        result["cold_caches"].items()) + "). "
                    if result.get("cold") else "Caches warm. ") +
         "Written by `hack/rehearse.py`." if result["source"] == "run" else
         f"Commit `{result['commit']}`. Parsed by `hack/rehearse.py --log` from `{result['log']}`: not a rehearsal of "
         "its own (no times or load averages of the run)."),
        "",
        "| command | passed | failed | errors | skipped | deselected | pytest time |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for c in result["commands"]:
        if c["ran"]:
            out.append(f"| `{c['name']}` | {c['passed']:,} | {c['failed']} | {c['errors']} | {c['skipped']} | "
                       f"{c['deselected']} | {minutes(c['seconds'])} ({c['seconds']:.2f} s) |")
        else:
            out.append(f"| `{c['name']}` | did not run | | | | | |")
    out += ["", f"Wall time of the whole run: {minutes(result['wall_seconds'])}; exit code {result['exit_code']}.", ""]
    if result.get("build_steps"):
        out += ["Install steps that ran (cached ones print no time):", "", "| step | time |", "|---|---:|"]
        out += [f"| {b['tool']} {b['what']} | {minutes(b['seconds'])} |" for b in result["build_steps"]]
        out.append("")
    if result.get("folders"):
        out += ["Test time per folder (setup + call + teardown, pytest `--durations=0`; both commands):", "",
                "| folder | tests | time |", "|---|---:|---:|"]
        out += [f"| `{f['folder']}` | {f['tests']} | {minutes(f['seconds'])} |" for f in result["folders"]]
        out.append("")
    if result["problems"]:
        out += ["**FAILED**: " + "; ".join(result["problems"]) + f". Log: `{result['log']}`.", ""]
    return "\n".join(out)


def write(result: dict[str, Any], prefix: Path) -> None:
    prefix.parent.mkdir(parents=True, exist_ok=True)
    for suffix, text in ((".json", json.dumps(result, indent=2) + "\n"), (".md", markdown(result))):
        tmp = prefix.with_name(prefix.name + suffix + ".tmp")
        tmp.write_text(text)
        tmp.replace(prefix.with_name(prefix.name + suffix))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--log", type=Path, help="parse this log of a .ci/run instead of running it")
    parser.add_argument("--commit", help="with --log: the commit it ran (default: HEAD)")
    parser.add_argument("--exit-code", type=int, help="with --log: .ci/run's exit code, when known")
    parser.add_argument("--wall-seconds", type=float, help="with --log: the run's wall time, when known")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "ci_rehearsal",
                        help="path prefix of the .json and .md (default: bench/results/ci_rehearsal)")
    parser.add_argument("--log-dir", type=Path, default=Path(tempfile.gettempdir()),
                        help="where the run's log goes (default: the temp directory; it is not committed)")
    parser.add_argument("--keep", action="store_true", help="keep the clone (default: removed after the run)")
    parser.add_argument("--cold", action="store_true", help="from empty caches only (refused when one holds anything)")
    parser.add_argument("--cache-root", type=Path, help="with --cold: an empty directory for the run's own caches")
    args = parser.parse_args(argv)
    if args.cache_root is not None and not args.cold:
        parser.error("--cache-root goes with --cold")
    env, cold = None, None
    if args.cold:
        if args.cache_root is not None:
            if args.cache_root.exists() and any(args.cache_root.iterdir()):
                parser.error(f"--cache-root {args.cache_root}: not empty")
            args.cache_root.mkdir(parents=True, exist_ok=True)
        env = cold_env(args.cache_root)
        dirs = cache_dirs(env)
        if full := filled(dirs):
            parser.error("--cold: these caches are not empty: " + ", ".join(full) +
                         " (remove them, or give --cache-root an empty directory)")
        cold = {name: str(path) for name, path in dirs.items()}

    if args.log is not None:
        lines = args.log.read_text(errors="replace").splitlines(keepends=True)
        result = result_of(lines, source="log", commit=args.commit or git("rev-parse", "HEAD"),
                           started=None, finished=None, load_start=None, load_end=None,
                           wall=args.wall_seconds, exit_code=args.exit_code, log=str(args.log))
    else:
        commit = git("rev-parse", "HEAD")
        if git("status", "--porcelain", "--untracked-files=no"):
            print(f"rehearse: the working tree has uncommitted changes; rehearsing the commit {commit[:12]}",
                  file=sys.stderr)
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        args.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = args.log_dir / f"trainguard-rehearsal-{stamp}.log"
        clone = Path(tempfile.mkdtemp(prefix="trainguard-rehearsal-"))
        started, load_start, t0 = utc_now(), loadavg(), time.monotonic()
        print(f"rehearse: {commit[:12]} cloned into {clone}; bash .ci/run's output goes to {log_path}",
              file=sys.stderr)
        try:
            subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
            with open(log_path, "w") as log:
                code, at = run_ci(clone, log, env)
        finally:
            if not args.keep:
                shutil.rmtree(clone, ignore_errors=True)
        wall = round(time.monotonic() - t0, 1)
        lines = log_path.read_text(errors="replace").splitlines(keepends=True)
        result = result_of(lines, source="run", commit=commit, started=started, finished=utc_now(),
                           load_start=load_start, load_end=loadavg(), wall=wall, exit_code=code, at=at,
                           log=str(log_path), cold=cold)
    write(result, args.out)
    print(markdown(result))
    if not result["ok"]:
        print("rehearse: FAILED: " + "; ".join(result["problems"]) + f" (log: {result['log']}; result written to "
              f"{args.out}.json)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
