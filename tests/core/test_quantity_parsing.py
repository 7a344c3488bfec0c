import unicodedata
from fractions import Fraction

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from vslice_core.errors import InvalidRequest
from vslice_core.quantities import (
    LARGEST,
    parse_quantity,
    read_quantity,
    shim_memory_limit,
    to_count,
    to_mib,
)

FIELD = "nvidia.com/gpumem"
NOT_A_QUANTITY = "must be a Kubernetes quantity written with ASCII digits and no blanks"


@pytest.mark.parametrize(
    ("value", "mib"),
    [
        (30720, 30720),
        (30720.0, 30720),
        ("30720", 30720),
        ("4Gi", 4096),
        ("3000Mi", 3000),
        ("1.5Gi", 1536),
        ("1Ti", 1024 * 1024),
        # The API server's canonical spelling of a plain number: still MiB, not bytes.
        ("60k", 60000),
        ("8k", 8000),
        ("3e3", 3000),
        ("3E+3", 3000),
        ("4G", 4 * 10**9),
        ("1048576", 1048576),
        ("+2Gi", 2048),
        ("2.Gi", 2048),  # "<digits>." is in Kubernetes' grammar
        ("002048", 2048),
        ("2048Ki", 2),
        ("1025Ki", 2),  # bytes are rounded up, never down
    ],
)
def test_memory_quantities_become_whole_mib(value: object, mib: int) -> None:
    assert to_mib(value, FIELD) == mib


@pytest.mark.parametrize(
    "value",
    [
        "abc",
        "",
        "4GB",
        "4K",
        "1e",
        "1e+",
        "1e1.5",
        "1e3Mi",
        "0x10",
        "1_000",
        "1,000",
        "++1",
        "1.5.5",
        # accepted by the API server's parser by accident (as zero), not by its grammar
        ".",
        "+",
        "-",
        "e3",
        # blanks anywhere, even the ones the API server's JSON decoder would trim
        " 2Gi ",
        "3000 ",
        " 3000",
        "3000\n",
        "\t3000",
        "30 720",
        "3000\u00a0",
        # digits that are digits, but not ASCII
        "\u0663\u0660\u0660\u0660",  # Arabic-Indic
        "\uff13\uff10\uff10\uff10",  # full-width
        "\u0969\u0966",  # Devanagari
        "1\u00b5",  # micro sign, not 'u'
    ],
)
def test_text_outside_the_kubernetes_grammar_is_refused(value: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        to_mib(value, FIELD)
    assert str(caught.value) == f"{FIELD} {NOT_A_QUANTITY} (e.g. '30720' or '4Gi'), got {value!r}"
    assert (caught.value.field, caught.value.value) == (FIELD, value)


@pytest.mark.parametrize("value", [True, False, None, [], {}, float("nan"), float("inf")])
def test_values_that_are_not_numbers_or_text_are_refused(value: object) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_quantity(value, FIELD)
    assert str(caught.value) == f"{FIELD} must be a quantity string such as '3000', got {value!r}"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("-1", "must be >= 0, got '-1'"),
        ("1.5", "must be a whole number of MiB, got '1.5'"),
        ("100m", "must be a whole number of MiB, got '100m'"),
        ("1.0001Ki", "must be a whole number of bytes, got '1.0001Ki'"),
        ("1e19", f"must be at most {LARGEST} in magnitude (Kubernetes keeps no larger quantity)"),
        ("8Ei", f"must be at most {LARGEST} in magnitude"),
        ("1e-10", "must be a multiple of 1n (Kubernetes keeps no finer quantity), got '1e-10'"),
    ],
)
def test_invalid_memory_names_the_field_and_the_value(value: str, message: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        to_mib(value, FIELD)
    assert caught.value.field == FIELD
    assert str(caught.value).startswith(f"{FIELD} {message}")
    assert repr(value) in str(caught.value)


def test_counts_accept_quantities_that_are_whole_numbers() -> None:
    assert to_count("2", "nvidia.com/gpu") == 2
    assert to_count(3, "nvidia.com/gpu") == 3
    assert to_count("1k", "nvidia.com/gpu") == 1000
    with pytest.raises(InvalidRequest, match=r"nvidia.com/gpu must be a whole number, got '1.5'"):
        to_count("1.5", "nvidia.com/gpu")
    with pytest.raises(InvalidRequest, match=r"must be >= 0"):
        to_count(-2, "nvidia.com/gpu")
    with pytest.raises(InvalidRequest, match=r"must be at most 9223372036854775807"):
        to_count(2**63, "nvidia.com/priority")


def test_quantities_are_exact_fractions() -> None:
    assert parse_quantity("1.5k", "x") == Fraction(1500)
    assert parse_quantity("500m", "x") == Fraction(1, 2)
    assert parse_quantity("1e-3", "x") == Fraction(1, 1000)
    assert parse_quantity("1n", "x") == Fraction(1, 10**9)
    assert parse_quantity(0.1, "x") == Fraction(1, 10)  # the decimal written, not the binary
    assert parse_quantity("-0", "x") == 0
    assert parse_quantity(str(LARGEST), "x") == LARGEST


@pytest.mark.parametrize("value", ["1e999999999", "9" * 5000, "1" + "0" * 5000, "1e-999999999"])
def test_absurd_magnitudes_are_refused_without_building_them(value: str) -> None:
    with pytest.raises(InvalidRequest, match=r"Kubernetes keeps no (larger|finer) quantity"):
        read_quantity(value, "x")


def test_the_shim_spells_memory_limits_in_mib_with_an_m() -> None:
    assert shim_memory_limit(3000) == "3000m"


# The documented grammar, generated piece by piece, with what each piece is worth.
_DIGITS = st.text("0123456789", min_size=1, max_size=6)
_BINARY = {f"{unit}i": Fraction(2) ** (10 * power) for power, unit in enumerate("KMGTPE", 1)}
_POWERS = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DECIMAL = {unit: Fraction(10) ** power for unit, power in _POWERS.items()}
_SUFFIXES = {**_BINARY, **_DECIMAL, "": Fraction(1)}


@st.composite
def _quantities(draw: st.DrawFn) -> tuple[str, Fraction]:
    """A quantity written in the grammar, and its value computed apart from the parser."""
    sign = draw(st.sampled_from(("", "+", "-")))
    whole, fraction = draw(_DIGITS), draw(_DIGITS)
    number = draw(st.sampled_from((whole, f"{whole}.{fraction}", f"{whole}.", f".{fraction}")))
    if draw(st.booleans()):
        exponent = draw(st.integers(-12, 12))
        written = draw(st.sampled_from(("", "+", "0", "+00"))) if exponent >= 0 else "-0"
        suffix = f"{draw(st.sampled_from('eE'))}{written}{abs(exponent)}"
        scale = Fraction(10) ** exponent
    else:
        suffix = draw(st.sampled_from(sorted(_SUFFIXES)))
        scale = _SUFFIXES[suffix]
    value = Fraction(number.rstrip(".")) * scale
    return f"{sign}{number}{suffix}", -value if sign == "-" else value


@given(_quantities())
@example(("1.Gi", Fraction(2**30)))
def test_every_quantity_in_the_grammar_reads_as_its_exact_value(case: tuple[str, Fraction]) -> None:
    text, value = case
    quantity = read_quantity(text, "x")
    assert quantity.number == value
    assert quantity.binary == text.endswith("i")


_BLANKS = st.sampled_from((" ", "\t", "\n", "\r", "\u00a0", "\u2003", "\u3000"))
# Every decimal digit that Python's \d matches outside ASCII (Arabic-Indic, full-width, ...).
_FOREIGN_DIGITS = st.characters(categories=["Nd"]).filter(lambda c: not c.isascii())


@given(_quantities(), _BLANKS, st.booleans())
def test_a_blank_around_a_quantity_is_refused(
    case: tuple[str, Fraction], blank: str, before: bool
) -> None:
    text = blank + case[0] if before else case[0] + blank
    with pytest.raises(InvalidRequest, match=NOT_A_QUANTITY):
        read_quantity(text, "x")


@given(_quantities(), _FOREIGN_DIGITS, st.data())
def test_a_digit_that_is_not_ascii_is_refused(
    case: tuple[str, Fraction], digit: str, data: st.DataObject
) -> None:
    text = case[0]
    positions = [i for i, c in enumerate(text) if c.isdigit()]
    at = data.draw(st.sampled_from(positions))
    assert unicodedata.digit(digit) in range(10)
    with pytest.raises(InvalidRequest, match=NOT_A_QUANTITY):
        read_quantity(text[:at] + digit + text[at + 1 :], "x")
