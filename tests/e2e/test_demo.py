"""`make demo` is the README's first command: it must keep working end to end."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_demo_runs_end_to_end(tmp_path: Path) -> None:
    env = {**os.environ, "TRAINGUARD_DEMO_DIR": str(tmp_path / "demo")}
    proc = subprocess.run([str(REPO / "hack" / "demo.sh")], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    # Admission: Kueue labels, suspension and the topology hint from the policy.
    assert '"kueue.x-k8s.io/queue-name":"team-gpu"' in out
    assert "suspend: true" in out
    assert '"kueue.x-k8s.io/podset-required-topology":"nvidia.com/gpu.clique"' in out
    # Reconcile: the JobSet with torch's env; the denial; completion propagated back.
    assert "node parallelism: 4" in out and "PET_NNODES=4" in out
    assert 'admission webhook "validator.trainjob.trainer.kubeflow.org" denied the request' in out
    assert "Complete=True (AllJobsCompleted: jobset completed successfully)" in out
    # Everything it started is gone.
    assert not (tmp_path / "demo").exists()
