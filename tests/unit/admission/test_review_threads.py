"""The policy pipeline may run in the server's worker threads: on the real pipeline and the examples, many threads
deciding at once give exactly the answers of one thread, and the shared ``ClusterSnapshot`` is left untouched."""

from __future__ import annotations

import copy
import json
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

from trainguard.webhook.admission.metrics import AdmissionMetrics
from trainguard.webhook.admission.review import parse_review
from trainguard.webhook.admission.routes import bind_routes
from trainguard.webhook.admission.server import AdmissionHandler
from trainguard.webhook.render import build_snapshot, read_files

from reviews import review

REPO = Path(__file__).resolve().parents[3]
NOW = datetime(2026, 9, 1, 12, 0, 0, tzinfo=timezone.utc)
MUTATE = "/mutate-trainer-kubeflow-org-v1alpha1-trainjob"
VALIDATE = "/validate-trainer-kubeflow-org-v1alpha1-trainjob"


def _snapshot_state(snapshot) -> str:  # type: ignore[no-untyped-def]
    return json.dumps({f: (sorted(map(str, v)) if isinstance(v, frozenset) else {str(k): x for k, x in dict(v).items()})
                       for f, v in vars(snapshot).items() if isinstance(v, (dict, frozenset)) or hasattr(v, "items")},
                      sort_keys=True, default=str)


def test_concurrent_reviews_equal_sequential_ones_and_leave_the_snapshot_alone() -> None:
    docs = read_files([str(REPO / "examples" / n) for n in ("torch-distributed-gpu.yaml", "gpu-topology-policy.yaml")])
    snapshot = build_snapshot(docs)
    job = next(d.obj for d in docs if d.kind == "TrainJob")
    namespace = next(d.name for d in docs if d.kind == "Namespace")
    job = {**copy.deepcopy(job), "metadata": {**job["metadata"], "namespace": namespace}}
    big = copy.deepcopy(job)
    big["spec"].setdefault("trainer", {})["numNodes"] = 1000  # denied by the policy's limits or topology
    handler = AdmissionHandler(bind_routes(), lambda: snapshot, AdmissionMetrics(), clock=lambda: NOW)
    routes = bind_routes()
    cases = []
    for path, obj in ((MUTATE, job), (VALIDATE, job), (VALIDATE, big)):
        body = review(path, copy.deepcopy(obj), uid="u")
        body["request"]["namespace"] = namespace
        cases.append((path, json.dumps(body).encode()))
    before = _snapshot_state(snapshot)

    def decide(case: tuple[str, bytes]) -> str:
        path, body = case
        response, outcome = handler.review(routes[path], parse_review(body), snapshot)
        return json.dumps([response, outcome.verdict], sort_keys=True)

    expected = [decide(c) for c in cases]
    assert len(set(expected)) == 3  # three different answers: a patch, an admission, a denial
    assert '"patched"' in expected[0] and '"denied"' in expected[2]
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(decide, cases * 40))
    assert got == expected * 40
    assert _snapshot_state(snapshot) == before
