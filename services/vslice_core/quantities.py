"""Kubernetes quantities ("4Gi", "3000Mi", "2e3") as exact numbers, MiB and counts.

One grammar for every part of vslice (the webhook, ``vslice plan``, the extender, the SDK):
Kubernetes' own, as ``k8s.io/apimachinery/pkg/api/resource`` documents ``Quantity``::

    quantity ::= [sign] number [suffix]
    sign     ::= "+" | "-"
    number   ::= digits | digits "." digits | digits "." | "." digits
    suffix   ::= Ki | Mi | Gi | Ti | Pi | Ei           (binary)
               | n | u | m | k | M | G | T | P | E      (decimal)
               | ("e" | "E") [sign] digits              (exponent)

Digits are ASCII ``0``-``9`` and nothing may surround the quantity: ``"3000 "``, a newline,
or digits of other scripts that Python's ``\\d`` would match (Arabic-Indic ``U+0660``-``U+0669``,
full-width ``U+FF10``-``U+FF19``, ...) are refused, as the API server refuses them, with a
message naming the field and the value. Where Kubernetes' documentation and its parser
differ, vslice takes what both accept: the exponent is a whole number (the documentation
would allow ``1e1.5``, the parser refuses it), and a number has a digit (the parser happens
to read ``"."``, ``"+"`` and ``"e3"`` as zero). A JSON number, ``int`` or finite ``float``, is
read as the number it spells, as the API server reads an unquoted one; ``true``/``false``,
``null``, ``NaN`` and anything else are refused.

Range: Kubernetes keeps no quantity beyond 2^63-1 in magnitude nor finer than ``1n``, and
would silently cap or round one; :func:`parse_quantity`, :func:`to_mib` and :func:`to_count`
refuse them instead, so what vslice accounts for is what was written. Past ``1e40``, below
``1e-40`` or beyond 1000 significant digits :func:`read_quantity` refuses at once, before
building the number, so a value like ``"1e999999999"`` costs nothing.

GPU memory follows HAMi's convention so existing manifests keep their meaning: a plain
number (``30720``) is already MiB. The API server stores every quantity in canonical form,
so ``60000`` comes back as ``"60k"`` and ``3e3`` as ``"3k"``: a decimal suffix or an exponent
therefore still counts MiB (it is only another spelling of a plain number). Only a binary
unit (``"4Gi"``, ``"3000Mi"``) is read as bytes, and rounded *up* to whole MiB so a slice is
never smaller than what was asked for.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction

from vslice_core.errors import InvalidRequest

LARGEST = 2**63 - 1
"""The largest magnitude Kubernetes keeps in a quantity (it caps larger ones)."""

_FINEST = Fraction(1, 10**9)  # 1n: Kubernetes rounds anything finer up to it
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
# re.ASCII keeps [0-9] to ASCII whatever the flags; fullmatch leaves no room for blanks.
_QUANTITY = re.compile(
    r"(?P<sign>[+-]?)(?:(?P<whole>[0-9]+)(?:\.(?P<fraction>[0-9]*))?|\.(?P<only>[0-9]+))"
    r"(?:(?P<suffix>[KMGTPE]i|[numkMGTPE])|[eE](?P<exponent>[+-]?[0-9]+))?",
    re.ASCII,
)
# Orders of magnitude past which a number is not built: far beyond Kubernetes' range either
# way, and small enough that building anything inside them is cheap.
_ORDERS = 40
_DIGITS = 1000
_MIB = 2**20
# Strings already read: the same few values ("1", "1024", "5") arrive on every pod the
# extender filters and the webhook admits, and building their Fractions was a third of a
# filter's CPU. Only values that parsed are kept (an error names its field, which differs
# between callers); the table is emptied when full, so hostile variety cannot grow it.
_PARSED: dict[str, tuple[Fraction, bool]] = {}
_PARSED_MAX = 4096


@dataclass(frozen=True)
class Quantity:
    """A value read in the quantity grammar: ``number`` exact, ``value`` as it was written."""

    value: object
    number: Fraction
    binary: bool
    """Written with a binary unit (``Ki`` .. ``Ei``): GPU memory then counts bytes."""

    @property
    def mib(self) -> Fraction:
        """The number as GPU memory in MiB (HAMi's convention, not yet rounded)."""
        return self.number / _MIB if self.binary else self.number


def _not_a_quantity(value: object, field: str) -> InvalidRequest:
    if isinstance(value, str):
        message = (
            f"{field} must be a Kubernetes quantity written with ASCII digits and no blanks "
            f"(e.g. '30720' or '4Gi'), got {value!r}"
        )
    else:
        message = f"{field} must be a quantity string such as '3000', got {value!r}"
    return InvalidRequest(message, field=field, value=value)


def _too_large(value: object, field: str) -> InvalidRequest:
    return InvalidRequest(
        f"{field} must be at most {LARGEST} in magnitude (Kubernetes keeps no larger "
        f"quantity), got {value!r}",
        field=field,
        value=value,
    )


def _too_fine(value: object, field: str) -> InvalidRequest:
    return InvalidRequest(
        f"{field} must be a multiple of 1n (Kubernetes keeps no finer quantity), got {value!r}",
        field=field,
        value=value,
    )


def _exponent(digits: str) -> int:
    """A signed exponent; one too long to read is only "huge" (its sign kept)."""
    sign = -1 if digits.startswith("-") else 1
    significant = digits.lstrip("+-").lstrip("0")
    return sign * (int(significant or "0") if len(significant) <= 9 else 10**9)


def _number(text: str, value: object, field: str) -> tuple[Fraction, bool]:
    """``text`` in the grammar; ``value``, what was written, is what messages show."""
    match = _QUANTITY.fullmatch(text)
    if match is None:
        raise _not_a_quantity(value, field)
    whole = match["whole"] or ""
    fraction = match["fraction"] or match["only"] or ""
    suffix = match["suffix"] or ""
    binary = suffix in _BINARY
    tens = _exponent(match["exponent"]) if match["exponent"] else _DECIMAL.get(suffix, 0)
    digits = (whole + fraction).lstrip("0")
    significant = digits.rstrip("0")
    if not significant:
        return Fraction(0), binary
    # number = int(significant) * 10**scale (* 2**bits); order counts its integer digits.
    scale = len(digits) - len(significant) - len(fraction) + tens
    order = len(significant) + scale
    if order > _ORDERS:
        raise _too_large(value, field)
    if order < -_ORDERS or len(significant) > _DIGITS:
        raise _too_fine(value, field)
    number = int(significant) * Fraction(10) ** scale * 2 ** _BINARY.get(suffix, 0)
    return -number if match["sign"] == "-" else number, binary


def read_quantity(value: object, field: str) -> Quantity:
    """``value`` in the quantity grammar (see the module docstring), as an exact number.

    Only absurd magnitudes are refused here; callers with a bound of their own check it
    first, then :func:`within_kubernetes`, so the tighter bound names itself in the message.
    """
    if isinstance(value, bool):
        raise _not_a_quantity(value, field)
    if isinstance(value, int):
        return Quantity(value, Fraction(value), False)
    if isinstance(value, float) and math.isfinite(value):
        # The decimal the number was written as (what the API server would read), not the
        # binary fraction nearest to it: 0.1 is 1/10.
        return Quantity(value, _number(repr(value), value, field)[0], False)
    if isinstance(value, str):
        parsed = _PARSED.get(value)
        if parsed is None:
            parsed = _number(value, value, field)
            if len(_PARSED) >= _PARSED_MAX:
                _PARSED.clear()
            _PARSED[value] = parsed
        return Quantity(value, *parsed)
    raise _not_a_quantity(value, field)


def within_kubernetes(quantity: Quantity, field: str) -> Quantity:
    """``quantity`` if Kubernetes keeps it as written: at most 2^63-1, no finer than 1n."""
    if abs(quantity.number) > LARGEST:
        raise _too_large(quantity.value, field)
    # A whole number is a multiple of 1n; only a fraction needs the division.
    if quantity.number.denominator != 1 and (quantity.number / _FINEST).denominator != 1:
        raise _too_fine(quantity.value, field)
    return quantity


def _read(value: object, field: str) -> Quantity:
    """A quantity read and checked before (the pod's normalization does both in one pass),
    or a raw value read and checked now."""
    if isinstance(value, Quantity):
        return value
    return within_kubernetes(read_quantity(value, field), field)


def parse_quantity(value: object, field: str) -> Fraction:
    """A Kubernetes quantity (or a JSON number) as an exact fraction."""
    return _read(value, field).number


def _non_negative(quantity: Quantity, field: str) -> None:
    if quantity.number < 0:
        raise InvalidRequest(
            f"{field} must be >= 0, got {quantity.value!r}", field=field, value=quantity.value
        )


def to_mib(value: object, field: str) -> int:
    """GPU memory in MiB: binary units are bytes (rounded up), any other spelling counts MiB.

    ``value``: a raw value, or a :class:`Quantity` already read and checked with
    :func:`within_kubernetes` (then not read again).
    """
    quantity = _read(value, field)
    _non_negative(quantity, field)
    whole = "bytes" if quantity.binary else "MiB"
    if quantity.number.denominator != 1:
        raise InvalidRequest(
            f"{field} must be a whole number of {whole}, got {quantity.value!r}",
            field=field,
            value=quantity.value,
        )
    return math.ceil(quantity.mib)


def to_count(value: object, field: str) -> int:
    """A whole, non-negative number (GPU count, percent of memory or cores).

    ``value``: a raw value, or a :class:`Quantity` already read and checked with
    :func:`within_kubernetes` (then not read again).
    """
    quantity = _read(value, field)
    _non_negative(quantity, field)
    if quantity.number.denominator != 1:
        raise InvalidRequest(
            f"{field} must be a whole number, got {quantity.value!r}",
            field=field,
            value=quantity.value,
        )
    return int(quantity.number)


def shim_memory_limit(mib: int) -> str:
    """The shim's spelling of a memory limit (``CUDA_DEVICE_MEMORY_LIMIT``): MiB with ``m``."""
    return f"{mib}m"


def format_gib(mib: int, *, decimal: bool = False) -> str:
    """MiB as a number of GiB, rounded down to a tenth: ``23028`` -> ``22.4``, ``81920`` ->
    ``80`` (``80.0`` with ``decimal``, for table columns headed ``(GiB)``).

    Every GiB amount vslice prints goes through here, tables and why-not texts alike, so one
    GPU reads the same everywhere. Rounded down, so a free amount shown is never more than is
    free: a suggestion copied as shown still fits.
    """
    tenths = mib * 10 // 1024
    if not decimal and mib % 1024 == 0:
        return str(mib // 1024)
    return f"{tenths // 10}.{tenths % 10}"


def format_mib(mib: int) -> str:
    """``10240`` -> ``10 GiB``; ``1536`` -> ``1.5 GiB``; ``512`` -> ``512 MiB``
    (:func:`format_gib`'s rounding)."""
    if mib < 1024:
        return f"{mib} MiB"
    return f"{format_gib(mib)} GiB"
