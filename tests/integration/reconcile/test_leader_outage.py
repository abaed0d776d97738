"""Issue 10 item 12: an apiserver outage longer than the renew deadline does not end every controller replica.

A private control plane (``hack/cluster.sh up`` in a temporary ``TRAINGUARD_CLUSTER_DIR``: the session's shared
apiserver must not go away under other tests) runs two controller replicas. Its kube-apiserver is stopped for several
renew deadlines and started again with the same command line. Both replicas lose the Lease; each cancels its work and
campaigns again instead of exiting (a process without a restart policy would otherwise stay down, and in a cluster
every replica would restart at once into CrashLoopBackOff). The test then requires: both processes still alive, one
of them leading again, and a TrainJob created after the outage reconciled into a JobSet.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.conftest import HACK, REPO, Cluster, upstream_crds, wait_for_crds
from tests.integration.reconcile.reconcile_harness import RENEW_DEADLINE, ControllerProcess, wait_for

ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
NAMESPACE = "outage"


@pytest.fixture
def private_cluster(cluster: Cluster) -> Iterator[tuple[Cluster, Path]]:
    """A control plane of our own (the session ``cluster`` only provides the built binaries)."""
    state = Path(tempfile.mkdtemp(prefix="trainguard-outage-"))
    env = {**os.environ, "TRAINGUARD_CLUSTER_DIR": str(state)}
    proc = subprocess.run([str(HACK / "cluster.sh"), "up"], capture_output=True, text=True, env=env, timeout=600)
    if proc.returncode != 0:
        shutil.rmtree(state, ignore_errors=True)
        pytest.fail(f"hack/cluster.sh up failed:\n{proc.stderr}", pytrace=False)
    private = Cluster(proc.stdout.strip().splitlines()[-1], cluster.bin_dir)
    try:
        args = ["apply", "--server-side", "--force-conflicts"]
        for m in upstream_crds(private.bin_dir, "jobset", "scheduler-plugins") + sorted((REPO / "crds").glob("*.yaml")):
            args += ["-f", str(m)]
        private.kubectl(*args, timeout=120)
        wait_for_crds(private)
        private.kubectl("create", "namespace", NAMESPACE)
        yield private, state
    finally:
        subprocess.run([str(HACK / "cluster.sh"), "down"], env=env, capture_output=True, timeout=120)
        shutil.rmtree(state, ignore_errors=True)


def stop_apiserver(state: Path) -> list[str]:
    """Stop the recorded kube-apiserver (SIGTERM, then wait); returns its command line for the restart."""
    pid = int((state / "kube-apiserver.pid").read_text())
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
    assert argv[0].endswith(b"kube-apiserver"), argv[0]
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    if Path(f"/proc/{pid}").exists():
        os.kill(pid, signal.SIGKILL)
    return [a.decode() for a in argv]


def start_apiserver(state: Path, argv: list[str], kubectl: Any) -> None:
    log = open(state / "kube-apiserver.log", "ab")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    log.close()
    (state / "kube-apiserver.pid").write_text(f"{proc.pid}\n")  # so that `cluster.sh down` stops this one
    wait_for("the restarted apiserver /readyz",
             lambda: kubectl("get", "--raw", "/readyz", check=False).stdout.strip() == "ok", timeout=90)


def leaders(procs: list[ControllerProcess]) -> list[str]:
    out = []
    for p in procs:
        try:
            if p.metrics().get("trainguard_leader") == 1:
                out.append(p.identity)
        except OSError:
            pass
    return out


def jobset(c: Cluster, name: str) -> dict | None:
    out = c.kubectl("get", "jobset", name, "-n", NAMESPACE, "-o", "json", check=False)
    return json.loads(out.stdout) if out.returncode == 0 else None


def trainjob(name: str) -> str:
    return json.dumps({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                       "metadata": {"name": name, "namespace": NAMESPACE},
                       "spec": {"runtimeRef": {"name": "torch", "kind": "TrainingRuntime"}, "trainer": {"numNodes": 2}}})


def test_replicas_campaign_again_after_an_apiserver_outage(private_cluster, tmp_path) -> None:
    c, state = private_cluster
    runtime = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
               "metadata": {"name": "torch", "namespace": NAMESPACE},
               "spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "template": {"spec": {"replicatedJobs": [
                   {"name": "node", "template": {"metadata": {"labels": {ANCESTOR: "trainer"}}, "spec": {
                       "template": {"spec": {"containers": [{"name": "node", "image": "pytorch:1"}]}}}}}]}}}}
    c.kubectl("apply", "-f", "-", input=json.dumps(runtime))
    procs = [ControllerProcess(c.kubeconfig, NAMESPACE, name, tmp_path, workers=2) for name in ("a", "b")]
    try:
        for p in procs:
            p.start()
        wait_for("one leader", lambda: len(leaders(procs)) == 1)
        c.kubectl("apply", "-f", "-", input=trainjob("before"))
        wait_for("the JobSet of a job created before the outage", lambda: jobset(c, "before"))

        argv = stop_apiserver(state)
        time.sleep(4 * RENEW_DEADLINE)  # every replica's renew deadline passes with no apiserver to renew against
        wait_for("the leader to give the Lease up", lambda: not leaders(procs), timeout=30)
        start_apiserver(state, argv, c.kubectl)

        assert all(p.alive() for p in procs), "\n".join(p.log() for p in procs)
        wait_for("a replica leading again", lambda: len(leaders(procs)) == 1, timeout=90)
        c.kubectl("apply", "-f", "-", input=trainjob("after"))
        built = wait_for("the JobSet of a job created after the outage", lambda: jobset(c, "after"), timeout=90)
        assert built["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelism"] == 2
        assert all(p.alive() for p in procs)
        lost = sum(p.metrics().get("trainguard_leadership_lost_total", 0) for p in procs)
        assert lost >= 1
    finally:
        for p in procs:
            p.kill()
