"""Certificate rotation backed by one Secret, and the CA bundle injected into the webhook configurations.

Every replica runs the same loop (``refresh_interval``, default 1 minute):

1. read the Secret; ``certs.plan_rotation`` decides whether it must change (first start, renewal window, new CA);
2. if so, write it with optimistic concurrency: create (``AlreadyExists`` -> someone else did) or replace with the
   resourceVersion we read (``Conflict`` -> someone else rotated). Whoever loses re-reads and adopts the winner's
   material, so replicas never fight;
3. inject the Secret's CA bundle into the Mutating/ValidatingWebhookConfigurations' ``caBundle`` (only if it differs,
   and never replacing a bundle that carries a NEWER CA than ours: that means we read a stale Secret);
4. load the serving pair into the live SSL context (a no-op when unchanged).

Steps 3 before 4: a new leaf is only ever served after the CA that signed it is in the injected bundle.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable

from cryptography import x509

from trainguard.webhook.admission.certs import CertMaterial, Lifetimes, plan_rotation, split_pem_bundle
from trainguard.webhook.admission.tls import ServingCertificate
from trainguard.webhook.kube.client import KubeClient
from trainguard.webhook.kube.errors import ApiError, Conflict, NotFound
from trainguard.webhook.kube.informer import Backoff
from trainguard.webhook.kube.resources import MUTATING_WEBHOOK_CONFIGURATIONS, SECRETS, VALIDATING_WEBHOOK_CONFIGURATIONS, Resource

log = logging.getLogger("trainguard.admission.rotator")

CA_CERT_KEY, CA_KEY_KEY, TLS_CERT_KEY, TLS_KEY_KEY = "ca.crt", "ca.key", "tls.crt", "tls.key"
MANAGED_BY = {"app.kubernetes.io/managed-by": "trainguard", "app.kubernetes.io/component": "webhook-cert"}


def material_from_secret(secret: dict[str, Any] | None) -> CertMaterial | None:
    data = (secret or {}).get("data") or {}
    try:
        return CertMaterial(
            ca_bundle=split_pem_bundle(base64.b64decode(data[CA_CERT_KEY])),
            ca_key=base64.b64decode(data[CA_KEY_KEY]),
            tls_crt=base64.b64decode(data[TLS_CERT_KEY]),
            tls_key=base64.b64decode(data[TLS_KEY_KEY]),
        )
    except (KeyError, ValueError, TypeError):
        return None


def secret_data(material: CertMaterial) -> dict[str, str]:
    enc = lambda b: base64.b64encode(b).decode()  # noqa: E731
    return {
        CA_CERT_KEY: enc(material.ca_bundle_pem),
        CA_KEY_KEY: enc(material.ca_key),
        TLS_CERT_KEY: enc(material.tls_crt),
        TLS_KEY_KEY: enc(material.tls_key),
    }


@dataclass(frozen=True)
class RotatorSettings:
    namespace: str
    secret_name: str
    dns_names: list[str]
    ip_addresses: list[str]
    mutating_configuration: str | None
    validating_configuration: str | None
    lifetimes: Lifetimes = Lifetimes()
    refresh_interval: float = 60.0


class SecretRotator:
    def __init__(
        self,
        kube: KubeClient,
        serving: ServingCertificate,
        settings: RotatorSettings,
        *,
        clock: Callable[[], datetime],
        sleep: Callable[[float], Any] = asyncio.sleep,
    ) -> None:
        self.kube = kube
        self.serving = serving
        self.settings = settings
        self.clock = clock
        self._sleep = sleep
        self.rotations = 0  # Secret writes this replica won
        self.conflicts = 0  # writes this replica lost to another

    async def reconcile_once(self) -> CertMaterial:
        s = self.settings
        material: CertMaterial | None = None
        for _ in range(10):
            try:
                secret: dict[str, Any] | None = await self.kube.get(SECRETS, s.secret_name, s.namespace)
            except NotFound:
                secret = None
            current = material_from_secret(secret)
            planned = plan_rotation(
                current, now=self.clock(), dns_names=s.dns_names, ip_addresses=s.ip_addresses, lifetimes=s.lifetimes
            )
            if planned is None:
                material = current
                break
            try:
                await self._write(secret, planned)
            except Conflict as e:  # includes AlreadyExists
                self.conflicts += 1
                log.info("certificate Secret changed under us (%s); re-reading", e.reason)
                continue
            self.rotations += 1
            log.info("certificate Secret %s/%s written", s.namespace, s.secret_name, extra={"cas": len(planned.ca_bundle)})
            material = planned
            break
        if material is None:
            raise RuntimeError("certificate Secret kept changing; giving up this round")
        for resource, name in (
            (MUTATING_WEBHOOK_CONFIGURATIONS, s.mutating_configuration),
            (VALIDATING_WEBHOOK_CONFIGURATIONS, s.validating_configuration),
        ):
            if name:
                await self.inject_ca_bundle(resource, name, material.ca_bundle_pem)
        self.serving.load_pem(material.tls_crt, material.tls_key)
        return material

    async def _write(self, secret: dict[str, Any] | None, material: CertMaterial) -> None:
        s = self.settings
        if secret is None:
            await self.kube.create(
                SECRETS,
                {
                    "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                    "metadata": {"name": s.secret_name, "namespace": s.namespace, "labels": dict(MANAGED_BY)},
                    "data": secret_data(material),
                },
            )
            return
        # PUT with the resourceVersion we read: the apiserver refuses it if anyone wrote in between.
        updated = {**secret, "data": {**(secret.get("data") or {}), **secret_data(material)}}
        await self.kube.replace(SECRETS, updated)

    async def inject_ca_bundle(self, resource: Resource, name: str, bundle_pem: bytes) -> bool:
        """Set ``clientConfig.caBundle`` on every webhook of one configuration; True when it wrote."""
        wanted = base64.b64encode(bundle_pem).decode()
        for _ in range(5):
            try:
                config = await self.kube.get(resource, name)
            except NotFound:
                log.info("%s %s not found; will inject the CA bundle once it exists", resource.kind, name)
                return False
            webhooks = config.get("webhooks") or []
            existing = {(w.get("clientConfig") or {}).get("caBundle", "") for w in webhooks}
            if existing == {wanted}:
                return False
            if any(_carries_newer_ca(e, bundle_pem) for e in existing):
                log.info("%s %s carries a newer CA than our Secret read; leaving it", resource.kind, name)
                return False
            for w in webhooks:
                w.setdefault("clientConfig", {})["caBundle"] = wanted
            try:
                await self.kube.replace(resource, config)
                log.info("CA bundle injected into %s %s", resource.kind, name)
                return True
            except Conflict:
                continue
        return False

    async def run(self) -> None:
        """Keep reconciling after the first (synchronous, at startup) ``reconcile_once``."""
        backoff = Backoff(initial=1.0, maximum=60.0)
        delay = self.settings.refresh_interval
        while True:
            await self._sleep(delay)
            try:
                await self.reconcile_once()
                backoff.reset()
                delay = self.settings.refresh_interval
            except asyncio.CancelledError:
                raise
            except (ApiError, OSError, RuntimeError, ValueError, asyncio.TimeoutError) as e:
                delay = min(backoff.next_delay(), self.settings.refresh_interval)
                log.warning("certificate reconcile failed: %s; retrying in %.1fs", e, delay)
            except Exception as e:  # aiohttp client errors and anything unforeseen: keep serving the loaded pair
                delay = min(backoff.next_delay(), self.settings.refresh_interval)
                log.warning("certificate reconcile failed: %s: %s; retrying in %.1fs", type(e).__name__, e, delay)


def _newest_not_before(bundle_pem: bytes) -> datetime | None:
    dates = []
    for pem in split_pem_bundle(bundle_pem):
        try:
            dates.append(x509.load_pem_x509_certificate(pem).not_valid_before_utc)
        except ValueError:
            continue
    return max(dates) if dates else None


def _carries_newer_ca(existing_b64: str, ours_pem: bytes) -> bool:
    if not existing_b64:
        return False
    try:
        theirs = _newest_not_before(base64.b64decode(existing_b64))
    except ValueError:
        return False
    ours = _newest_not_before(ours_pem)
    return theirs is not None and ours is not None and theirs > ours
