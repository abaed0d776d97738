"""The `trainguard` command: subcommands are discovered from entry points and exit with clear statuses."""

from __future__ import annotations

import subprocess
import sys

import pytest

from trainguard.webhook.cli import build_parser, main


def test_every_documented_subcommand_is_registered() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert {"webhook", "controller", "render", "cache-agent", "version"} <= set(sub.choices)


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["version"]) == 0
    assert capsys.readouterr().out.startswith("trainguard ")


def test_unknown_subcommand_exits_2() -> None:
    proc = subprocess.run([sys.executable, "-m", "trainguard.webhook.cli", "nope"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "invalid choice" in proc.stderr
