"""Certificate generation and the pure rotation decision (``plan_rotation``), with time passed in."""

from __future__ import annotations

import ipaddress
from datetime import datetime, timedelta, timezone

import pytest
from cryptography import x509

from trainguard.webhook.admission.certs import (
    BACKDATE,
    CertMaterial,
    Lifetimes,
    new_ca,
    new_serving_cert,
    plan_rotation,
    service_dns_names,
    split_pem_bundle,
)

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
NAMES = service_dns_names("trainguard-webhook", "trainguard-system")
LIFE = Lifetimes(ca=timedelta(days=100), leaf=timedelta(days=30), renew_before=timedelta(days=10), ca_propagation=timedelta(hours=1))


def fresh(now: datetime = T0) -> CertMaterial:
    m = plan_rotation(None, now=now, dns_names=NAMES, ip_addresses=["127.0.0.1"], lifetimes=LIFE)
    assert m is not None
    return m


def leaf_of(m: CertMaterial) -> x509.Certificate:
    return x509.load_pem_x509_certificate(m.tls_crt)


def issuer_index(m: CertMaterial) -> int:
    leaf = leaf_of(m)
    for i, pem in enumerate(m.ca_bundle):
        try:
            leaf.verify_directly_issued_by(x509.load_pem_x509_certificate(pem))
            return i
        except Exception:
            continue
    raise AssertionError("leaf not signed by any CA in the bundle")


def plan(m: CertMaterial | None, now: datetime, **kw) -> CertMaterial | None:
    return plan_rotation(m, now=now, dns_names=kw.pop("names", NAMES), ip_addresses=kw.pop("ips", ["127.0.0.1"]), lifetimes=LIFE)


def test_service_dns_names() -> None:
    assert service_dns_names("svc", "ns") == ["svc", "svc.ns", "svc.ns.svc", "svc.ns.svc.cluster.local"]


def test_fresh_material_is_a_valid_chain_for_the_names() -> None:
    m = fresh()
    ca = x509.load_pem_x509_certificate(m.ca_bundle[0])
    leaf = leaf_of(m)
    leaf.verify_directly_issued_by(ca)
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(san.get_values_for_type(x509.DNSName)) == set(NAMES)
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    assert leaf.not_valid_after_utc == T0 + LIFE.leaf
    assert leaf.not_valid_before_utc == T0 - BACKDATE


def test_leaf_never_outlives_its_ca() -> None:
    ca = new_ca(now=T0, lifetime=timedelta(days=5))
    leaf = new_serving_cert(ca, dns_names=["a"], now=T0, lifetime=timedelta(days=30))
    assert leaf.cert.not_valid_after_utc == ca.cert.not_valid_after_utc


def test_serving_cert_needs_a_name() -> None:
    with pytest.raises(ValueError):
        new_serving_cert(new_ca(now=T0, lifetime=timedelta(days=1)), dns_names=[], now=T0, lifetime=timedelta(days=1))


@pytest.mark.parametrize(
    ("days", "expect_change"),
    [(0, False), (19, False), (19.9, False), (20, True), (25, True)],
    ids=["new", "well-before-window", "just-before-window", "window-opens", "inside-window"],
)
def test_leaf_renews_only_inside_its_window(days: float, expect_change: bool) -> None:
    m = fresh()
    out = plan(m, T0 + timedelta(days=days))
    assert (out is not None) == expect_change
    if out is not None:
        assert out.ca_bundle == m.ca_bundle  # the CA is not touched
        assert leaf_of(out).serial_number != leaf_of(m).serial_number


def test_leaf_is_reissued_for_new_names() -> None:
    m = fresh()
    out = plan(m, T0 + timedelta(days=1), names=[*NAMES, "extra.example"])
    assert out is not None and out.ca_bundle == m.ca_bundle


def test_corrupt_secret_material_starts_over() -> None:
    m = fresh()
    broken = CertMaterial((b"not a cert",), m.ca_key, m.tls_crt, m.tls_key)
    out = plan(broken, T0)
    assert out is not None and issuer_index(out) == 0 and out.ca_bundle[0] != m.ca_bundle[0]


def test_mismatched_leaf_key_is_replaced() -> None:
    m = fresh()
    other = fresh()
    out = plan(CertMaterial(m.ca_bundle, m.ca_key, m.tls_crt, other.tls_key), T0)
    assert out is not None and out.ca_bundle == m.ca_bundle


def test_ca_rotation_adds_the_new_ca_first_and_moves_the_leaf_later() -> None:
    m = fresh()
    # Day 91: the CA (100 days) is inside its 10-day window; the leaf has been renewed on schedule meanwhile.
    t = T0 + timedelta(days=91)
    m = CertMaterial(m.ca_bundle, m.ca_key, *_leaf_pems(m, t - timedelta(days=1)))
    step1 = plan(m, t)
    assert step1 is not None
    assert len(step1.ca_bundle) == 2 and step1.ca_bundle[1] == m.ca_bundle[0]  # new CA first, old one kept
    assert step1.tls_crt == m.tls_crt and issuer_index(step1) == 1  # still served by the old CA
    assert plan(step1, t + timedelta(minutes=30)) is None  # the new CA is not settled yet: nothing to do
    step2 = plan(step1, t + LIFE.ca_propagation)
    assert step2 is not None and issuer_index(step2) == 0  # now signed by the new CA
    assert step2.ca_bundle == step1.ca_bundle
    # once the old CA expires it leaves the bundle
    step3 = plan(step2, T0 + timedelta(days=101))
    assert step3 is not None and len(step3.ca_bundle) == 1 and step3.ca_bundle[0] == step1.ca_bundle[0]


def _leaf_pems(m: CertMaterial, at: datetime) -> tuple[bytes, bytes]:
    from trainguard.webhook.admission.certs import KeyPair

    leaf = new_serving_cert(KeyPair(m.ca_bundle[0], m.ca_key), dns_names=NAMES, ip_addresses=["127.0.0.1"], now=at, lifetime=LIFE.leaf)
    return leaf.cert_pem, leaf.key_pem


def test_split_pem_bundle_round_trips() -> None:
    a, b = fresh().ca_bundle[0], fresh().ca_bundle[0]
    assert split_pem_bundle(a + b) == (a, b)
    assert split_pem_bundle(b"") == ()


def test_with_a_single_young_ca_the_leaf_still_renews_on_time() -> None:
    """A fresh install's CA is younger than ca_propagation; that must not hold back the leaf's own renewal."""
    short = Lifetimes(ca=timedelta(days=100), leaf=timedelta(seconds=20), renew_before=timedelta(seconds=14), ca_propagation=timedelta(hours=1))
    m = plan_rotation(None, now=T0, dns_names=NAMES, lifetimes=short)
    assert m is not None
    assert plan_rotation(m, now=T0 + timedelta(seconds=5), dns_names=NAMES, lifetimes=short) is None
    renewed = plan_rotation(m, now=T0 + timedelta(seconds=6), dns_names=NAMES, lifetimes=short)
    assert renewed is not None and renewed.ca_bundle == m.ca_bundle
    assert leaf_of(renewed).not_valid_after_utc == T0 + timedelta(seconds=26)


@pytest.mark.parametrize(
    "leaf, ca, renew",
    [(timedelta(days=30), timedelta(days=3650), timedelta(days=90)),   # leaf born inside its renewal window
     (timedelta(days=30), timedelta(days=60), timedelta(days=60)),     # CA likewise: a new CA at every check
     (timedelta(days=30), timedelta(days=60), timedelta(0))],
)
def test_lifetimes_that_would_renew_at_every_check_are_refused(leaf: timedelta, ca: timedelta, renew: timedelta) -> None:
    with pytest.raises(ValueError):
        Lifetimes(ca=ca, leaf=leaf, renew_before=renew)

