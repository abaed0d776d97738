"""The admission server end to end in-process (aiohttp test client): codec, routing, patches, errors, limits."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import jsonpatch
import pytest
from aiohttp import ClientSession, web
from aiohttp.test_utils import TestClient, TestServer

from trainguard.webhook.admission.metrics import AdmissionMetrics
from trainguard.webhook.admission.server import AdmissionHandler, Readiness, ServerSettings, health_app
from trainguard.webhook.policy.verdict import ClusterSnapshot

from reviews import TRAINJOB, fake_routes, review

MUTATE = "/mutate-trainer-kubeflow-org-v1alpha1-trainjob"
VALIDATE = "/validate-trainer-kubeflow-org-v1alpha1-trainjob"
POLICY = "/validate-trainguard-io-v1alpha1-trainjobpolicy"


@pytest.fixture
async def server():
    metrics = AdmissionMetrics()
    handler = AdmissionHandler(fake_routes(), ClusterSnapshot, metrics, ServerSettings(max_body_bytes=64 * 1024, read_timeout=0.5))
    async with TestClient(TestServer(handler.app())) as client:
        yield client, metrics, handler


async def post(client: TestClient, path: str, body: Any, content_type: str = "application/json") -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    resp = await client.post(path, data=data, headers={"Content-Type": content_type})
    text = await resp.text()
    try:
        return resp.status, json.loads(text)
    except ValueError:
        return resp.status, text


def sample(metrics: AdmissionMetrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


async def test_mutation_returns_a_minimal_json_patch_and_echoes_the_uid(server) -> None:
    client, metrics, _ = server
    body = review(MUTATE, uid="uid-1")
    status, out = await post(client, MUTATE, body)
    assert status == 200
    resp = out["response"]
    assert resp["uid"] == "uid-1" and resp["allowed"] is True and resp["patchType"] == "JSONPatch"
    patch = json.loads(base64.b64decode(resp["patch"]))
    assert sorted(op["path"] for op in patch) == ["/metadata/labels/trainguard.io~1checked", "/spec/suspend"]
    assert all(op["op"] == "add" for op in patch)
    patched = jsonpatch.apply_patch(body["request"]["object"], patch)
    assert patched["metadata"]["labels"]["trainguard.io/checked"] == "true"
    assert resp["warnings"] == ["audit: numNodes above team budget"]
    assert sample(metrics, "trainguard_admission_requests_total", webhook="defaulter.trainjob.trainer.kubeflow.org", verdict="patched") == 1
    assert sample(metrics, "trainguard_admission_patch_bytes_count", webhook="defaulter.trainjob.trainer.kubeflow.org") == 1


async def test_mutation_is_idempotent_on_reinvocation(server) -> None:
    client, _, _ = server
    body = review(MUTATE)
    _, out = await post(client, MUTATE, body)
    patched = jsonpatch.apply_patch(body["request"]["object"], json.loads(base64.b64decode(out["response"]["patch"])))
    _, again = await post(client, MUTATE, review(MUTATE, patched))
    assert again["response"]["allowed"] is True and "patch" not in again["response"]


async def test_denial_has_code_403_and_the_policy_message(server) -> None:
    client, metrics, _ = server
    obj = json.loads(json.dumps(TRAINJOB))
    obj["spec"]["trainer"]["numNodes"] = 9
    status, out = await post(client, VALIDATE, review(VALIDATE, obj))
    assert status == 200
    assert out["response"]["allowed"] is False
    assert out["response"]["status"] == {
        "code": 403, "reason": "Forbidden", "message": "spec.trainer.numNodes: Invalid value: 9: must be no more than 4"
    }
    assert sample(metrics, "trainguard_admission_denials_total", webhook="validator.trainjob.trainer.kubeflow.org", reason="PolicyLimits") == 1


@pytest.mark.parametrize("dry_run", [False, True])
async def test_dry_run_gets_the_same_answer(server, dry_run: bool) -> None:
    client, _, _ = server
    _, out = await post(client, MUTATE, review(MUTATE, uid="same", dry_run=dry_run))
    assert out["response"]["patch"]  # identical patch either way
    assert out["response"]["uid"] == "same"


async def test_policy_exception_becomes_an_admission_error(server) -> None:
    client, metrics, _ = server
    status, out = await post(client, POLICY, review(POLICY))
    assert status == 200
    assert out["response"]["allowed"] is False
    assert out["response"]["status"]["code"] == 500
    assert "internal error in validator.trainjobpolicy.trainguard.io: KeyError" in out["response"]["status"]["message"]
    assert sample(metrics, "trainguard_admission_policy_errors_total", webhook="validator.trainjobpolicy.trainguard.io") == 1
    # and the server still answers
    status, _ = await post(client, VALIDATE, review(VALIDATE))
    assert status == 200


async def test_policy_exception_can_be_configured_to_admit() -> None:
    handler = AdmissionHandler(fake_routes(), ClusterSnapshot, AdmissionMetrics(), ServerSettings(on_policy_error="allow"))
    async with TestClient(TestServer(handler.app())) as client:
        _, out = await post(client, POLICY, review(POLICY))
    assert out["response"]["allowed"] is True and "skipped after an internal error" in out["response"]["warnings"][0]


def _wrong_kind(body: dict) -> dict:
    body["request"]["kind"]["kind"] = "Pod"
    return body


def _object_kind_mismatch(body: dict) -> dict:
    body["request"]["object"]["kind"] = "TrainingRuntime"
    return body


def _no_object(body: dict) -> dict:
    body["request"]["object"] = None
    return body


def _update_without_old(body: dict) -> dict:
    body["request"]["operation"] = "UPDATE"
    body["request"]["oldObject"] = None
    return body


@pytest.mark.parametrize(
    ("mutate", "fragment"),
    [
        (_wrong_kind, "serves trainer.kubeflow.org/v1alpha1, Kind=TrainJob; got trainer.kubeflow.org/v1alpha1, Kind=Pod"),
        (_object_kind_mismatch, "the object is a 'TrainingRuntime'"),
        (_no_object, "CREATE review carries no object"),
        (_update_without_old, "UPDATE review carries no oldObject"),
    ],
    ids=["request-kind", "object-kind", "no-object", "update-without-old"],
)
async def test_answerable_but_wrong_reviews_get_an_admission_error(server, mutate, fragment: str) -> None:
    client, _, _ = server
    status, out = await post(client, VALIDATE, mutate(review(VALIDATE, uid="u")))
    assert status == 200
    assert out["response"]["uid"] == "u" and out["response"]["allowed"] is False
    assert out["response"]["status"]["code"] == 400 and fragment in out["response"]["status"]["message"]


async def test_delete_is_admitted_without_calling_the_policy(server) -> None:
    client, _, _ = server
    body = review(POLICY, operation="DELETE")  # the policy for this path raises; DELETE never reaches it
    body["request"]["object"] = None
    _, out = await post(client, POLICY, body)
    assert out["response"]["allowed"] is True


def _set(path: list[str], value: Any):
    def f(body: dict) -> dict:
        target = body
        for p in path[:-1]:
            target = target[p]
        target[path[-1]] = value
        return body
    return f


def _drop(key: str):
    def f(body: dict) -> dict:
        del body[key]
        return body
    return f


@pytest.mark.parametrize(
    ("payload", "content_type", "status", "fragment"),
    [
        (b"{not json", "application/json", 400, "body is not JSON"),
        (b"\xff\xfe", "application/json", 400, "body is not JSON"),
        (b"[1,2]", "application/json", 400, "JSON list"),
        (_set(["apiVersion"], "admission.k8s.io/v1beta1"), "application/json", 400, "apiVersion"),
        (_set(["kind"], "Review"), "application/json", 400, "kind"),
        (_drop("request"), "application/json", 400, "request"),
        (_set(["request", "uid"], ""), "application/json", 400, "uid"),
        (_set(["request", "uid"], 7), "application/json", 400, "uid"),
        (_set(["request", "operation"], "PATCH"), "application/json", 400, "operation"),
        (_set(["request", "dryRun"], "true"), "application/json", 400, "dryRun"),
        (b"{}", "text/plain", 415, "Content-Type must be application/json"),
        (b"{}", "application/x-www-form-urlencoded", 415, "Content-Type"),
        (b" " * (64 * 1024 + 1), "application/json", 413, "exceeds the 65536-byte limit"),
    ],
    ids=["garbage", "not-utf8", "list", "v1beta1", "kind", "no-request", "empty-uid", "int-uid", "operation",
         "string-bool", "text-plain", "form", "too-large"],
)
async def test_bad_requests_get_4xx_and_a_reason(server, payload, content_type: str, status: int, fragment: str) -> None:
    client, metrics, _ = server
    body = payload if isinstance(payload, bytes) else payload(review(VALIDATE))
    got, text = await post(client, VALIDATE, body, content_type)
    assert got == status and fragment in text
    total = sum(
        s.value for fam in metrics.registry.collect() if fam.name == "trainguard_admission_bad_requests"
        for s in fam.samples if s.name.endswith("_total")
    )
    assert total == 1


async def test_unknown_fields_are_tolerated(server) -> None:
    client, _, _ = server
    body = review(VALIDATE)
    body["futureField"] = {"x": 1}
    body["request"]["somethingNew"] = True
    status, out = await post(client, VALIDATE, body)
    assert status == 200 and out["response"]["allowed"] is True


async def test_chunked_body_over_the_limit_is_413(server) -> None:
    client, _, _ = server

    async def chunks():
        for _ in range(20):
            yield b" " * 8192

    resp = await client.post(VALIDATE, data=chunks(), headers={"Content-Type": "application/json"})
    assert resp.status == 413


async def test_slow_body_times_out_with_408(server) -> None:
    client, metrics, _ = server
    release = asyncio.Event()

    async def stalled():
        yield b'{"apiVersion":'
        await release.wait()  # never sends the rest within the 0.5 s read timeout
        yield b"}"

    try:
        resp = await client.post(VALIDATE, data=stalled(), headers={"Content-Type": "application/json"})
        assert resp.status == 408
    finally:
        release.set()


async def test_unknown_path_and_method(server) -> None:
    client, _, _ = server
    assert (await client.post("/validate-nothing", data=b"{}", headers={"Content-Type": "application/json"})).status == 404
    assert (await client.get(VALIDATE)).status == 405


async def test_health_readiness_and_metrics() -> None:
    metrics = AdmissionMetrics()
    state = {"certs": False, "caches": {"jobsets": False}}
    metrics.watch_caches(lambda: state["caches"])
    app = health_app(Readiness(lambda: state["certs"], lambda: state["caches"]), metrics)
    async with TestClient(TestServer(app)) as client:
        assert (await client.get("/healthz")).status == 200
        not_ready = await client.get("/readyz")
        assert not_ready.status == 503 and (await not_ready.json())["caches"] == {"jobsets": False}
        state["certs"] = True
        assert (await client.get("/readyz")).status == 503  # caches still not synced
        state["caches"] = {"jobsets": True}
        assert (await client.get("/readyz")).status == 200
        text = await (await client.get("/metrics")).text()
    assert 'trainguard_cache_synced{cache="jobsets"} 1.0' in text
    assert "trainguard_admission_duration_seconds" in text


async def test_readiness_names_an_unserved_kind_with_its_fix() -> None:
    """Certificates loaded and caches synced, but a kind the webhook needs answers 404 (its CRD deleted or not at
    the version read): 503, the problem in the body."""
    metrics = AdmissionMetrics()
    state = {"problems": ["jobsets.jobset.x-k8s.io jobset.x-k8s.io/v1alpha2 is not served: install it"]}
    app = health_app(Readiness(lambda: True, lambda: {"jobsets": True}, lambda: state["problems"]), metrics)
    async with TestClient(TestServer(app)) as client:
        resp = await client.get("/readyz")
        assert resp.status == 503 and (await resp.json())["problems"] == state["problems"]
        state["problems"] = []
        resp = await client.get("/readyz")
        assert resp.status == 200 and (await resp.json())["problems"] == []


async def test_each_review_logs_one_structured_line(server, json_logs) -> None:
    client, _, _ = server
    await post(client, MUTATE, review(MUTATE, uid="log-uid"))
    lines = [l for l in json_logs.lines if l.get("uid") == "log-uid"]
    assert len(lines) == 1
    line = lines[0]
    assert line["webhook"] == "defaulter.trainjob.trainer.kubeflow.org" and line["verdict"] == "patched"
    assert line["kind"] == "TrainJob" and line["namespace"] == "team-a" and line["object"] == "job"
    assert line["operation"] == "CREATE" and line["patch_ops"] == 2 and "duration_ms" in line


async def test_the_log_line_says_what_audit_warned_and_who_asked(server, json_logs) -> None:
    """Audit speaks to the requester only through warnings: the log line keeps their text and the user, so an admin
    reading the webhook's logs sees what was admitted despite a policy."""
    client, _, _ = server
    await post(client, MUTATE, review(MUTATE, uid="audit-uid"))
    line = next(l for l in json_logs.lines if l.get("uid") == "audit-uid")
    assert line["warnings"] == 1 and line["warning_texts"] == ["audit: numNodes above team budget"]
    assert line["user"] == "alice" and line["denial"] is None


async def test_the_log_line_of_a_denial_carries_its_message(server, json_logs) -> None:
    client, _, _ = server
    obj = json.loads(json.dumps(TRAINJOB))
    obj["spec"]["trainer"]["numNodes"] = 9
    await post(client, VALIDATE, review(VALIDATE, obj, uid="deny-uid"))
    line = next(l for l in json_logs.lines if l.get("uid") == "deny-uid")
    assert line["verdict"] == "denied" and line["user"] == "alice"
    assert line["denial"] == "spec.trainer.numNodes: Invalid value: 9: must be no more than 4"


async def test_the_log_line_bounds_the_texts_it_carries(json_logs) -> None:
    """A review may bring dozens of warnings and a long aggregated denial: the line keeps the first few, each
    capped, and says how many it left out."""
    from reviews import FAKE_POLICIES
    from trainguard.webhook.admission.routes import bind_routes
    from trainguard.webhook.admission.server import LOG_TEXT_MAX, LOG_WARNINGS_MAX
    from trainguard.webhook.policy.verdict import Verdict

    def noisy_denial(inp, snap):  # type: ignore[no-untyped-def]
        return Verdict.deny("z" * 5000, "PolicyLimits", [f"audit {i}: " + "y" * 100 for i in range(30)])

    routes = bind_routes({**FAKE_POLICIES, "validate_training_runtime": noisy_denial})
    handler = AdmissionHandler(routes, ClusterSnapshot, AdmissionMetrics())
    async with TestClient(TestServer(handler.app())) as client:
        path = "/validate-trainer-kubeflow-org-v1alpha1-trainingruntime"
        await post(client, path, review(path, uid="noisy-uid"))
    line = next(l for l in json_logs.lines if l.get("uid") == "noisy-uid")
    texts = line["warning_texts"]
    assert texts[:LOG_WARNINGS_MAX] == [f"audit {i}: " + "y" * 100 for i in range(LOG_WARNINGS_MAX)]
    assert texts[LOG_WARNINGS_MAX:] == [f"... {30 - LOG_WARNINGS_MAX} more"]
    assert len(line["denial"]) == LOG_TEXT_MAX and line["denial"].endswith("...")


async def test_a_client_that_never_finishes_its_headers_is_disconnected() -> None:
    handler = AdmissionHandler(fake_routes(), ClusterSnapshot, AdmissionMetrics(), ServerSettings(idle_timeout=0.3))
    runner = handler.runner()
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST " + VALIDATE.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-")  # and then nothing
        await writer.drain()
        # The server closes the connection (EOF) instead of holding it forever; the bound is only a safety net.
        assert await asyncio.wait_for(reader.read(), timeout=30) == b""
        writer.close()
    finally:
        await runner.cleanup()


async def test_warnings_are_bounded_to_what_the_apiserver_passes_on() -> None:
    """A warning with a control character is dropped by the apiserver (invalid Warning header); past 4096 runes
    in all it cuts every warning to 256 runes. So newlines become spaces, each warning is at most 256 runes, all of
    them at most 4096, and a closing note says how many did not fit."""
    from reviews import FAKE_POLICIES
    from trainguard.webhook.admission.review import WARNING_MAX_RUNES, WARNINGS_TOTAL_RUNES
    from trainguard.webhook.admission.routes import bind_routes
    from trainguard.webhook.policy.verdict import Verdict

    def noisy(inp, snap):  # type: ignore[no-untyped-def]
        return Verdict.allow(None, ["line one\nline two\ttabbed", "x" * 1000, "dup", "dup",
                                    *(f"audit {i}: " + "y" * 200 for i in range(40))])

    routes = bind_routes({**FAKE_POLICIES, "validate_training_runtime": noisy})
    handler = AdmissionHandler(routes, ClusterSnapshot, AdmissionMetrics())
    async with TestClient(TestServer(handler.app())) as client:
        path = "/validate-trainer-kubeflow-org-v1alpha1-trainingruntime"
        status, out = await post(client, path, review(path))
    assert status == 200
    warnings = out["response"]["warnings"]
    assert warnings[0] == "line one line two tabbed"
    assert len(warnings[1]) == WARNING_MAX_RUNES and warnings[1].endswith("...")
    assert warnings.count("dup") == 1
    assert all(len(w) <= WARNING_MAX_RUNES for w in warnings)
    assert not any(c in w for w in warnings for c in "\n\t\r")
    assert sum(len(w) for w in warnings) <= WARNINGS_TOTAL_RUNES
    assert warnings[-1].startswith("trainguard: ") and "more warnings omitted" in warnings[-1]


def test_long_warnings_are_kept_whole_while_all_fit() -> None:
    """The apiserver cuts warnings to 256 runes only once a request's warnings pass 4096 in total: a single long
    Audit finding (a topology message with all its numbers) must reach the user whole."""
    from trainguard.webhook.admission.review import WARNING_MAX_RUNES, bound_warnings

    long = "spec.trainer: fits no topology level of TrainJobPolicy: " + "n" * 400
    assert len(long) > WARNING_MAX_RUNES
    assert bound_warnings([long, "short", "short"]) == [long, "short"]


# ---- no request can stall others: the policy budget and the body budget ------------------------------------------


def _slow_routes(release: "threading.Event"):  # type: ignore[name-defined]
    """The TrainingRuntime validator blocks (CPU or a bug: the server cannot tell) until ``release`` is set."""
    from reviews import FAKE_POLICIES
    from trainguard.webhook.admission.routes import bind_routes
    from trainguard.webhook.policy.verdict import Verdict

    def stuck(inp, snap):  # type: ignore[no-untyped-def]
        release.wait(30)
        return Verdict.allow(None)

    return bind_routes({**FAKE_POLICIES, "validate_training_runtime": stuck})


RUNTIME = "/validate-trainer-kubeflow-org-v1alpha1-trainingruntime"


@pytest.mark.parametrize(
    ("on_error", "allowed", "fragment"),
    [("deny", False, "internal error in validator.trainingruntime.trainer.kubeflow.org: policy did not decide within 2.0s"),
     ("allow", True, "validator.trainingruntime.trainer.kubeflow.org skipped: policy did not decide within 2.0s")],
)
async def test_an_overdue_review_is_answered_at_the_deadline_while_others_flow(on_error: str, allowed: bool, fragment: str) -> None:
    import threading

    release = threading.Event()
    metrics = AdmissionMetrics()
    handler = AdmissionHandler(_slow_routes(release), ClusterSnapshot, metrics,
                               ServerSettings(policy_timeout=2.0, policy_workers=2, on_policy_error=on_error))  # type: ignore[arg-type]
    try:
        async with TestClient(TestServer(handler.app())) as client:
            stuck = asyncio.create_task(post(client, RUNTIME, review(RUNTIME, uid="slow")))
            await asyncio.sleep(0.05)
            # While the stuck review holds a worker, the other reviews are decided, all of them before the stuck
            # one's deadline (an order, not a duration: on a loaded machine one review may take a while, but none
            # waits for the stuck worker).
            for _ in range(5):
                status, out = await asyncio.wait_for(post(client, VALIDATE, review(VALIDATE)), 1.9)
                assert status == 200 and out["response"]["allowed"] is True
            assert not stuck.done()
            status, out = await asyncio.wait_for(stuck, 10)
    finally:
        release.set()
    resp = out["response"]
    assert status == 200 and resp["uid"] == "slow" and resp["allowed"] is allowed
    text = resp["warnings"][0] if allowed else resp["status"]["message"]
    assert fragment in text
    assert sample(metrics, "trainguard_admission_policy_timeouts_total", webhook="validator.trainingruntime.trainer.kubeflow.org") == 1
    assert sample(metrics, "trainguard_admission_requests_total", webhook="validator.trainingruntime.trainer.kubeflow.org", verdict="error") == 1


async def test_reviews_queued_behind_stuck_workers_get_their_answer_at_the_deadline() -> None:
    import threading

    release = threading.Event()
    handler = AdmissionHandler(_slow_routes(release), ClusterSnapshot, AdmissionMetrics(),
                               ServerSettings(policy_timeout=0.3, policy_workers=1))
    try:
        async with TestClient(TestServer(handler.app())) as client:
            first = asyncio.create_task(post(client, RUNTIME, review(RUNTIME)))
            await asyncio.sleep(0.05)
            status, out = await asyncio.wait_for(post(client, VALIDATE, review(VALIDATE, uid="queued")), 5)
            await first
    finally:
        release.set()
    # The only worker is stuck: the queued review never ran, and still got a clear answer in time.
    assert status == 200 and out["response"]["uid"] == "queued" and out["response"]["allowed"] is False
    assert "did not decide within 0.3s" in out["response"]["status"]["message"]


async def test_held_bodies_are_bounded_and_small_reviews_still_pass() -> None:
    """Clients that never finish large bodies hold at most the large share of the budget (a fourth one is not even
    read); a normal review gets through meanwhile; every holder is cut at its read deadline and the budget is whole
    again afterwards."""
    from trainguard.webhook.admission.budget import BudgetSettings

    KiB = 1024
    settings = ServerSettings(max_body_bytes=64 * KiB, read_timeout=1.0,
                              body_budget=BudgetSettings(total_bytes=256 * KiB, large_body_bytes=16 * KiB))
    handler = AdmissionHandler(fake_routes(), ClusterSnapshot, AdmissionMetrics(), settings)
    # The production runner (TestServer ignores runner options such as lingering_time).
    runner = handler.runner()
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        held = []
        for _ in range(4):
            r, w = await asyncio.open_connection("127.0.0.1", port)
            w.write(f"POST {VALIDATE} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {64 * KiB}\r\n\r\n".encode()
                    + b" " * (60 * KiB))  # and never the rest
            await w.drain()
            held.append((r, w))
        await asyncio.sleep(0.2)
        assert handler.budget.in_use == 192 * KiB  # 3 x 64 KiB = 75% of 256 KiB; the fourth waits unread
        async with ClientSession() as session:
            async with session.post(f"http://127.0.0.1:{port}{VALIDATE}", json=review(VALIDATE)) as resp:
                assert resp.status == 200 and (await resp.json())["response"]["allowed"] is True
        for r, w in held:  # answered at the read deadline AND closed (no lingering read of the rest)
            first_line = (await asyncio.wait_for(r.read(), 5)).split(b"\r\n")[0]
            assert b" 408 " in first_line or b" 503 " in first_line
            w.close()
        assert handler.budget.in_use == 0 and handler.budget.large_in_use == 0
    finally:
        await runner.cleanup()


async def test_a_body_that_cannot_get_its_share_in_time_is_answered_503() -> None:
    from trainguard.webhook.admission.budget import BudgetSettings

    KiB = 1024
    settings = ServerSettings(max_body_bytes=64 * KiB, read_timeout=0.3,
                              body_budget=BudgetSettings(total_bytes=256 * KiB, large_body_bytes=16 * KiB))
    metrics = AdmissionMetrics()
    handler = AdmissionHandler(fake_routes(), ClusterSnapshot, metrics, settings)
    big = review(VALIDATE)
    big["padding"] = "x" * (40 * KiB)
    async with TestClient(TestServer(handler.app())) as client:
        assert handler.budget.try_acquire(64 * KiB) and handler.budget.try_acquire(64 * KiB) and handler.budget.try_acquire(64 * KiB)
        status, text = await post(client, VALIDATE, big)
        assert status == 503 and "server busy: 196608 bytes of request bodies in flight" in text
        assert (await post(client, VALIDATE, review(VALIDATE)))[0] == 200  # small ones still fit
        await handler.budget.release(64 * KiB)
        assert (await post(client, VALIDATE, big))[0] == 200
    assert sample(metrics, "trainguard_admission_bad_requests_total", reason="busy") == 1
