"""Checked-in generated files are up to date with their single source."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_chart_webhook_configurations_template_is_generated_from_the_registration_function() -> None:
    proc = subprocess.run([sys.executable, str(REPO / "hack" / "gen_chart.py"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
