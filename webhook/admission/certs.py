"""Certificates for the webhook: a self-signed CA, a serving certificate, and the rule for when to renew.

Everything here is a pure function of its inputs (time comes in as ``now``), so the rotation decision
(``plan_rotation``) is unit-tested without a cluster or a clock; ``rotator`` does the I/O around it.

Defaults follow open-policy-agent/cert-controller (what Kubeflow Trainer, Kueue and Gatekeeper run): CA 10 years,
serving certificate 1 year, renewal 90 days before expiry. Keys are ECDSA P-256 (fast to make, accepted by the
apiserver's Go TLS stack).

CA rotation without failed requests: a new CA is first ADDED to the bundle the apiserver trusts (``ca.crt`` holds
every CA still valid, newest first); the serving certificate keeps being signed by the old CA until the new CA is
``ca_propagation`` old, long enough for every replica to have injected the new bundle into the webhook
configurations and for the apiserver to have picked it up. Only then is the leaf re-issued by the new CA.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from datetime import datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# Certificates are valid from a little before "now", so a replica or apiserver whose clock lags still accepts them.
BACKDATE = timedelta(minutes=5)


@dataclass(frozen=True)
class Lifetimes:
    ca: timedelta = timedelta(days=3650)
    leaf: timedelta = timedelta(days=365)
    renew_before: timedelta = timedelta(days=90)
    # How long a new CA sits in the bundle before a leaf is signed by it (see module docstring).
    ca_propagation: timedelta = timedelta(minutes=10)

    def __post_init__(self) -> None:
        # A certificate born inside its own renewal window is renewed at every check: with the leaf that is a
        # Secret write per refresh interval, with the CA a new CA per interval and a trust bundle that grows
        # until the first ones expire.
        if self.renew_before <= timedelta(0) or self.ca_propagation < timedelta(0):
            raise ValueError("renew-before must be positive and ca-propagation not negative")
        for what, lifetime in (("certificate", self.leaf), ("CA", self.ca)):
            if lifetime <= self.renew_before:
                raise ValueError(
                    f"{what} lifetime {lifetime} must be longer than renew-before {self.renew_before}, "
                    "or it would be renewed at every check"
                )


@dataclass(frozen=True)
class KeyPair:
    cert_pem: bytes
    key_pem: bytes

    @property
    def cert(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert_pem)

    @property
    def key(self) -> ec.EllipticCurvePrivateKey:
        key = serialization.load_pem_private_key(self.key_pem, password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError("expected an EC private key")
        return key


@dataclass(frozen=True)
class CertMaterial:
    """What the Secret holds: the trust bundle (newest CA first), the newest CA's key, and the serving pair."""

    ca_bundle: tuple[bytes, ...]  # PEM certificates
    ca_key: bytes
    tls_crt: bytes
    tls_key: bytes

    @property
    def ca_bundle_pem(self) -> bytes:
        return b"".join(self.ca_bundle)

    @property
    def newest_ca(self) -> KeyPair:
        return KeyPair(self.ca_bundle[0], self.ca_key)


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def new_ca(*, now: datetime, lifetime: timedelta, common_name: str = "trainguard-ca", organization: str = "trainguard") -> KeyPair:
    key = _new_key()
    name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization), x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + lifetime)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True  # keyCertSign, cRLSign
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def new_serving_cert(
    ca: KeyPair, *, dns_names: list[str], ip_addresses: list[str] = (), now: datetime, lifetime: timedelta  # type: ignore[assignment]
) -> KeyPair:
    """A server certificate for these names, never outliving its CA (a chain with an expired CA fails anyway)."""
    if not dns_names and not ip_addresses:
        raise ValueError("a serving certificate needs at least one DNS name or IP address")
    ca_cert = ca.cert
    key = _new_key()
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns_names[0] if dns_names else str(ip_addresses[0]))])
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(min(now + lifetime, ca_cert.not_valid_after_utc))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(True, False, True, False, False, False, False, False, False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False)
        .sign(ca.key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def service_dns_names(service: str, namespace: str) -> list[str]:
    """The names the apiserver may use to reach a Service-backed webhook (it dials ``<svc>.<ns>.svc``)."""
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local"]


def split_pem_bundle(bundle: bytes) -> tuple[bytes, ...]:
    """Separate a concatenated PEM bundle into single certificates (each ending in a newline)."""
    marker = b"-----END CERTIFICATE-----"
    return tuple(part.strip() + b"\n" + marker + b"\n" for part in bundle.split(marker) if part.strip())


def _in_renewal_window(cert: x509.Certificate, now: datetime, renew_before: timedelta) -> bool:
    return now >= cert.not_valid_after_utc - renew_before


def _signed_by(leaf: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        leaf.verify_directly_issued_by(ca)
        return True
    except Exception:  # InvalidSignature, ValueError (wrong issuer name) or TypeError (key type)
        return False


def _covers(leaf: x509.Certificate, dns_names: list[str], ip_addresses: list[str]) -> bool:
    try:
        san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    have_dns = set(san.get_values_for_type(x509.DNSName))
    have_ip = {str(ip) for ip in san.get_values_for_type(x509.IPAddress)}
    return set(dns_names) <= have_dns and {str(ipaddress.ip_address(i)) for i in ip_addresses} <= have_ip


def _pair_matches(pair: KeyPair) -> bool:
    try:
        return pair.cert.public_key() == pair.key.public_key()
    except ValueError:
        return False


def plan_rotation(
    current: CertMaterial | None,
    *,
    now: datetime,
    dns_names: list[str],
    ip_addresses: list[str] = (),  # type: ignore[assignment]
    lifetimes: Lifetimes = Lifetimes(),
) -> CertMaterial | None:
    """The material the Secret should hold from now on, or None when what it holds is still good.

    Deterministic given ``current`` and ``now`` apart from fresh keys, so replicas that read the same Secret
    decide the same thing; the Secret's resourceVersion then picks one writer (see ``rotator``).
    """
    cas: list[x509.Certificate] = []
    ca_ok = False
    if current is not None:
        try:
            cas = [x509.load_pem_x509_certificate(p) for p in current.ca_bundle]
            ca_ok = bool(cas) and _pair_matches(current.newest_ca)
        except ValueError:
            ca_ok = False
    if not ca_ok or current is None:
        ca = new_ca(now=now, lifetime=lifetimes.ca)
        leaf = new_serving_cert(ca, dns_names=dns_names, ip_addresses=ip_addresses, now=now, lifetime=lifetimes.leaf)
        return CertMaterial((ca.cert_pem,), ca.key_pem, leaf.cert_pem, leaf.key_pem)

    changed = False
    bundle = list(zip(current.ca_bundle, cas))
    # Drop expired CAs: they can vouch for nothing.
    live = [(pem, c) for pem, c in bundle if c.not_valid_after_utc > now]
    changed |= len(live) != len(bundle)
    newest = current.newest_ca
    ca_key = current.ca_key
    if not live or live[0][0] != current.ca_bundle[0] or _in_renewal_window(cas[0], now, lifetimes.renew_before):
        fresh = new_ca(now=now, lifetime=lifetimes.ca)
        live.insert(0, (fresh.cert_pem, fresh.cert))
        newest, ca_key, changed = fresh, fresh.key_pem, True

    newest_cert = live[0][1]
    ca_settled = now >= newest_cert.not_valid_before_utc + BACKDATE + lifetimes.ca_propagation
    leaf_pair = KeyPair(current.tls_crt, current.tls_key)
    try:
        leaf = leaf_pair.cert
        issuer = next((c for _, c in live if _signed_by(leaf, c)), None)
        # must: the pair cannot be served as it is; want: it should move on (renewal window, or a newer CA exists).
        must = (
            not _pair_matches(leaf_pair)
            or issuer is None
            or not _covers(leaf, dns_names, ip_addresses)
            or not leaf.not_valid_before_utc <= now < leaf.not_valid_after_utc
        )
        want = _in_renewal_window(leaf, now, lifetimes.renew_before) or issuer != newest_cert
    except ValueError:
        must = want = True
    # While a new CA sits next to an older one and is not yet trusted everywhere, a still-valid leaf is kept rather
    # than moved to it (with a single CA there is nothing to wait for).
    ca_pending = len(live) > 1 and not ca_settled
    reissue = must or (want and not ca_pending)
    if not reissue and not changed:
        return None
    if reissue:
        signer = _previous_signer(current, live, newest) if ca_pending else newest
        leaf_pair = new_serving_cert(signer, dns_names=dns_names, ip_addresses=ip_addresses, now=now, lifetime=lifetimes.leaf)
    return CertMaterial(tuple(pem for pem, _ in live), ca_key, leaf_pair.cert_pem, leaf_pair.key_pem)


def _previous_signer(current: CertMaterial, live: list[tuple[bytes, x509.Certificate]], newest: KeyPair) -> KeyPair:
    """The CA whose key we still hold and whose certificate is trusted already: the Secret's previous newest CA."""
    old = current.newest_ca
    if any(pem == old.cert_pem for pem, _ in live) and old.cert_pem != newest.cert_pem:
        return old
    return newest
