"""Kubernetes quantity strings ("4Gi", "3000Mi", "2e3") as exact numbers, MiB and counts.

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
from fractions import Fraction

from vslice_core.errors import InvalidRequest

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_QUANTITY = re.compile(
    r"^(?P<number>[+-]?(?:\d+(?:\.\d*)?|\.\d+))"
    r"(?:(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])|[eE](?P<exponent>[+-]?\d{1,3}))?$"
)
_MIB = 2**20


def _split(value: object, field: str) -> tuple[Fraction, bool]:
    """The number and whether it carried a binary unit (Ki, Mi, Gi, ...)."""
    if isinstance(value, bool):
        raise InvalidRequest(f"{field} must be a number, got {value!r}", field=field, value=value)
    if isinstance(value, int):
        return Fraction(value), False
    if isinstance(value, float) and math.isfinite(value):
        return Fraction(value), False
    text = value.strip() if isinstance(value, str) else None
    match = _QUANTITY.match(text) if text else None
    if match is None:
        raise InvalidRequest(
            f"{field} must be a Kubernetes quantity such as 30720 or 4Gi, got {value!r}",
            field=field,
            value=value,
        )
    number = Fraction(match["number"])
    if match["exponent"] is not None:
        return number * Fraction(10) ** int(match["exponent"]), False
    suffix = match["suffix"] or ""
    scale = _BINARY.get(suffix) or _DECIMAL[suffix]
    return number * scale, suffix in _BINARY


def parse_quantity(value: object, field: str) -> Fraction:
    """A Kubernetes quantity (or a JSON number) as an exact fraction."""
    return _split(value, field)[0]


def _non_negative(number: Fraction, value: object, field: str) -> None:
    if number < 0:
        raise InvalidRequest(f"{field} must be >= 0, got {value!r}", field=field, value=value)


def to_mib(value: object, field: str) -> int:
    """GPU memory in MiB: binary units are bytes (rounded up), any other spelling counts MiB."""
    number, binary_unit = _split(value, field)
    _non_negative(number, value, field)
    if not binary_unit:
        if number.denominator != 1:
            raise InvalidRequest(
                f"{field} must be a whole number of MiB, got {value!r}", field=field, value=value
            )
        return int(number)
    if number.denominator != 1:
        raise InvalidRequest(
            f"{field} must be a whole number of bytes, got {value!r}", field=field, value=value
        )
    return math.ceil(number / _MIB)


def to_count(value: object, field: str) -> int:
    """A whole, non-negative number (GPU count, percent of memory or cores)."""
    number = parse_quantity(value, field)
    _non_negative(number, value, field)
    if number.denominator != 1:
        raise InvalidRequest(
            f"{field} must be a whole number, got {value!r}", field=field, value=value
        )
    return int(number)


def shim_memory_limit(mib: int) -> str:
    """The shim's spelling of a memory limit (``CUDA_DEVICE_MEMORY_LIMIT``): MiB with ``m``."""
    return f"{mib}m"


def format_mib(mib: int) -> str:
    """``10240`` -> ``10 GiB``; ``1536`` -> ``1.5 GiB``; ``512`` -> ``512 MiB``.

    Rounded down to a tenth of a GiB: a free amount shown is never more than is free.
    """
    if mib < 1024:
        return f"{mib} MiB"
    tenths = mib * 10 // 1024
    return (
        f"{tenths // 10} GiB" if tenths % 10 == 0 and mib % 1024 == 0 else f"{tenths / 10:.1f} GiB"
    )
