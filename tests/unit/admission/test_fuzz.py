"""Fuzz the in-process admission app: arbitrary JSON and mutated real reviews never produce a 5xx or an exception.

Two fuzzers: one drives the server with fake policies (the server's own parsing and answers); the other puts the
real pipeline behind it with the project's real policies, runtimes and DatasetCache (``tests/unit/policy/
real_world.py``) and sends hostile variants of real objects, asserting no AdmissionReview code 500 either.

Budgets are fixed and the runs derandomized, so CI sees the same cases every time (raise them locally with
``--hypothesis-profile`` if you want more). "Unhandled exception" is detected from the server's own error log:
aiohttp logs any exception escaping a handler at ERROR on ``aiohttp.server``/``aiohttp.web``.
"""

from __future__ import annotations

import copy
import json
import logging
import random
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainguard.webhook.admission.metrics import AdmissionMetrics
from trainguard.webhook.admission.routes import ROUTES
from trainguard.webhook.admission.server import AdmissionHandler, ServerSettings
from trainguard.webhook.policy.verdict import ClusterSnapshot

from reviews import fake_routes, review
from tests.unit.policy import real_world
from trainguard.webhook.admission.routes import bind_routes

PATHS = [r.path for r in ROUTES]

json_leaf = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
json_value = st.recursive(json_leaf, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=20)


class ErrorCollector(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        # Policy exceptions are logged by us on purpose (and answered); anything else at ERROR is a crash.
        if record.name != "trainguard.admission":
            self.records.append(record)


@pytest.fixture(scope="module")
def errors():
    collector = ErrorCollector()
    for name in ("aiohttp.server", "aiohttp.web", "asyncio"):
        logging.getLogger(name).addHandler(collector)
    yield collector
    for name in ("aiohttp.server", "aiohttp.web", "asyncio"):
        logging.getLogger(name).removeHandler(collector)


def _paths_in(value: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths_in(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths_in(v, prefix + (i,))
    return out


@st.composite
def mutated_review(draw: st.DrawFn) -> tuple[str, bytes]:
    path = draw(st.sampled_from(PATHS))
    body = review(draw(st.sampled_from(PATHS)), operation=draw(st.sampled_from(["CREATE", "UPDATE", "DELETE", "CONNECT"])))
    for _ in range(draw(st.integers(0, 3))):
        paths = _paths_in(body)
        target = draw(st.sampled_from(paths))
        action = draw(st.sampled_from(["replace", "delete", "insert"]))
        if not target:
            body = draw(json_value) if action == "replace" else body
            continue
        parent = body
        for key in target[:-1]:
            parent = parent[key]
        last = target[-1]
        if action == "delete":
            parent.pop(last) if isinstance(parent, dict) else parent.pop(last)
        elif action == "replace":
            parent[last] = draw(json_value)
        elif isinstance(parent, dict):
            parent[draw(st.text(max_size=8))] = draw(json_value)
    return path, json.dumps(body).encode()


@st.composite
def raw_body(draw: st.DrawFn) -> tuple[str, bytes]:
    path = draw(st.sampled_from(PATHS))
    kind = draw(st.sampled_from(["json", "bytes", "truncated"]))
    if kind == "json":
        return path, json.dumps(draw(json_value)).encode()
    if kind == "bytes":
        return path, draw(st.binary(max_size=200))
    full = json.dumps(review(path)).encode()
    return path, full[: draw(st.integers(0, len(full)))]


FUZZ = settings(max_examples=1500, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck), database=None)


async def _client() -> TestClient:
    handler = AdmissionHandler(fake_routes(), ClusterSnapshot, AdmissionMetrics(), ServerSettings(max_body_bytes=64 * 1024))
    client = TestClient(TestServer(handler.app()))
    await client.start_server()
    return client


def _check(status: int, text: str) -> None:
    assert status < 500, text
    if status == 200:
        out = json.loads(text)
        assert out["apiVersion"] == "admission.k8s.io/v1" and out["kind"] == "AdmissionReview"
        assert isinstance(out["response"]["uid"], str) and isinstance(out["response"]["allowed"], bool)


@pytest.mark.parametrize("strategy", [mutated_review(), raw_body()], ids=["mutated-reviews", "arbitrary-bodies"])
async def test_fuzz_never_5xx(strategy, errors: ErrorCollector) -> None:
    client = await _client()
    seen: list[int] = []
    try:
        bodies: list[tuple[str, bytes]] = []

        @FUZZ
        @given(strategy)
        def collect(case: tuple[str, bytes]) -> None:
            bodies.append(case)

        collect()  # hypothesis drives sync functions; the requests are sent below on this test's loop
        for path, body in bodies:
            resp = await client.post(path, data=body, headers={"Content-Type": "application/json"})
            text = await resp.text()
            _check(resp.status, text)
            seen.append(resp.status)
    finally:
        await client.close()
    assert len(seen) == len(bodies) >= 500
    assert errors.records == []
    # Both answer kinds occur: the fuzzer reaches the policies, not only the parser.
    assert 200 in seen and 400 in seen


# --- the real pipeline behind the server ------------------------------------------------------------------------

REAL_CASES = 1500
ROUTE_OF = {(r.kind, r.mutating): r.path for r in ROUTES}


def real_reviews() -> list[tuple[str, bytes]]:
    """Hostile variants of the real objects (``tests/unit/policy/real_world.py``), as the apiserver would send them
    to the webhook of their kind: CREATE and UPDATE (old = the object as stored), TrainJobs to both webhooks."""
    rng = random.Random(11)
    kinds = sorted(real_world.OBJECTS)
    out = []
    for i in range(REAL_CASES):
        kind = kinds[i % len(kinds)]
        base = rng.choice(real_world.OBJECTS[kind])
        operation = rng.choice(["CREATE", "UPDATE"])
        path = ROUTE_OF[(kind, kind == "TrainJob" and rng.random() < 0.5)]
        body = review(path, copy.deepcopy(base), operation=operation,
                      old=copy.deepcopy(base) if operation == "UPDATE" else None)
        body["request"]["object"] = real_world.mutate_once(base, rng)
        out.append((path, json.dumps(body).encode()))
    return out


async def test_fuzz_real_pipeline_over_http_never_answers_an_internal_error(errors: ErrorCollector) -> None:
    """The project's own policies, runtimes and DatasetCache behind the real server: every malformed spec is a
    denial (403 with a message), never an AdmissionReview code 500 from an exception inside a policy."""
    handler = AdmissionHandler(bind_routes(), real_world.snapshot, AdmissionMetrics(),
                               ServerSettings(max_body_bytes=8 * 1024 * 1024))
    client = TestClient(TestServer(handler.app()))
    await client.start_server()
    codes: dict[int | None, int] = {}
    try:
        for path, body in real_reviews():
            resp = await client.post(path, data=body, headers={"Content-Type": "application/json"})
            text = await resp.text()
            _check(resp.status, text)
            assert resp.status == 200, text
            response = json.loads(text)["response"]
            code = (response.get("status") or {}).get("code")
            assert code != 500, (path, response, body[:3000])
            if not response["allowed"]:
                assert code == 403 and response["status"]["message"], response
            codes[code] = codes.get(code, 0) + 1
    finally:
        await client.close()
    assert errors.records == []
    assert codes.get(None, 0) > REAL_CASES // 10 and codes.get(403, 0) > REAL_CASES // 4, codes
