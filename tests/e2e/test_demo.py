"""`make demo` is the README's first command: it must keep working end to end, and what it prints must have been
produced by the real components (hack/demo.sh: the simulated GPU cluster of hack/e2e-cluster.sh with the JobSet
controller and kwok, the Kueue manager, trainguard's webhook and controller), not written by the script.

One run of the demo (1.5 to 2 minutes on 2 shared cores, most of it starting the cluster) and every key line of its
output: the admission mutation (with Kueue's own patch beside trainguard's, so Kueue's webhook ran), the denial, the
second job held by Kueue for quota, the JobSets, both TrainJobs' phases in order, their pods on kwok nodes of one
clique each, both Workloads admitted and finished, and nothing left behind (state directory and processes).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
JOBS = ("llm-ddp", "llm-ddp-2")


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    state = tmp_path_factory.mktemp("demo-run") / "demo"
    env = {**os.environ, "TRAINGUARD_DEMO_DIR": str(state)}
    proc = subprocess.run([str(REPO / "hack" / "demo.sh")], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    return out, state


def section(out: str, title: str) -> str:
    """The demo's output from the step whose title starts with ``title`` to the next step."""
    m = re.search(r"== " + re.escape(title) + r".*?\n(.*?)(?=\n\x1b\[1m== |\Z)", out, re.S)
    assert m, f"no step {title!r} in the demo's output:\n{out[-4000:]}"
    return m.group(1)


def test_cluster_is_the_simulated_gpu_cluster(demo: tuple[str, Path]) -> None:
    nodes = re.findall(r"^(kwok-gpu-\d)\s+(clique-\d)\s+8\s+True$", section(demo[0], "1."), re.M)
    assert len(nodes) == 8 and {c for _, c in nodes} == {"clique-0", "clique-1"}, nodes
    # Said once, where the cluster starts: its nodes run no containers, so there are no logs to read.
    assert demo[0].count("without starting a container: kubectl logs and the SDK's get_job_logs()") == 1


def test_admission_mutates_with_kueue_beside(demo: tuple[str, Path]) -> None:
    out = section(demo[0], "4.")
    assert '"kueue.x-k8s.io/queue-name":"team-gpu"' in out
    assert '"kueue.x-k8s.io/priority-class":"standard"' in out
    assert "suspend: true" in out
    assert '"kueue.x-k8s.io/podset-required-topology":"nvidia.com/gpu.clique"' in out
    # Kueue's mutating webhook ran too: its own runtimePatch sits beside trainguard's.
    assert "runtimePatches managers: trainguard.io/policy, kueue.x-k8s.io/manager" in out


def test_denial_is_shown(demo: tuple[str, Path]) -> None:
    out = section(demo[0], "4.")
    assert 'admission webhook "validator.trainjob.trainer.kubeflow.org" denied the request' in out
    assert "16 nvidia.com/gpu per node exceed maxGpusPerNode 8" in out
    # 4 x 16 GPUs against the ClusterQueue of 48: Kueue could never admit it, and the denial says so.
    assert "Kueue can never admit this job" in out and "holds 48" in out, out


def test_kueue_holds_the_second_job_for_quota(demo: tuple[str, Path]) -> None:
    out = section(demo[0], "5.")
    rows = {m.group(1): m.group(2)
            for m in re.finditer(r"^trainjob-\S+\s+(llm-ddp(?:-2)?)\s+team-gpu\s+(.*)$", out, re.M)}
    assert set(rows) == set(JOBS), out
    assert rows["llm-ddp"].startswith("True"), rows
    assert "insufficient unused quota for nvidia.com/gpu in flavor h100, 16 more needed" in rows["llm-ddp-2"], rows
    # trainguard's controller built both JobSets; only the admitted one is resumed.
    assert re.search(r"^llm-ddp\s+false\s+4$", out, re.M) and re.search(r"^llm-ddp-2\s+true\s+4$", out, re.M), out
    assert "PET_NNODES=4" in out


def test_both_jobs_run_on_one_clique_each_and_complete(demo: tuple[str, Path]) -> None:
    out = section(demo[0], "6.")
    for job in JOBS:
        block = re.search(rf"^{re.escape(job)}: phases.*?\n((?:  .*\n)+)", out, re.M)
        assert block, out
        phases = re.findall(r"^\s+\d+\.\ds\s+(\w+)$", block.group(1), re.M)
        # The demo samples the label every 0.2 s: when Kueue admits a job within a second of its creation (llm-ddp,
        # into an empty queue) a loaded machine can miss its Suspended state; llm-ddp-2 waits for quota and never does.
        first = ("Suspended",) if job == "llm-ddp-2" else ("Suspended", "Created")
        assert phases[0] in first and phases[-1] == "Complete" and "Running" in phases, (job, phases)
        assert phases.index("Running") < phases.index("Complete"), (job, phases)
        pods = re.findall(r"^  pod (\S+)\s+on (kwok-gpu-\d)\s+\((clique-\d)\)\s+Succeeded$", block.group(1), re.M)
        assert len(pods) == 4 and all(p.startswith(f"{job}-node-0-") for p, _, _ in pods), (job, pods)
        assert len({n for _, n, _ in pods}) == 4 and len({c for _, _, c in pods}) == 1, (job, pods)
        assert re.search(rf"^trainjob-{re.escape(job)}-\w+\s+{re.escape(job)}\s+True\s+True$", out, re.M), out
        # kubectl get trainjobs: NAME STATE RUNTIME NODES GPUS PROGRESS AGE (4 nodes x 8 GPUs, no progress reported).
        assert re.search(rf"^{re.escape(job)}\s+Complete\s+torch-distributed\s+4\s+32\s+\d+s$", out, re.M), out
    assert "Complete=True (AllJobsCompleted: jobset completed successfully)" in out


def test_nothing_left_behind(demo: tuple[str, Path]) -> None:
    out, state = demo
    assert "== done" in out
    assert not state.exists()
    # Every process the demo started was given a path under its state directory (kubeconfig, config, data dir).
    left = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(state) in cmdline:
            left.append(f"{pid}: {cmdline[:200]}")
    assert not left, left
