"""``trainguard webhook`` called by the real apiserver: mutation, 403 denials, warnings, dry-run, failurePolicy,
and certificate rotation under a stream of requests."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from kubernetes import client
from kubernetes.client.rest import ApiException

from conftest import SCOPE_LABEL, Registered, register, start_webhook, unregister, wait_until_called

GROUP, VERSION = "trainer.kubeflow.org", "v1alpha1"


def cluster_runtime(name: str, scope: str, *, deprecated: bool = False) -> dict[str, Any]:
    labels = {SCOPE_LABEL: scope, "trainer.kubeflow.org/framework": "torch"}
    if deprecated:
        labels["trainer.kubeflow.org/support"] = "deprecated"
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterTrainingRuntime",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "mlPolicy": {"numNodes": 1, "torch": {}},
            "template": {"spec": {"replicatedJobs": [{
                "name": "node",
                "template": {
                    "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                    "spec": {"template": {"spec": {"containers": [{"name": "node", "image": "pytorch/pytorch:2.5.1"}]}}},
                },
            }]}},
        },
    }


def trainjob(name: str, namespace: str, runtime: str, *, patches: bool = True) -> dict[str, Any]:
    spec: dict[str, Any] = {"runtimeRef": {"name": runtime}, "trainer": {"image": "ghcr.io/acme/train:1.0"}}
    if patches:
        spec["runtimePatches"] = [{"manager": "acme.io/scheduler", "trainingRuntimeSpec": {"template": {"metadata": {"labels": {"team": "a"}}}}}]
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainJob", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


@pytest.fixture
def runtime(cluster, admission: Registered) -> str:
    name = f"torch-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("apply", "-f", "-", input=json.dumps(cluster_runtime(name, admission.namespace)))
    yield name
    cluster.kubectl("delete", "clustertrainingruntime", name, "--ignore-not-found", check=False)


def apply_until_cached(cluster, obj: dict[str, Any], *, dry_run: bool = False, retries: int = 50) -> Any:
    """kubectl apply; retried while the webhook's cache has not yet seen the runtime created just before."""
    args = ["apply", "-o", "json", "-f", "-"] + (["--dry-run=server"] if dry_run else [])
    for _ in range(retries):
        proc = cluster.kubectl(*args, input=json.dumps(obj), check=False)
        if proc.returncode == 0 or "must be created before" not in proc.stderr:
            return proc
        time.sleep(0.2)
    return proc


def test_kubectl_apply_sees_the_mutation(cluster, namespace, admission, runtime) -> None:
    proc = apply_until_cached(cluster, trainjob("mutated", namespace, runtime))
    assert proc.returncode == 0, proc.stderr
    stored = json.loads(cluster.kubectl("get", "trainjob", "mutated", "-n", namespace, "-o", "json").stdout)
    stamped = stored["spec"]["runtimePatches"][0]["time"]
    assert stamped.endswith("Z")  # runtimePatches[].time stamped by the mutating webhook (as upstream)
    # Re-applying the same manifest keeps the stamp: the mutation is idempotent across UPDATEs.
    again = apply_until_cached(cluster, trainjob("mutated", namespace, runtime))
    assert again.returncode == 0, again.stderr
    stored = json.loads(cluster.kubectl("get", "trainjob", "mutated", "-n", namespace, "-o", "json").stdout)
    assert stored["spec"]["runtimePatches"][0]["time"] == stamped


def test_python_client_sees_the_mutation(cluster, namespace, admission, runtime) -> None:
    api = client.CustomObjectsApi(cluster.api_client())
    for _ in range(50):
        try:
            created = api.create_namespaced_custom_object(GROUP, VERSION, namespace, "trainjobs", trainjob("py", namespace, runtime))
            break
        except ApiException as e:
            if "must be created before" not in (e.body or ""):
                raise
            time.sleep(0.2)
    assert created["spec"]["runtimePatches"][0]["time"]


def test_denial_is_403_with_the_upstream_message(cluster, namespace, admission) -> None:
    proc = cluster.kubectl("apply", "-f", "-", input=json.dumps(trainjob("denied", namespace, "no-such-runtime", patches=False)), check=False)
    assert proc.returncode != 0
    assert 'admission webhook "validator.trainjob.trainer.kubeflow.org" denied the request: spec.RuntimeRef' in proc.stderr
    assert "specified clusterTrainingRuntime must be created before the TrainJob is created" in proc.stderr
    api = client.CustomObjectsApi(cluster.api_client())
    with pytest.raises(ApiException) as err:
        api.create_namespaced_custom_object(GROUP, VERSION, namespace, "trainjobs", trainjob("denied", namespace, "no-such-runtime"))
    assert err.value.status == 403
    assert json.loads(err.value.body)["reason"] == "Forbidden"
    assert "specified clusterTrainingRuntime must be created before" in json.loads(err.value.body)["message"]


def test_kubectl_prints_webhook_warnings(cluster, namespace, admission) -> None:
    name = f"old-{uuid.uuid4().hex[:8]}"
    proc = cluster.kubectl("apply", "-f", "-", input=json.dumps(cluster_runtime(name, namespace, deprecated=True)))
    assert f'Warning: ClusterTrainingRuntime "{name}" is deprecated' in proc.stderr
    try:
        proc = apply_until_cached(cluster, trainjob("warned", namespace, name))
        assert proc.returncode == 0, proc.stderr
        assert f'Warning: Referenced ClusterTrainingRuntime "{name}" is deprecated' in proc.stderr
    finally:
        cluster.kubectl("delete", "clustertrainingruntime", name, "--ignore-not-found", check=False)


def test_dry_run_mutates_and_denies_the_same_without_storing(cluster, namespace, admission, runtime) -> None:
    proc = apply_until_cached(cluster, trainjob("dry", namespace, runtime), dry_run=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["spec"]["runtimePatches"][0]["time"]
    assert cluster.kubectl("get", "trainjob", "dry", "-n", namespace, check=False).returncode != 0  # nothing stored
    denied = cluster.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(trainjob("dry2", namespace, "no-such-runtime")), check=False)
    assert "denied the request: spec.RuntimeRef" in denied.stderr


@pytest.mark.parametrize("failure_policy", ["Fail", "Ignore"])
def test_stopped_webhook_follows_the_failure_policy(cluster, namespace, tmp_path: Path, failure_policy: str) -> None:
    server = start_webhook(cluster, tmp_path)
    registered = register(cluster, server, namespace, failure_policy=failure_policy)
    try:
        server.stop()
        proc = cluster.kubectl("create", "-f", "-", input=json.dumps(trainjob("after-stop", namespace, "whatever", patches=False)), check=False)
        if failure_policy == "Fail":
            assert proc.returncode != 0 and "failed calling webhook" in proc.stderr
        else:
            assert proc.returncode == 0, proc.stderr  # admitted without the webhook
    finally:
        server.stop()
        unregister(cluster, registered)


def _served_serial(port: int, ca_bundle_pem: bytes) -> int:
    async def go() -> int:
        ctx = ssl.create_default_context(cadata=ca_bundle_pem.decode())
        _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        writer.close()
        return x509.load_der_x509_certificate(der).serial_number

    return asyncio.run(go())


def test_certificate_rotation_under_a_request_stream_loses_nothing(cluster, namespace, tmp_path: Path) -> None:
    """Secret mode with a 20 s leaf renewed 14 s before expiry: the leaf turns over every few seconds while the
    apiserver keeps calling; every request must be answered by the webhook (never 'failed calling webhook')."""
    suffix = namespace[-40:]
    mutating, validating = f"tg-{suffix}-mutating", f"tg-{suffix}-validating"
    server = None
    registered = None
    try:
        server = start_webhook(cluster, tmp_path, extra=[
            "--cert-secret", "webhook-cert", "--namespace", namespace, "--cert-ip", "127.0.0.1",
            "--cert-lifetime", "20s", "--cert-renew-before", "14s", "--cert-refresh-interval", "1s",
            "--mutating-configuration", mutating, "--validating-configuration", validating,
        ])
        # Registered without a CA: the rotator injects its own bundle into these two objects.
        registered = register(cluster, server, namespace, ca_bundle=False, wait=False)
        secret = json.loads(cluster.kubectl("get", "secret", "webhook-cert", "-n", namespace, "-o", "json").stdout)
        ca_pem = base64.b64decode(secret["data"]["ca.crt"])
        wait_until_called(cluster, registered)
        api = client.CustomObjectsApi(cluster.api_client())
        serials = {_served_serial(server.port, ca_pem)}
        reloads_at_start = server.metric("trainguard_certificate_reloads_total")
        answered = failed = 0
        deadline = time.monotonic() + 120  # safety net only; the loop ends on rotations observed
        while len(serials) < 4 and time.monotonic() < deadline:
            try:
                api.create_namespaced_custom_object(GROUP, VERSION, namespace, "trainjobs", trainjob(f"r-{answered}", namespace, "missing"), dry_run="All")
            except ApiException as e:
                # The webhook answered (its denial) -- that is the success we want; anything else is a loss.
                if e.status == 403 and "denied the request" in (e.body or ""):
                    answered += 1
                else:
                    failed += 1
            serials.add(_served_serial(server.port, ca_pem))
        assert failed == 0, server.log_tail()
        assert len(serials) >= 4, "the serving certificate did not rotate"
        assert server.metric("trainguard_certificate_reloads_total") - reloads_at_start >= 3
        assert answered > 0
    finally:
        if server is not None:
            server.stop()
        if registered is not None:
            unregister(cluster, registered)


def _served_leaf(port: int) -> x509.Certificate:
    """The leaf the webhook serves now (not verified here: the apiserver verifies)."""
    async def go() -> x509.Certificate:
        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        writer.close()
        return x509.load_der_x509_certificate(der)

    return asyncio.run(go())


def _issued_by(leaf: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        leaf.verify_directly_issued_by(ca)
        return True
    except (ValueError, TypeError, InvalidSignature):
        return False


def _secret_cas(cluster, namespace: str) -> list[x509.Certificate]:
    secret = json.loads(cluster.kubectl("get", "secret", "webhook-cert", "-n", namespace, "-o", "json").stdout)
    return x509.load_pem_x509_certificates(base64.b64decode(secret["data"]["ca.crt"]))


def test_ca_rollover_under_a_request_stream_loses_nothing(cluster, namespace, tmp_path: Path) -> None:
    """Secret mode with a 30 s CA renewed 12 s before expiry: a new CA enters the Secret and the injected caBundle
    beside the old one, the leaf moves to it once it has propagated (3 s), and the old CA leaves the bundle when it
    expires; the real apiserver verifies every new connection, and every request must be answered by the webhook."""
    suffix = namespace[-40:]
    mutating, validating = f"tg-{suffix}-mutating", f"tg-{suffix}-validating"
    server = None
    registered = None
    try:
        server = start_webhook(cluster, tmp_path, extra=[
            "--cert-secret", "webhook-cert", "--namespace", namespace, "--cert-ip", "127.0.0.1",
            "--ca-lifetime", "30s", "--cert-lifetime", "20s", "--cert-renew-before", "12s",
            "--ca-propagation", "3s", "--cert-refresh-interval", "1s",
            # idle connections close fast, so the paced requests below each make a new TLS handshake that the
            # apiserver verifies against the caBundle of the moment (a kept-alive connection would never re-verify)
            "--idle-timeout", "0.8",
            "--mutating-configuration", mutating, "--validating-configuration", validating,
        ])
        registered = register(cluster, server, namespace, ca_bundle=False, wait=False)
        first_ca = _secret_cas(cluster, namespace)[0]
        wait_until_called(cluster, registered)
        api = client.CustomObjectsApi(cluster.api_client())
        answered = failed = 0
        moved = retired = False  # the leaf is signed by a newer CA; the first CA has left the bundle
        deadline = time.monotonic() + 150  # safety net only; the loop ends on the rollover observed
        while not (moved and retired) and time.monotonic() < deadline:
            try:
                api.create_namespaced_custom_object(GROUP, VERSION, namespace, "trainjobs",
                                                    trainjob(f"ca-{answered}", namespace, "missing"), dry_run="All")
            except ApiException as e:
                if e.status == 403 and "denied the request" in (e.body or ""):
                    answered += 1
                else:
                    failed += 1
            cas = _secret_cas(cluster, namespace)
            leaf = _served_leaf(server.port)
            moved = moved or (cas[0].serial_number != first_ca.serial_number and _issued_by(leaf, cas[0])
                              and not _issued_by(leaf, first_ca))
            retired = retired or all(c.serial_number != first_ca.serial_number for c in cas)
            time.sleep(1.3)  # past the idle timeout: the next request comes on a new connection
        assert failed == 0, server.log_tail()
        assert moved, "the serving certificate never moved to a new CA"
        assert retired, "the expired CA never left the bundle"
        configured = json.loads(cluster.kubectl("get", "validatingwebhookconfiguration", validating, "-o", "json").stdout)
        injected = x509.load_pem_x509_certificates(base64.b64decode(configured["webhooks"][0]["clientConfig"]["caBundle"]))
        assert {c.serial_number for c in injected} == {c.serial_number for c in _secret_cas(cluster, namespace)}
        assert answered > 0
    finally:
        if server is not None:
            server.stop()
        if registered is not None:
            unregister(cluster, registered)
