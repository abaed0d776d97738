"""Smoke tests of the local control plane itself: each exercises a piece of real API machinery the rest of the
suite depends on (CRD install and round-trip, CEL validation with HTTP 422, a webhook called by the apiserver whose
denial reaches kubectl). If one of these fails, the integration tests above it mean nothing."""

from __future__ import annotations

import asyncio
import base64
import datetime
import ipaddress
import json
import ssl
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest
import yaml
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from kubernetes import client
from kubernetes.client.rest import ApiException

JOBSET = {
    "apiVersion": "jobset.x-k8s.io/v1alpha2",
    "kind": "JobSet",
    "metadata": {"name": "smoke"},
    "spec": {
        "suspend": True,
        "replicatedJobs": [
            {
                "name": "node",
                "replicas": 2,
                "template": {
                    "spec": {
                        "parallelism": 3,
                        "completions": 3,
                        "template": {
                            "spec": {
                                "restartPolicy": "Never",
                                "containers": [{"name": "node", "image": "busybox:1.36", "command": ["true"]}],
                            }
                        },
                    }
                },
            }
        ],
    },
}


def test_readyz(cluster):
    assert cluster.kubectl("get", "--raw", "/readyz").stdout.strip() == "ok"


def test_jobset_round_trips_through_the_api(cluster, namespace):
    api = client.CustomObjectsApi(cluster.api_client())
    api.create_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", namespace, "jobsets", JOBSET)
    got = api.get_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", namespace, "jobsets", "smoke")
    rjob = got["spec"]["replicatedJobs"][0]
    assert rjob["replicas"] == 2
    assert rjob["template"]["spec"]["parallelism"] == 3
    assert rjob["template"]["spec"]["template"]["spec"]["containers"][0]["image"] == "busybox:1.36"
    # The structural schema applied JobSet's own defaults on the way in: proof the real CRD is installed.
    assert rjob["groupName"] == "default"
    assert got["spec"]["suspend"] is True


WIDGET_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.smoke.trainguard.io"},
    "spec": {
        "group": "smoke.trainguard.io",
        "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList"},
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {"min": {"type": "integer"}, "max": {"type": "integer"}},
                                "x-kubernetes-validations": [
                                    {"rule": "self.min <= self.max", "message": "min must not exceed max"}
                                ],
                            }
                        },
                    }
                },
            }
        ],
    },
}


def widget(name: str, lo: int, hi: int) -> dict:
    return {"apiVersion": "smoke.trainguard.io/v1", "kind": "Widget", "metadata": {"name": name},
            "spec": {"min": lo, "max": hi}}


def test_cel_rule_rejects_with_422(cluster, namespace):
    cluster.kubectl("apply", "-f", "-", input=json.dumps(WIDGET_CRD))
    cluster.kubectl("wait", "--for", "condition=established", "crd/widgets.smoke.trainguard.io")
    api = client.CustomObjectsApi(cluster.api_client())
    api.create_namespaced_custom_object("smoke.trainguard.io", "v1", namespace, "widgets", widget("good", 1, 2))
    with pytest.raises(ApiException) as err:
        api.create_namespaced_custom_object("smoke.trainguard.io", "v1", namespace, "widgets", widget("bad", 3, 2))
    assert err.value.status == 422
    assert "min must not exceed max" in json.loads(err.value.body)["message"]
    # kubectl shows the same message to a user.
    out = cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(widget("bad", 3, 2)), check=False)
    assert out.returncode != 0
    assert "min must not exceed max" in out.stderr


def _self_signed(tmp: Path) -> tuple[Path, Path, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "smoke-webhook")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    crt, pem_key = tmp / "tls.crt", tmp / "tls.key"
    crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pem_key.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    return crt, pem_key, crt.read_bytes()


@pytest.fixture
def denying_webhook(tmp_path: Path) -> Iterator[tuple[int, bytes, list[dict]]]:
    """A loopback TLS aiohttp server that denies every ConfigMap whose data has key ``forbidden``."""
    crt, key, ca = _self_signed(tmp_path)
    seen: list[dict] = []

    async def review(request: web.Request) -> web.Response:
        body = await request.json()
        req = body["request"]
        seen.append(req)
        denied = "forbidden" in ((req.get("object") or {}).get("data") or {})
        response = {"uid": req["uid"], "allowed": not denied}
        if denied:
            response["status"] = {"code": 403, "message": "data.forbidden: Forbidden: smoke test says no"}
        return web.json_response({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                  "response": response})

    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(crt, key)
    loop = asyncio.new_event_loop()
    started = threading.Event()
    holder: dict = {}

    async def serve() -> None:
        app = web.Application()
        app.router.add_post("/validate", review)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
        await site.start()
        holder["runner"] = runner
        holder["port"] = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        started.set()

    thread = threading.Thread(target=lambda: (loop.run_until_complete(serve()), loop.run_forever()), daemon=True)
    thread.start()
    assert started.wait(10)
    try:
        yield holder["port"], ca, seen
    finally:
        asyncio.run_coroutine_threadsafe(holder["runner"].cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


def test_webhook_denial_reaches_kubectl(cluster, namespace, denying_webhook):
    port, ca, seen = denying_webhook
    name = f"smoke-{namespace}"
    config = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [{
            "name": "smoke.trainguard.io",
            "clientConfig": {"url": f"https://127.0.0.1:{port}/validate",
                             "caBundle": base64.b64encode(ca).decode()},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                       "resources": ["configmaps"]}],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "failurePolicy": "Fail",
            "timeoutSeconds": 5,
        }],
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(config))
    try:
        bad = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bad", "namespace": namespace},
               "data": {"forbidden": "yes"}}
        good = {**bad, "metadata": {"name": "good", "namespace": namespace}, "data": {"fine": "yes"}}
        # The webhook configuration takes effect asynchronously in the apiserver: retry the allowed create until
        # the webhook has seen a request, then assert on the denial.
        for _ in range(50):
            cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(good))
            if seen:
                break
            cluster.kubectl("delete", "configmap", "good", "-n", namespace)
            time.sleep(0.2)
        assert seen, "the apiserver never called the webhook"
        out = cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(bad), check=False)
        assert out.returncode != 0
        assert 'admission webhook "smoke.trainguard.io" denied the request' in out.stderr
        assert "data.forbidden: Forbidden: smoke test says no" in out.stderr
        assert seen[-1]["operation"] == "CREATE" and seen[-1]["object"]["metadata"]["name"] == "bad"
    finally:
        cluster.kubectl("delete", "validatingwebhookconfiguration", name, check=False)
