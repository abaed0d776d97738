"""The Secret-backed rotator against an in-memory apiserver: first start, adoption, races, CA injection."""

from __future__ import annotations

import base64
import copy
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from cryptography import x509

from trainguard.webhook.admission.certs import Lifetimes
from trainguard.webhook.admission.rotator import RotatorSettings, SecretRotator, material_from_secret
from trainguard.webhook.admission.tls import ServingCertificate
from trainguard.webhook.kube import resources as r
from trainguard.webhook.kube.errors import AlreadyExists, Conflict, NotFound

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


class MemoryApi:
    """Just enough of the apiserver: get/create/replace with resourceVersion checks."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.rv = 0
        self.writes = 0
        self.before_write: list[Any] = []  # hooks run before a write lands, to simulate a racing replica

    def _key(self, res: r.Resource, name: str, ns: str | None) -> tuple[str, str, str]:
        return (res.plural, ns or "", name)

    async def get(self, res: r.Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        key = self._key(res, name, namespace)
        if key not in self.objects:
            raise NotFound(404, "NotFound", f'{res.plural} "{name}" not found')
        return copy.deepcopy(self.objects[key])

    async def _hooks(self) -> None:
        while self.before_write:
            await self.before_write.pop(0)()

    async def create(self, res: r.Resource, obj: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
        await self._hooks()
        meta = obj["metadata"]
        key = self._key(res, meta["name"], meta.get("namespace"))
        if key in self.objects:
            raise AlreadyExists(409, "AlreadyExists", "exists")
        return self._store(key, obj)

    async def replace(self, res: r.Resource, obj: dict[str, Any]) -> dict[str, Any]:
        await self._hooks()
        meta = obj["metadata"]
        key = self._key(res, meta["name"], meta.get("namespace"))
        if self.objects[key]["metadata"]["resourceVersion"] != meta.get("resourceVersion"):
            raise Conflict(409, "Conflict", "the object has been modified")
        return self._store(key, obj)

    def _store(self, key: tuple[str, str, str], obj: dict[str, Any]) -> dict[str, Any]:
        self.rv += 1
        self.writes += 1
        stored = copy.deepcopy(obj)
        stored["metadata"]["resourceVersion"] = str(self.rv)
        self.objects[key] = stored
        return copy.deepcopy(stored)


LIFE = Lifetimes(ca=timedelta(days=100), leaf=timedelta(days=30), renew_before=timedelta(days=10), ca_propagation=timedelta(hours=1))


def settings(**kw: Any) -> RotatorSettings:
    base = dict(
        namespace="trainguard-system", secret_name="cert", dns_names=["svc.trainguard-system.svc"], ip_addresses=["127.0.0.1"],
        mutating_configuration="tg-mutating", validating_configuration="tg-validating", lifetimes=LIFE,
    )
    base.update(kw)
    return RotatorSettings(**base)


def rotator(api: MemoryApi, clock: list[datetime], **kw: Any) -> SecretRotator:
    return SecretRotator(api, ServingCertificate(), settings(**kw), clock=lambda: clock[0])  # type: ignore[arg-type]


def webhook_config(kind: str, name: str, hooks: int) -> dict[str, Any]:
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind, "metadata": {"name": name},
            "webhooks": [{"name": f"h{i}.example.io", "clientConfig": {"url": "https://127.0.0.1/x"}} for i in range(hooks)]}


@pytest.fixture
def api() -> MemoryApi:
    a = MemoryApi()
    a.objects[("mutatingwebhookconfigurations", "", "tg-mutating")] = {**webhook_config("MutatingWebhookConfiguration", "tg-mutating", 1), "metadata": {"name": "tg-mutating", "resourceVersion": "0"}}
    a.objects[("validatingwebhookconfigurations", "", "tg-validating")] = {**webhook_config("ValidatingWebhookConfiguration", "tg-validating", 3), "metadata": {"name": "tg-validating", "resourceVersion": "0"}}
    return a


def secret(api: MemoryApi) -> dict[str, Any]:
    return api.objects[("secrets", "trainguard-system", "cert")]


def bundles(api: MemoryApi) -> set[str]:
    return {
        w["clientConfig"].get("caBundle", "")
        for plural in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations")
        for w in api.objects[(plural, "", f"tg-{plural[:-len('webhookconfigurations')]}")]["webhooks"]
    }


async def test_first_start_creates_the_secret_injects_the_ca_and_serves(api: MemoryApi) -> None:
    clock = [T0]
    rot = rotator(api, clock)
    m = await rot.reconcile_once()
    assert secret(api)["type"] == "kubernetes.io/tls"
    assert material_from_secret(secret(api)) == m
    assert bundles(api) == {base64.b64encode(m.ca_bundle_pem).decode()}
    assert rot.serving.loaded
    writes = api.writes
    assert (await rot.reconcile_once()) == m and api.writes == writes  # steady state writes nothing


async def test_a_second_replica_adopts_the_existing_secret(api: MemoryApi) -> None:
    clock = [T0]
    m = await rotator(api, clock).reconcile_once()
    writes = api.writes
    other = rotator(api, clock)
    assert (await other.reconcile_once()) == m
    assert api.writes == writes and other.serving.fingerprint


async def test_racing_creators_agree_on_one_secret(api: MemoryApi) -> None:
    clock = [T0]
    winner, loser = rotator(api, clock), rotator(api, clock)

    async def winner_goes_first() -> None:
        await winner.reconcile_once()

    api.before_write.append(winner_goes_first)  # runs just before the loser's create lands
    m = await loser.reconcile_once()
    assert loser.conflicts == 1 and winner.rotations == 1 and loser.rotations == 0
    assert m == material_from_secret(secret(api))
    assert loser.serving.fingerprint == winner.serving.fingerprint


async def test_racing_renewals_do_not_fight(api: MemoryApi) -> None:
    clock = [T0]
    a, b = rotator(api, clock), rotator(api, clock)
    await a.reconcile_once()
    await b.reconcile_once()
    clock[0] = T0 + timedelta(days=25)  # both see the leaf in its renewal window

    async def a_renews_first() -> None:
        await a.reconcile_once()

    api.before_write.append(a_renews_first)
    m = await b.reconcile_once()
    assert b.conflicts == 1
    assert m == material_from_secret(secret(api))
    assert a.serving.fingerprint == b.serving.fingerprint
    leaf = x509.load_pem_x509_certificate(m.tls_crt)
    assert leaf.not_valid_after_utc > T0 + timedelta(days=50)


async def test_stale_replica_does_not_replace_a_newer_ca_bundle(api: MemoryApi) -> None:
    clock = [T0]
    rot = rotator(api, clock)
    old = await rot.reconcile_once()
    clock[0] = T0 + timedelta(days=91)  # CA renewal
    new = await rot.reconcile_once()
    assert len(new.ca_bundle) == 2
    wrote = await rot.inject_ca_bundle(r.VALIDATING_WEBHOOK_CONFIGURATIONS, "tg-validating", old.ca_bundle_pem)
    assert wrote is False
    assert bundles(api) == {base64.b64encode(new.ca_bundle_pem).decode()}


async def test_missing_webhook_configuration_is_not_an_error(api: MemoryApi) -> None:
    clock = [T0]
    rot = rotator(api, clock, mutating_configuration="absent")
    await rot.reconcile_once()
    assert rot.serving.loaded
