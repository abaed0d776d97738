"""``trainguard test`` (``webhook/testbench.py`` around ``webhook/expectations.py``): expected policy results for
TrainJobs, offline (issue 23, part 6). The examples under ``examples/tests`` run here, so CI runs them; typos in a
test file, in a manifest or in an expectation are each caught with the file and the field."""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from datetime import datetime, timezone
from pathlib import Path

import pytest

from trainguard.webhook import testbench

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "tests"
NOW = datetime(2026, 9, 1, 12, tzinfo=timezone.utc)


def run(*paths: str | Path, junit: Path | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    rc = testbench.main([str(p) for p in paths], junit_path=junit, now=NOW, stdout=out, stderr=err)
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    """A copy of the example test with the manifests beside it, to edit."""
    dest = tmp_path / "gpu-teams"
    shutil.copytree(EXAMPLES / "gpu-teams", dest)
    for name in ("torch-distributed-gpu.yaml", "gpu-topology-policy.yaml"):
        shutil.copy(REPO / "examples" / name, tmp_path / name)
    test = dest / "trainguard-test.yaml"
    test.write_text(test.read_text().replace("../../", "../"))
    return dest


def test_the_examples_pass() -> None:
    rc, out, err = run(EXAMPLES)
    assert rc == 0, out + err
    assert "5 of 5 expected results hold" in out, out


def test_the_command_is_registered() -> None:
    proc = subprocess.run([sys.executable, "-m", "trainguard.webhook.cli", "test", str(EXAMPLES), "--now",
                           "2026-09-01T12:00:00Z"], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_wrong_expectation_fails_with_what_differs(suite: Path) -> None:
    test = suite / "trainguard-test.yaml"
    test.write_text(test.read_text().replace("{trainJob: team-a/fits, policy: gpu-teams, result: pass}",
                                             "{trainJob: team-a/fits, policy: gpu-teams, result: fail}"))
    rc, out, _ = run(suite)
    assert rc == 1
    assert "FAIL  team-a/fits / gpu-teams: fail" in out and "expected fail, got pass" in out, out
    assert "4 of 5 expected results hold" in out


def test_a_mutated_field_that_differs_is_named(suite: Path) -> None:
    test = suite / "trainguard-test.yaml"
    test.write_text(test.read_text().replace("activeDeadlineSeconds: 86400", "activeDeadlineSeconds: 3600"))
    rc, out, _ = run(suite)
    assert rc == 1 and "mutated: spec.activeDeadlineSeconds: expected 3600, got 86400" in out, out


def test_a_message_not_found_is_reported_with_the_findings(suite: Path) -> None:
    test = suite / "trainguard-test.yaml"
    test.write_text(test.read_text().replace('"16 nvidia.com/gpu per node exceed maxGpusPerNode 8"', '"maxNodes"'))
    rc, out, _ = run(suite)
    assert rc == 1 and "no finding contains 'maxNodes'" in out and "maxGpusPerNode 8" in out, out


@pytest.mark.parametrize(("old", "new", "said"), [
    ("result: skip", "reslt: skip", "results.4.reslt: Extra inputs are not permitted"),
    ("result: skip", "result: skipped", "results.4.result: Input should be"),
    ("kind: Test", "kind: Tests", "kind: Input should be 'Test'"),
    ("- jobs.yaml", "- jbos.yaml", "jbos.yaml: cannot read"),
], ids=["misspelt key", "unknown result", "wrong kind", "missing file"])
def test_a_typo_in_the_test_file_exits_2_naming_it(suite: Path, old: str, new: str, said: str) -> None:
    test = suite / "trainguard-test.yaml"
    test.write_text(test.read_text().replace(old, new))
    rc, _, err = run(suite)
    assert rc == 2 and said in err, err
    assert ("jbos.yaml" if "jbos" in said else "trainguard-test.yaml") in err, err


def test_a_typo_in_a_manifest_exits_2_as_render_would(suite: Path) -> None:
    (suite.parent / "gpu-topology-policy.yaml").write_text(
        (suite.parent / "gpu-topology-policy.yaml").read_text().replace("maxGpusPerNode: 8", "maxGpuPerNode: 8"))
    rc, _, err = run(suite)
    assert rc == 2 and "maxGpuPerNode" in err and "gpu-topology-policy.yaml" in err, err


def test_an_unknown_trainjob_or_policy_is_a_failure_naming_what_exists(suite: Path) -> None:
    test = suite / "trainguard-test.yaml"
    test.write_text(test.read_text().replace("sandbox/elsewhere, policy: gpu-teams",
                                             "sandbox/elswhere, policy: gpu-team"))
    rc, out, _ = run(suite)
    assert rc == 1 and "no TrainJob sandbox/elswhere in the test's files" in out and "sandbox/elsewhere" in out, out


def test_junit_report(suite: Path, tmp_path: Path) -> None:
    test = suite / "trainguard-test.yaml"
    test.write_text(test.read_text().replace("{trainJob: team-a/fits, policy: gpu-teams, result: pass}",
                                             "{trainJob: team-a/fits, policy: gpu-teams, result: warn}"))
    report = tmp_path / "report.xml"
    rc, _, _ = run(suite, junit=report)
    assert rc == 1
    suite_el = ET.parse(report).getroot().find("testsuite")
    assert suite_el is not None and suite_el.get("tests") == "5" and suite_el.get("failures") == "1"
    failed = [c for c in suite_el.iter("testcase") if c.find("failure") is not None]
    assert [c.get("name") for c in failed] == ["team-a/fits gpu-teams warn"]
    assert "expected warn, got pass" in failed[0].find("failure").get("message")
