"""Checked-in generated files are up to date with their single source."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_chart_webhook_configurations_template_is_generated_from_the_registration_function() -> None:
    # gen_chart.py --check also covers the chart's CRD templates (templates/crds/, from crds/).
    proc = subprocess.run([sys.executable, str(REPO / "hack" / "gen_chart.py"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.tools
def test_vendored_jobset_chart_is_the_pinned_modules_chart() -> None:
    # Needs Go: the module is located (and downloaded if missing) with `go mod download`.
    proc = subprocess.run([sys.executable, str(REPO / "hack" / "vendor_jobset_chart.py"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
