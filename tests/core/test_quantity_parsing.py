from fractions import Fraction

import pytest
from vslice_core.errors import InvalidRequest
from vslice_core.quantities import parse_quantity, shim_memory_limit, to_count, to_mib

FIELD = "nvidia.com/gpumem"


@pytest.mark.parametrize(
    ("value", "mib"),
    [
        (30720, 30720),
        ("30720", 30720),
        ("4Gi", 4096),
        ("3000Mi", 3000),
        ("1.5Gi", 1536),
        ("1Ti", 1024 * 1024),
        # The API server's canonical spelling of a plain number: still MiB, not bytes.
        ("60k", 60000),
        ("8k", 8000),
        ("3e3", 3000),
        ("4G", 4 * 10**9),
        ("1048576", 1048576),
        (" 2Gi ", 2048),
        ("2048Ki", 2),
        ("1025Ki", 2),  # bytes are rounded up, never down
    ],
)
def test_memory_quantities_become_whole_mib(value: object, mib: int) -> None:
    assert to_mib(value, FIELD) == mib


@pytest.mark.parametrize("value", ["abc", "", "4GB", "-1", "1.5", "100m", True, None, [], "1e"])
def test_invalid_memory_names_the_field_and_the_value(value: object) -> None:
    with pytest.raises(InvalidRequest) as caught:
        to_mib(value, FIELD)
    assert caught.value.field == FIELD
    assert str(caught.value).startswith(f"{FIELD} must be ")
    assert repr(value) in str(caught.value) or str(value) in str(caught.value)


def test_counts_accept_quantities_that_are_whole_numbers() -> None:
    assert to_count("2", "nvidia.com/gpu") == 2
    assert to_count(3, "nvidia.com/gpu") == 3
    assert to_count("1k", "nvidia.com/gpu") == 1000
    with pytest.raises(InvalidRequest, match=r"nvidia.com/gpu must be a whole number, got '1.5'"):
        to_count("1.5", "nvidia.com/gpu")
    with pytest.raises(InvalidRequest, match=r"must be >= 0"):
        to_count(-2, "nvidia.com/gpu")


def test_quantities_are_exact_fractions() -> None:
    assert parse_quantity("1.5k", "x") == Fraction(1500)
    assert parse_quantity("500m", "x") == Fraction(1, 2)
    assert parse_quantity("1e-3", "x") == Fraction(1, 1000)


def test_the_shim_spells_memory_limits_in_mib_with_an_m() -> None:
    assert shim_memory_limit(3000) == "3000m"
