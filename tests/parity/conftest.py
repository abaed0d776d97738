"""One peer pair per session: upstream Kubeflow Trainer v2.3.0's manager on a second apiserver, trainguard (webhook +
controller, no TrainJobPolicy) on the session's ``cluster``; the whole corpus applied to both once.

``parity_run`` (session) starts both, applies the corpus (tests/parity/corpus.py) in batches and returns every
case's two readings; each ``test_parity[<case>]`` then only compares. Logs of the three processes stay in the
session's temporary directory (their paths are printed with a failing case); with ``TRAINGUARD_PARITY_OUT=DIR`` the
normalised readings of every case (``readings.json``, with the phase timings) and the three logs are kept in DIR.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import pytest

from tests.conftest import Cluster
from tests.integration.conftest import SCOPE_LABEL, register, start_webhook, unregister
from tests.integration.reconcile.reconcile_harness import ControllerProcess
from tests.parity.corpus import Case, build_corpus
from tests.parity.normalize import normalize_record
from tests.parity.peer import UpstreamPeer, build_peer, trainer_module_dir
from tests.parity.runner import Run, Side, run_corpus


@dataclass
class ParityRun:
    cases: dict[str, Case]
    run: Run
    namespace: str
    logs: dict[str, Path]
    timings: dict[str, float] = field(default_factory=dict)

    def readings(self, case: str) -> tuple[dict, dict]:
        up = self.run.records["upstream"][case]
        tg = self.run.records["trainguard"][case]
        return (normalize_record(up.admission, up.objects, self.namespace),
                normalize_record(tg.admission, tg.objects, self.namespace))


def _create_namespace(cluster: Cluster, name: str) -> None:
    cluster.kubectl("create", "namespace", name)


@pytest.fixture(scope="session")
def parity_run(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ParityRun]:
    t0 = time.monotonic()
    module_dir = trainer_module_dir()
    binary = build_peer()
    timings = {"build_s": time.monotonic() - t0}
    work = tmp_path_factory.mktemp("parity")
    namespace = f"parity-{uuid.uuid4().hex[:6]}"
    scope = {SCOPE_LABEL: namespace}
    peer = UpstreamPeer(work / "upstream", module_dir, binary)
    (work / "upstream").mkdir()
    webhook = controller = registered = None
    try:
        peer.start()
        assert peer.cluster is not None
        timings.update(peer.timings)
        _create_namespace(peer.cluster, namespace)
        t1 = time.monotonic()
        _create_namespace(cluster, namespace)
        _create_namespace(cluster, namespace + "-system")
        webhook = start_webhook(cluster, work / "webhook")
        registered = register(cluster, webhook, namespace)
        controller = ControllerProcess(cluster.kubeconfig, namespace, "parity", work, leader_elect=False,
                                       snapshot_namespace=namespace + "-system").start()
        timings["trainguard_ready_s"] = time.monotonic() - t1
        cases = build_corpus(module_dir, scope)
        sides = [Side("upstream", peer.cluster, namespace, scope), Side("trainguard", cluster, namespace, scope)]
        run = run_corpus(sides, cases)
        timings.update(run.timings)
        timings["session_s"] = time.monotonic() - t0
        logs = {"upstream": peer.log_path, "trainguard webhook": webhook.log_path,
                "trainguard controller": controller.log_path}
        result = ParityRun({c.name: c for c in cases}, run, namespace, logs, timings)
        # both readings of every case and the timings, for looking at a failure after the fact
        out = Path(os.environ.get("TRAINGUARD_PARITY_OUT") or work)
        out.mkdir(parents=True, exist_ok=True)
        (out / "readings.json").write_text(json.dumps(
            {"timings": timings, "cases": {c.name: dict(zip(("upstream", "trainguard"), result.readings(c.name)))
                                           for c in cases}}, indent=1, sort_keys=True))
        yield result
    finally:
        if controller is not None:
            controller.kill()
        if registered is not None:
            unregister(cluster, registered)
        if webhook is not None:
            webhook.stop()
        cluster.kubectl("delete", "clustertrainingruntimes", "-l", f"{SCOPE_LABEL}={namespace}",
                        "--ignore-not-found", "--wait=false", check=False)
        for ns in (namespace, namespace + "-system"):
            cluster.kubectl("delete", "namespace", ns, "--wait=false", "--ignore-not-found", check=False)
        peer.stop()
        if os.environ.get("TRAINGUARD_PARITY_OUT"):
            for path in (work / "upstream" / "trainer-controller-manager.log", work / "webhook" / "webhook.log",
                         work / "controller-parity.log"):
                if path.exists():
                    shutil.copy(path, Path(os.environ["TRAINGUARD_PARITY_OUT"]) / path.name)

