"""Kubernetes resource quantities, parsed exactly (``k8s.io/apimachinery/pkg/api/resource`` semantics).

Why exact arithmetic: PodGroup ``minResources``, GPU counts and ``PET_NPROC_PER_NODE`` are computed from
requests such as ``3.7`` CPUs or ``2500m``; a float would make ``0.1 + 0.2`` CPUs differ from ``300m``. Amounts
are ``fractions.Fraction`` so sums and scales are exact, and rounding happens only where Kubernetes rounds:
``value()`` rounds *up, away from zero* like Go's ``Quantity.Value()`` (``2500m`` -> 3), ``milli_value()``
likewise at milli scale.

Grammar (the API server's)::

    quantity   = sign? number suffix
    number     = digits | digits "." digits? | "." digits
    suffix     = binarySI | decimalSI | exponent
    binarySI   = Ki | Mi | Gi | Ti | Pi | Ei            (powers of 1024)
    decimalSI  = n | u | m | "" | k | M | G | T | P | E  (powers of 1000)
    exponent   = ("e" | "E") sign? digits              ("1E" alone is one exa)

Formatting follows Go's canonical form: the suffix family of the input is kept (binary stays binary when the
value is a whole number of at least 1024, otherwise decimal), and the largest suffix that leaves a whole
mantissa is chosen (``1.5`` -> ``1500m``, ``12000`` -> ``12k``, ``24Gi`` stays ``24Gi``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from enum import Enum
from fractions import Fraction
from typing import Iterable, Mapping


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity (message matches the API server's wording)."""


class Format(str, Enum):
    """How a quantity is written back: the suffix family of the value it came from."""

    DECIMAL_SI = "DecimalSI"
    BINARY_SI = "BinarySI"
    DECIMAL_EXPONENT = "DecimalExponent"


_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DECIMAL_BY_EXP = {exp: suffix for suffix, exp in _DECIMAL.items()}
_BINARY_BY_EXP = {exp: suffix for suffix, exp in _BINARY.items()}

_QUANTITY = re.compile(
    r"^(?P<sign>[+-])?(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:(?P<binary>Ki|Mi|Gi|Ti|Pi|Ei)|(?P<exponent>[eE][+-]?[0-9]+)|(?P<decimal>[numkMGTPE]?))$"
)

# The same language as a JSON-schema pattern (used by the CRD generator for quantity fields), identical to
# the pattern controller-gen emits for resource.Quantity.
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)


@dataclass(frozen=True)
class Quantity:
    """An exact amount plus the format it is written back in."""

    amount: Fraction
    format: Format = Format.DECIMAL_SI

    # -- parsing ---------------------------------------------------------------------------------------
    @classmethod
    def parse(cls, text: str | int | float) -> "Quantity":
        """Parse a wire value. ints (YAML ``8``) are accepted as the API server accepts them."""
        if isinstance(text, bool):
            raise QuantityError(f"quantities must match the regular expression '{QUANTITY_PATTERN}'")
        if isinstance(text, int):
            return cls(Fraction(text))
        if isinstance(text, float):
            if not math.isfinite(text):
                raise QuantityError(f"quantities must match the regular expression '{QUANTITY_PATTERN}'")
            return cls(Fraction(repr(text)))
        m = _QUANTITY.match(text.strip()) if isinstance(text, str) else None
        if m is None or text != text.strip() or text == "":
            raise QuantityError(f"quantities must match the regular expression '{QUANTITY_PATTERN}'")
        amount = Fraction(m.group("number"))
        if m.group("sign") == "-":
            amount = -amount
        if m.group("binary"):
            return cls(amount * (1 << _BINARY[m.group("binary")]), Format.BINARY_SI)
        if m.group("exponent"):
            return cls(amount * Fraction(10) ** int(m.group("exponent")[1:]), Format.DECIMAL_EXPONENT)
        return cls(amount * Fraction(10) ** _DECIMAL[m.group("decimal") or ""], Format.DECIMAL_SI)

    # -- reading ---------------------------------------------------------------------------------------
    def value(self) -> int:
        """Whole units, rounded up away from zero (Go ``Quantity.Value()``): ``2500m`` -> 3, ``-1500m`` -> -2."""
        return _round_away(self.amount)

    def milli_value(self) -> int:
        """Thousandths of a unit, rounded up away from zero (Go ``MilliValue()``)."""
        return _round_away(self.amount * 1000)

    def is_zero(self) -> bool:
        return self.amount == 0

    # -- arithmetic (exact; result keeps the left operand's format unless it is zero) -----------------
    def __add__(self, other: "Quantity") -> "Quantity":
        fmt = other.format if self.amount == 0 else self.format
        return Quantity(self.amount + other.amount, fmt)

    def __sub__(self, other: "Quantity") -> "Quantity":
        fmt = other.format if self.amount == 0 else self.format
        return Quantity(self.amount - other.amount, fmt)

    def __mul__(self, factor: int | Fraction) -> "Quantity":
        return Quantity(self.amount * factor, self.format)

    __rmul__ = __mul__

    def __lt__(self, other: "Quantity") -> bool:
        return self.amount < other.amount

    def __le__(self, other: "Quantity") -> bool:
        return self.amount <= other.amount

    def __eq__(self, other: object) -> bool:
        # Equality is by amount: "1Gi" == "1024Mi" == "1073741824", as Go's Cmp() == 0.
        return isinstance(other, Quantity) and self.amount == other.amount

    def __hash__(self) -> int:
        return hash(self.amount)

    # -- formatting ------------------------------------------------------------------------------------
    def __str__(self) -> str:
        return self.to_string()

    def to_string(self) -> str:
        """Canonical text (Go ``Quantity.String()``). Sub-nano fractions round up to 1n, as Go does."""
        amount = self.amount
        if self.format is Format.BINARY_SI and abs(amount) >= 1024 and amount.denominator == 1:
            return _format_binary(amount.numerator)
        return _format_decimal(amount, exponent_form=self.format is Format.DECIMAL_EXPONENT)


def _round_away(x: Fraction) -> int:
    return math.ceil(x) if x >= 0 else -math.ceil(-x)


def _format_binary(n: int) -> str:
    sign = "-" if n < 0 else ""
    n = abs(n)
    exp = 0
    while exp < 60 and n % 1024 == 0 and n != 0:
        n //= 1024
        exp += 10
    return f"{sign}{n}{_BINARY_BY_EXP.get(exp, '')}"


def _format_decimal(amount: Fraction, *, exponent_form: bool) -> str:
    if amount == 0:
        return "0"
    sign = "-" if amount < 0 else ""
    amount = abs(amount)
    # Express as an integer mantissa times 10**exp, exp >= -9 (nano is the finest scale Kubernetes keeps).
    scaled = amount * 10**9
    mantissa = math.ceil(scaled)
    exp = -9
    while mantissa % 10 == 0 and mantissa != 0:
        mantissa //= 10
        exp += 1
    # Move to a multiple of 3 at or below exp, never above the largest suffix (E = 18).
    step = exp - (exp % 3)
    step = min(step, 18)
    mantissa *= 10 ** (exp - step)
    if exponent_form:
        return f"{sign}{mantissa}" + (f"e{step}" if step else "")
    return f"{sign}{mantissa}{_DECIMAL_BY_EXP[step]}"


def parse_quantity(value: str | int | float) -> Quantity:
    """Function form of :meth:`Quantity.parse` for call sites that map over values."""
    return Quantity.parse(value)


def is_quantity(value: object) -> bool:
    """Whether ``value`` parses as a quantity (for validation code that collects errors instead of raising)."""
    try:
        Quantity.parse(value)  # type: ignore[arg-type]
    except QuantityError:
        return False
    return True


ResourceList = dict[str, Quantity]


def parse_resource_list(wire: Mapping[str, str | int | float] | None) -> ResourceList:
    """``{"cpu": "2500m", "nvidia.com/gpu": 8}`` -> ``{"cpu": Quantity(5/2), ...}``; ``None`` -> ``{}``."""
    return {name: Quantity.parse(v) for name, v in (wire or {}).items()}


def sum_resources(lists: Iterable[Mapping[str, Quantity]]) -> ResourceList:
    """Per-resource sums (a resource missing from a list counts as zero). Key order: first appearance."""
    out: ResourceList = {}
    for resources in lists:
        for name, q in resources.items():
            out[name] = out[name] + q if name in out else q
    return out


def scale_resources(resources: Mapping[str, Quantity], factor: int | Fraction) -> ResourceList:
    """Every quantity times ``factor`` (e.g. per-pod requests times the pod count)."""
    return {name: q * factor for name, q in resources.items()}


def format_resource_list(resources: Mapping[str, Quantity]) -> dict[str, str]:
    """Canonical wire form of a resource list."""
    return {name: q.to_string() for name, q in resources.items()}
