"""hack/rehearse.py reads the suite's size and duration from pytest's summary lines, and a failed run is recorded as
one (the result written, the exit non-zero), never as a figure."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "hack"))

import rehearse  # noqa: E402

ZERO = dict.fromkeys(rehearse.COUNTED, 0)


@pytest.mark.parametrize("line, counts, seconds", [
    # passed only, with and without pytest's (h:mm:ss)
    ("=================== 2927 passed in 1437.21s (0:23:57) ===================", {"passed": 2927}, 1437.21),
    ("==== 7 passed in 12.34s ====", {"passed": 7}, 12.34),
    ("= 1 passed in 0.01s =", {"passed": 1}, 0.01),
    # what make test's -m selection adds
    ("====== 2415 passed, 512 deselected in 181.07s (0:03:01) ======", {"passed": 2415, "deselected": 512}, 181.07),
    # failures and errors, in pytest's order (failed first, errors last), singular and plural
    ("=== 3 failed, 2920 passed, 4 skipped, 12 deselected, 2 errors in 1437.21s (0:23:57) ===",
     {"failed": 3, "passed": 2920, "skipped": 4, "deselected": 12, "errors": 2}, 1437.21),
    ("=== 1 failed, 1 error in 3.50s ===", {"failed": 1, "errors": 1}, 3.5),
    # warnings in the line
    ("=== 5 passed, 1 warning in 0.12s ===", {"passed": 5, "warnings": 1}, 0.12),
    ("=== 2399 passed, 40 deselected, 17 warnings in 170.00s (0:02:50) ===",
     {"passed": 2399, "deselected": 40, "warnings": 17}, 170.0),
    ("=== 2 xfailed, 1 xpassed, 9 passed in 2s ===", {"xfailed": 2, "xpassed": 1, "passed": 9}, 2.0),
    # no tests, and a terminal's colours
    ("============================ no tests ran in 0.01s =============================", {}, 0.01),
    ("\x1b[32m==== \x1b[32m\x1b[1m7 passed\x1b[0m\x1b[32m in 264.10s (0:04:24)\x1b[0m\x1b[32m ====\x1b[0m\n",
     {"passed": 7}, 264.1),
])
def test_a_summary_line_is_parsed(line: str, counts: dict[str, int], seconds: float) -> None:
    parsed = rehearse.parse_summary(line)
    assert parsed is not None
    assert {k: parsed[k] for k in rehearse.COUNTED} == {**ZERO, **counts}
    assert parsed["seconds"] == seconds


@pytest.mark.parametrize("line", [
    "============================= test session starts ==============================",
    "=========================== short test summary info ============================",
    "FAILED tests/unit/test_x.py::test_y - assert 1 == 2",
    "2927 passed in 1437.21s (0:23:57)",  # not framed by pytest's rule
    "==== the upgrade took 3 restarts in 12.0s ====",  # a test's own output, shaped like a summary
    "=== 3 passed, some failed in 1.0s ===",
    "=== 3 restarts in 12.0s ===",  # not a word pytest counts
    "",
])
def test_other_lines_are_not_summaries(line: str) -> None:
    assert rehearse.parse_summary(line) is None


def test_a_summary_that_disagrees_with_itself_is_an_error() -> None:
    with pytest.raises(ValueError, match="disagrees"):
        rehearse.parse_summary("=== 7 passed in 264.10s (0:14:24) ===")


TEST = "===== 2927 passed, 12 deselected in 1437.21s (0:23:57) =====\n"
NODE = "===== 7 passed in 264.10s (0:04:24) =====\n"
NOISE = ["build-tools: etcd: cached\n", ".venv/bin/python -m pytest -m \"not node\"\n",
         "=========================== short test summary info ============================\n"]


def result(lines: list[str], exit_code: int | None) -> dict[str, Any]:
    return rehearse.result_of(lines, source="run", commit="0" * 40, started="2026-12-01T00:00:00Z",
                              finished="2026-12-01T00:30:09Z", load_start=[1.0, 1.0, 1.0],
                              load_end=[2.0, 2.0, 2.0], wall=1809.0, exit_code=exit_code, at=[1500.0, 1800.0])


def test_the_summaries_are_the_commands_in_order() -> None:
    r = result(NOISE + [TEST] + NOISE + [NODE], 0)
    assert r["ok"] and r["problems"] == [] and r["log_tail"] == []
    test, node = r["commands"]
    assert (test["name"], test["passed"], test["deselected"], test["seconds"]) == ("make test", 2927, 12, 1437.21)
    assert (node["name"], node["passed"], node["seconds"], node["finished_at_seconds"]) == (
        "make test-node", 7, 264.1, 1800.0)


@pytest.mark.parametrize("lines, exit_code, problem", [
    # make test failed: .ci/run stops (set -e), make test-node never runs
    ([TEST.replace("2927 passed", "2 failed, 2925 passed")], 2, "bash .ci/run exited 2"),
    ([TEST.replace("2927 passed", "2 failed, 2925 passed")], 2, "make test: 2 failed, 0 errors"),
    ([TEST.replace("2927 passed", "2 failed, 2925 passed")], 2, "make test-node: no pytest summary"),
    # failed before pytest (a build): no summary at all
    (NOISE, 2, "make test: no pytest summary"),
    # a zero exit that does not match its output is not believed
    ([TEST], 0, "make test-node: no pytest summary"),
    ([TEST, NODE.replace("7 passed", "6 passed, 1 error")], 0, "make test-node: 0 failed, 1 errors"),
    ([TEST, NODE, NODE], 0, "3 pytest summaries, expected 2"),
])
def test_a_failed_run_is_recorded_as_failed(lines: list[str], exit_code: int, problem: str) -> None:
    r = result(lines, exit_code)
    assert not r["ok"]
    assert any(p.startswith(problem) for p in r["problems"]), r["problems"]
    assert r["log_tail"] == [line.rstrip("\n") for line in lines[-rehearse.TAIL_LINES:]]


@pytest.mark.parametrize("lines, code", [
    ([TEST, NODE], 0),
    ([TEST.replace("2927 passed", "1 failed, 2926 passed")], 1),
])
def test_the_log_option_writes_the_result_and_fails_loudly(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          lines: list[str], code: int) -> None:
    log = tmp_path / "ci.log"
    log.write_text("".join(NOISE + lines))
    out = tmp_path / "results" / "ci_rehearsal"
    assert rehearse.main(["--log", str(log), "--out", str(out), "--commit", "abc"]) == code
    stored = json.loads(out.with_suffix(".json").read_text())
    assert (stored["source"], stored["commit"], stored["ok"]) == ("log", "abc", code == 0)
    assert stored["commands"][0]["passed"] == (2927 if code == 0 else 2926)
    assert "| `make test` |" in out.with_suffix(".md").read_text()
    assert ("FAILED" in capsys.readouterr().err) is (code != 0)


def test_install_steps_and_folder_times_are_read_from_the_log() -> None:
    log = [
        "build-tools: etcd: building . (module hack/tools/etcd) ...\n",
        "build-tools: etcd: built in 42 s\n",
        "build-tools: kubectl: cached\n",
        "\x1b[0mtorch-env: built in 166 s\n",
        "images: base: built in 95 s (312M)\n",
        "build-tools: done in 1803 s\n",
        "12.50s setup    tests/integration/chart/test_chart.py::test_install\n",
        "3.25s call     tests/integration/chart/test_chart.py::test_install\n",
        "0.25s teardown tests/integration/chart/test_chart.py::test_install\n",
        "1.00s call     tests/unit/policy/test_x.py::test_a[p-1]\n",
        "2.00s call     tests/unit/test_cli.py::test_b\n",
        "(12 durations < 0.005s hidden.)\n",
    ]
    assert rehearse.build_steps(log) == [
        {"tool": "build-tools", "what": "etcd", "seconds": 42}, {"tool": "torch-env", "what": "all", "seconds": 166},
        {"tool": "images", "what": "base", "seconds": 95}, {"tool": "build-tools", "what": "total", "seconds": 1803}]
    assert rehearse.folder_seconds(log) == [
        {"folder": "tests/integration/chart", "seconds": 16.0, "tests": 1},
        {"folder": "tests/unit", "seconds": 2.0, "tests": 1},
        {"folder": "tests/unit/policy", "seconds": 1.0, "tests": 1}]
    assert "--durations=0" in rehearse.run_env({"PATH": "/bin"})["PYTEST_ADDOPTS"]


def test_cold_refuses_filled_caches(tmp_path: Path) -> None:
    env = rehearse.cold_env(tmp_path)
    dirs = rehearse.cache_dirs(env)
    assert set(dirs) == {"trainguard", "go-modules", "go-build", "pip"}
    assert all(str(d).startswith(str(tmp_path)) for d in dirs.values())
    assert rehearse.filled(dirs) == []
    (dirs["go-build"]).mkdir(parents=True)
    assert rehearse.filled(dirs) == []  # an empty directory is cold
    (dirs["go-build"] / "x").write_text("")
    assert rehearse.filled(dirs) == [f"go-build ({dirs['go-build']})"]
