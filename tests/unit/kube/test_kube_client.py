"""KubeClient against a fake apiserver (aiohttp test server): paths, verbs, content types, errors, watch frames."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from trainguard.webhook.kube import resources as r
from trainguard.webhook.kube.client import KubeClient, decode_watch_line
from trainguard.webhook.kube.config import ClusterConfig
from trainguard.webhook.kube.errors import AlreadyExists, ApiError, Conflict, Gone, Invalid, NotFound, error_from_status


@pytest.mark.parametrize(
    ("resource", "namespace", "name", "sub", "path"),
    [
        (r.TRAINJOBS, "ns", "job", None, "/apis/trainer.kubeflow.org/v1alpha1/namespaces/ns/trainjobs/job"),
        (r.TRAINJOBS, "ns", "job", "status", "/apis/trainer.kubeflow.org/v1alpha1/namespaces/ns/trainjobs/job/status"),
        (r.TRAINJOBS, None, None, None, "/apis/trainer.kubeflow.org/v1alpha1/trainjobs"),
        (r.SECRETS, "kube-system", None, None, "/api/v1/namespaces/kube-system/secrets"),
        (r.NAMESPACES, "ignored", "team-a", None, "/api/v1/namespaces/team-a"),
        (r.CLUSTER_TRAINING_RUNTIMES, None, "torch", None, "/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes/torch"),
    ],
)
def test_resource_paths(resource: r.Resource, namespace: str | None, name: str | None, sub: str | None, path: str) -> None:
    assert resource.path(namespace, name, sub) == path


def test_empty_name_is_rejected() -> None:
    with pytest.raises(ValueError):
        r.TRAINJOBS.path("ns", "")


@pytest.mark.parametrize(
    ("code", "body", "cls", "message"),
    [
        (404, {"kind": "Status", "code": 404, "reason": "NotFound", "message": 'trainjobs "x" not found'}, NotFound, 'trainjobs "x" not found'),
        (409, {"code": 409, "reason": "AlreadyExists", "message": "exists"}, AlreadyExists, "exists"),
        (409, {"code": 409, "reason": "Conflict", "message": "modified"}, Conflict, "modified"),
        (410, {"code": 410, "reason": "Expired", "message": "too old"}, Gone, "too old"),
        (422, {"code": 422, "reason": "Invalid", "message": "spec.x: Required value"}, Invalid, "spec.x: Required value"),
        (500, "plain text", ApiError, "plain text"),
        (503, None, ApiError, "HTTP 503"),
    ],
)
def test_errors_by_status(code: int, body: Any, cls: type, message: str) -> None:
    err = error_from_status(code, body)
    assert type(err) is cls and err.code == code and err.message == message


def test_watch_error_frame_raises_gone() -> None:
    with pytest.raises(Gone):
        decode_watch_line(b'{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired","message":"x"}}')
    with pytest.raises(ApiError):
        decode_watch_line(b"{not json")


class FakeApiserver:
    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        self.app = web.Application()
        self.app.router.add_route("*", "/{tail:.*}", self.handle)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.seen.append(
            {"method": request.method, "path": request.path, "query": dict(request.query),
             "ctype": request.headers.get("Content-Type"), "auth": request.headers.get("Authorization"),
             "body": json.loads(body) if body else None}
        )
        if request.query.get("watch") == "true":
            resp = web.StreamResponse(headers={"Content-Type": "application/json"})
            await resp.prepare(request)
            big = {"type": "ADDED", "object": {"metadata": {"name": "big", "resourceVersion": "2"}, "data": "x" * 300_000}}
            frame = json.dumps(big).encode() + b"\n"
            for i in range(0, len(frame), 7000):  # dribble it in pieces: frames span chunks
                await resp.write(frame[i : i + 7000])
            await resp.write(b'{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"3"}}}\n')
            await resp.write(b'{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired","message":"gone"}}\n')
            return resp
        if request.path.endswith("/missing"):
            return web.json_response({"kind": "Status", "code": 404, "reason": "NotFound", "message": 'jobsets "missing" not found'}, status=404)
        if "continue" not in request.query and request.method == "GET" and request.path.endswith("/jobsets"):
            return web.json_response({"items": [{"metadata": {"name": "a"}}], "metadata": {"continue": "t1", "resourceVersion": "5"}})
        if request.method == "GET" and request.path.endswith("/jobsets"):
            return web.json_response({"items": [{"metadata": {"name": "b"}}], "metadata": {"resourceVersion": "6"}})
        return web.json_response({"ok": True, "echo": json.loads(body) if body else None})


@pytest.fixture
async def fake() -> Any:
    api = FakeApiserver()
    server = TestServer(api.app)
    await server.start_server()
    config = ClusterConfig(server=str(server.make_url("")).rstrip("/"), ssl_context=False, authorization=lambda: "Bearer t0k")
    async with KubeClient(config) as kube:
        yield api, kube
    await server.close()


async def test_verbs_send_the_right_requests(fake: Any) -> None:
    api, kube = fake
    desired = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "j", "namespace": "ns"}}
    await kube.apply(r.JOBSETS, desired, field_manager="trainguard")
    await kube.merge_patch(r.TRAINJOBS, "t", {"spec": {"suspend": True}}, "ns")
    await kube.patch_status(r.TRAINJOBS, "t", {"conditions": []}, "ns", field_manager="trainguard")
    await kube.create(r.SECRETS, {"metadata": {"name": "s", "namespace": "ns"}}, dry_run=True)
    await kube.delete(r.JOBSETS, "j", "ns")
    apply, merge, status, create, delete = api.seen
    assert apply["method"] == "PATCH" and apply["ctype"] == "application/apply-patch+yaml"
    assert apply["query"] == {"fieldManager": "trainguard", "force": "true"} and apply["body"] == desired
    assert merge["ctype"] == "application/merge-patch+json" and merge["path"].endswith("/namespaces/ns/trainjobs/t")
    assert status["path"].endswith("/trainjobs/t/status") and status["body"] == {"status": {"conditions": []}}
    assert create["method"] == "POST" and create["path"] == "/api/v1/namespaces/ns/secrets" and create["query"] == {"dryRun": "All"}
    assert delete["method"] == "DELETE" and delete["body"]["propagationPolicy"] == "Background"
    assert all(s["auth"] == "Bearer t0k" for s in api.seen)


async def test_not_found_carries_the_status_message(fake: Any) -> None:
    _, kube = fake
    with pytest.raises(NotFound, match='jobsets "missing" not found'):
        await kube.get(r.JOBSETS, "missing", "ns")


async def test_list_all_follows_continue_tokens(fake: Any) -> None:
    _, kube = fake
    items, rv = await kube.list_all(r.JOBSETS, "ns")
    assert [i["metadata"]["name"] for i in items] == ["a", "b"] and rv == "6"


async def test_watch_reassembles_large_frames_and_raises_gone(fake: Any) -> None:
    api, kube = fake
    got = []
    with pytest.raises(Gone):
        async for e in kube.watch(r.JOBSETS, "ns", resource_version="1"):
            got.append(e)
    assert [e.type for e in got] == ["ADDED", "BOOKMARK"]
    assert len(got[0].object["data"]) == 300_000
    assert api.seen[-1]["query"] == {"watch": "true", "timeoutSeconds": "300", "resourceVersion": "1", "allowWatchBookmarks": "true"}


@pytest.mark.parametrize("frame", [b"[1, 2]", b'"text"', b'{"type": "ADDED", "object": [1]}',
                                   b'{"type": "ERROR", "object": "boom"}'])
def test_malformed_watch_frames_are_api_errors(frame: bytes) -> None:
    from trainguard.webhook.kube.client import decode_watch_line

    with pytest.raises(ApiError) as info:
        decode_watch_line(frame)
    assert info.value.reason == "BadWatchFrame"


def test_error_frame_with_a_non_numeric_code_is_still_an_api_error() -> None:
    from trainguard.webhook.kube.client import decode_watch_line

    with pytest.raises(ApiError) as info:
        decode_watch_line(b'{"type": "ERROR", "object": {"code": "x", "message": "m"}}')
    assert info.value.code == 500


@pytest.mark.parametrize("text", ["echo 🌀 ready 😪", "no astral: é ü", "\\ud83c\\udf00 is text, not an escape",
                                  "\\\\🐸", "mixed \\\\\\ud83c🐸"])
def test_apply_body_is_yaml_the_apiserver_reads(text: str) -> None:
    # the apiserver parses apply-patch+yaml as YAML, which has no surrogate-pair escapes (upstream's Flux scripts carry emoji)
    import re as _re

    import yaml

    from trainguard.webhook.kube.client import apply_body

    obj = {"data": {"entrypoint.sh": text}}
    body = apply_body(obj).decode()
    assert yaml.safe_load(body) == obj
    assert not _re.search(r"(?<!\\)(?:\\\\)*\\ud[89ab]", body)
