"""The node agent is a deployable of its own: ``trainguard cache-agent`` imports neither pydantic nor the control
plane (the policy engine, the runtime framework, the admission server, the reconciler) into its process; the CLI
loads only the command it runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

# The real command line, up to the agent's start (a dataset root that does not exist: exit 1 at once).
PROBE = """
import json, sys
from trainguard.webhook.cli import main
rc = main(["cache-agent", "--root", sys.argv[1] + "/missing", "--socket", sys.argv[1] + "/agent.sock",
           "--http-port", "-1"])
import trainguard.cache.agent
print(json.dumps({"rc": rc, "modules": sorted(sys.modules)}))
"""


def test_the_cache_agent_process_carries_no_control_plane(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path)], check=True, capture_output=True, text=True)
    result = json.loads(out.stdout)
    assert result["rc"] == 1
    modules = set(result["modules"])
    assert "pydantic" not in modules and "yaml" not in modules and "cryptography" not in modules
    ours = {m for m in modules if m.startswith("trainguard.")}
    # The CLI itself (trainguard.webhook's package face holds only the version) and the agent's own packages.
    allowed = ("trainguard.cache", "trainguard.process", "trainguard.webhook.cli")
    assert {m for m in ours if not m.startswith(allowed)} == {"trainguard.webhook"}, sorted(ours)


def test_the_other_commands_still_load(tmp_path: Path) -> None:
    code = ("import json, sys; from trainguard.webhook.cli import build_parser; "
            "print(json.dumps(sorted(sys.modules)))")
    help_all = subprocess.run([sys.executable, "-c", code.replace("build_parser;", "build_parser; build_parser();")],
                              check=True, capture_output=True, text=True)
    assert "trainguard.controller.reconcile.main" in json.loads(help_all.stdout)
