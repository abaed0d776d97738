"""Kubernetes quantities: exact parsing, Go's rounding, canonical formatting, sums and scaling."""

from __future__ import annotations

from fractions import Fraction

import pytest

from trainguard.webhook.api.quantity import (
    Quantity,
    QuantityError,
    format_resource_list,
    is_quantity,
    parse_resource_list,
    scale_resources,
    sum_resources,
)

# (wire value, exact amount, value() rounded up, milli_value(), canonical string)
CASES = [
    ("2500m", Fraction(5, 2), 3, 2500, "2500m"),
    ("1Gi", Fraction(2**30), 2**30, 2**30 * 1000, "1Gi"),
    ("8", Fraction(8), 8, 8000, "8"),
    (8, Fraction(8), 8, 8000, "8"),
    ("3.7", Fraction(37, 10), 4, 3700, "3700m"),
    ("1.5", Fraction(3, 2), 2, 1500, "1500m"),
    ("0.1", Fraction(1, 10), 1, 100, "100m"),
    ("100m", Fraction(1, 10), 1, 100, "100m"),
    ("12000", Fraction(12000), 12000, 12_000_000, "12k"),
    ("1k", Fraction(1000), 1000, 1_000_000, "1k"),
    ("256Gi", Fraction(256 * 2**30), 256 * 2**30, 256 * 2**30 * 1000, "256Gi"),
    ("1536Mi", Fraction(1536 * 2**20), 1536 * 2**20, 1536 * 2**20 * 1000, "1536Mi"),
    ("0.5Ki", Fraction(512), 512, 512_000, "512"),
    ("1e3", Fraction(1000), 1000, 1_000_000, "1e3"),
    ("1E", Fraction(10**18), 10**18, 10**21, "1E"),
    ("1n", Fraction(1, 10**9), 1, 1, "1n"),
    ("5u", Fraction(5, 10**6), 1, 1, "5u"),
    (".5", Fraction(1, 2), 1, 500, "500m"),
    ("5.", Fraction(5), 5, 5000, "5"),
    ("+2", Fraction(2), 2, 2000, "2"),
    ("-1500m", Fraction(-3, 2), -2, -1500, "-1500m"),
    ("0", Fraction(0), 0, 0, "0"),
    ("1M", Fraction(10**6), 10**6, 10**9, "1M"),
    ("2Ti", Fraction(2 * 2**40), 2 * 2**40, 2 * 2**40 * 1000, "2Ti"),
]


@pytest.mark.parametrize("wire, amount, value, milli, text", CASES, ids=[str(c[0]) for c in CASES])
def test_parse_round_and_format(wire, amount, value, milli, text):
    q = Quantity.parse(wire)
    assert q.amount == amount
    assert q.value() == value
    assert q.milli_value() == milli
    assert q.to_string() == text


@pytest.mark.parametrize("bad", ["", " 1", "1 ", "1.2.3", "Gi", "1gi", "1KB", "1.5e", "e3", "--1", "1Mi2", "abc",
                                 "1ki", True])
def test_rejects_malformed(bad):
    with pytest.raises(QuantityError, match="quantities must match the regular expression"):
        Quantity.parse(bad)
    assert not is_quantity(bad)


def test_equality_is_by_amount():
    assert Quantity.parse("1Gi") == Quantity.parse("1024Mi") == Quantity.parse("1073741824")
    assert Quantity.parse("1") != Quantity.parse("1001m")
    assert Quantity.parse("999m") < Quantity.parse("1")


def test_sum_and_scale_are_exact():
    # A coscheduling PodGroup's minResources: 1 initializer (cpu 1) + 3 nodes (cpu 4, memory 8Gi).
    initializer = parse_resource_list({"cpu": "1"})
    node = parse_resource_list({"cpu": "4", "memory": "8Gi"})
    total = sum_resources([initializer, scale_resources(node, 3)])
    assert format_resource_list(total) == {"cpu": "13", "memory": "24Gi"}
    # 0.1 + 0.2 CPUs is exactly 300m (no float drift).
    assert sum_resources([parse_resource_list({"cpu": "0.1"}), parse_resource_list({"cpu": "0.2"})])["cpu"] \
        == Quantity.parse("300m")


def test_zero_takes_other_format():
    assert (Quantity.parse("0") + Quantity.parse("2Gi")).to_string() == "2Gi"
    assert (Quantity.parse("2Gi") + Quantity.parse("512Mi")).to_string() == "2560Mi"


def test_parse_resource_list_accepts_yaml_ints_and_none():
    assert parse_resource_list(None) == {}
    assert parse_resource_list({"nvidia.com/gpu": 8})["nvidia.com/gpu"].value() == 8
