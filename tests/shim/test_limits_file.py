"""The limits file: the device plugin's read-only copy of a container's slice, which the
environment cannot raise (docs/shim.md "Where limits come from").

Here the file is named by VSLICE_LIMITS_FILE; in containers the shim finds it at the fixed
path /run/vslice-limits/limits (tests/e2e/test_realnode_tenant.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import GIB, MIB, Probe

CUDA_SUCCESS = 0
CUDA_ERROR_OUT_OF_MEMORY = 2


def _limits(probe: Probe, *lines: str) -> Path:
    path = probe.tmp / "limits"
    path.write_text("\n".join(("# written by the device plugin", *lines)) + "\n")
    return path


def _slice(probe: Probe, memory: str = "1024m", cores: str = "100") -> Path:
    return _limits(
        probe,
        "VSLICE_LIMITS_VERSION=1",
        f"CUDA_DEVICE_MEMORY_LIMIT_0={memory}",
        f"CUDA_DEVICE_SM_LIMIT_0={cores}",
        f"CUDA_DEVICE_MEMORY_SHARED_CACHE={probe.region}",
    )


def _one_line(stderr: str, *words: str) -> None:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("[vslice] "), stderr
    for word in words:
        assert word in lines[0], stderr


def test_the_limits_file_sets_the_slice(probe: Probe) -> None:
    out = probe.run(
        "ctx:0", "info", "alloc:1500m", "alloc:900m", VSLICE_LIMITS_FILE=str(_slice(probe))
    )
    assert out.values("info") == {"free": GIB, "total": GIB}
    assert out.code("alloc:1500m") == CUDA_ERROR_OUT_OF_MEMORY
    assert out.code("alloc:900m") == CUDA_SUCCESS
    assert out.stderr == ""
    assert probe.region.exists()  # the region path came from the file


@pytest.mark.parametrize("variable", ["CUDA_DEVICE_MEMORY_LIMIT", "CUDA_DEVICE_MEMORY_LIMIT_0"])
def test_the_environment_cannot_raise_a_limit(probe: Probe, variable: str) -> None:
    out = probe.run(
        "ctx:0",
        "info",
        "alloc:1500m",
        VSLICE_LIMITS_FILE=str(_slice(probe)),
        **{variable: "8g"},
    )
    assert out.values("info")["total"] == GIB
    assert out.code("alloc:1500m") == CUDA_ERROR_OUT_OF_MEMORY


@pytest.mark.parametrize("value", ["", "0", "garbage", "1.5g"])
def test_the_environment_cannot_remove_a_limit(probe: Probe, value: str) -> None:
    out = probe.run(
        "ctx:0",
        "alloc:1500m",
        VSLICE_LIMITS_FILE=str(_slice(probe)),
        CUDA_DEVICE_MEMORY_LIMIT_0=value,
        CUDA_DEVICE_SM_LIMIT_0=value,
    )
    assert out.code("alloc:1500m") == CUDA_ERROR_OUT_OF_MEMORY
    assert out.stderr == ""  # the file's limit holds: nothing failed


def test_the_environment_may_lower_a_limit(probe: Probe) -> None:
    out = probe.run(
        "ctx:0",
        "info",
        VSLICE_LIMITS_FILE=str(_slice(probe)),
        CUDA_DEVICE_MEMORY_LIMIT_0="512m",
    )
    assert out.values("info")["total"] == 512 * MIB


def test_the_environment_cannot_move_the_region(probe: Probe) -> None:
    elsewhere = probe.tmp / "own-region"
    out = probe.run(
        "ctx:0",
        "alloc:1m",
        VSLICE_LIMITS_FILE=str(_slice(probe)),
        CUDA_DEVICE_MEMORY_SHARED_CACHE=str(elsewhere),
    )
    assert out.code("alloc:1m") == CUDA_SUCCESS
    assert probe.region.exists() and not elsewhere.exists()


@pytest.mark.parametrize(
    ("lines", "words"),
    [
        (("CUDA_DEVICE_MEMORY_LIMIT_0=1g",), ("no VSLICE_LIMITS_VERSION",)),
        (
            ("VSLICE_LIMITS_VERSION=2", "CUDA_DEVICE_MEMORY_LIMIT_0=1g"),
            ("VSLICE_LIMITS_VERSION=2",),
        ),
        (("VSLICE_LIMITS_VERSION=1", "memory 1g"), ("line 3", "NAME=VALUE")),
        (
            ("VSLICE_LIMITS_VERSION=1", "CUDA_DEVICE_MEMORY_LIMT_0=1g"),
            ("CUDA_DEVICE_MEMORY_LIMT_0",),
        ),
        (("VSLICE_LIMITS_VERSION=1", "CUDA_DEVICE_MEMORY_LIMIT_0=1.5g"), ("'1.5g'",)),
        (
            (
                "VSLICE_LIMITS_VERSION=1",
                "CUDA_DEVICE_MEMORY_LIMIT_0=1g",
                "CUDA_DEVICE_SM_LIMIT_0=150",
            ),
            ("'150'",),
        ),
        (("VSLICE_LIMITS_VERSION=1",), ("no CUDA_DEVICE_MEMORY_LIMIT_0",)),
    ],
)
def test_a_bad_limits_file_fails_closed_with_one_line(
    probe: Probe, lines: tuple[str, ...], words: tuple[str, ...]
) -> None:
    path = _limits(probe, *lines)
    out = probe.run(
        "ctx:0", "alloc:1m", "info", VSLICE_LIMITS_FILE=str(path), CUDA_DEVICE_MEMORY_LIMIT="8g"
    )
    assert out.returncode == 0
    assert out.code("alloc:1m") == CUDA_ERROR_OUT_OF_MEMORY
    assert out.values("info") == {"free": 0, "total": 0}
    _one_line(out.stderr, str(path), "no GPU memory", *words)


def test_a_missing_limits_file_fails_closed_and_names_it(probe: Probe) -> None:
    path = probe.tmp / "nowhere" / "limits"
    out = probe.run("ctx:0", "alloc:1m", "nvml", VSLICE_LIMITS_FILE=str(path))
    assert out.code("alloc:1m") == CUDA_ERROR_OUT_OF_MEMORY
    assert out.nvml(0)["total"] == 0 and out.nvml(0)["free"] == 0
    _one_line(out.stderr, str(path), "cannot be read", "no GPU memory")


def test_nvml_reports_true_usage_past_the_slice(probe: Probe) -> None:
    # The context overhead is charged even when it does not fit: used goes past the slice,
    # free stops at 0.
    path = _limits(
        probe,
        "VSLICE_LIMITS_VERSION=1",
        "CUDA_DEVICE_MEMORY_LIMIT_0=200m",
        "VSLICE_CONTEXT_OVERHEAD=300m",
        f"CUDA_DEVICE_MEMORY_SHARED_CACHE={probe.region}",
    )
    out = probe.run("ctx:0", "alloc:1m", "nvml", VSLICE_LIMITS_FILE=str(path))
    assert out.code("alloc:1m") == CUDA_ERROR_OUT_OF_MEMORY
    nvml = out.nvml(0)
    assert nvml["total"] == 200 * MIB
    assert nvml["used"] == 300 * MIB
    assert nvml["free"] == 0


def test_the_context_overhead_comes_from_the_file_not_the_environment(probe: Probe) -> None:
    path = _limits(
        probe,
        "VSLICE_LIMITS_VERSION=1",
        "CUDA_DEVICE_MEMORY_LIMIT_0=1g",
        "VSLICE_CONTEXT_OVERHEAD=100m",
    )
    out = probe.run("ctx:0", "info", VSLICE_LIMITS_FILE=str(path), VSLICE_CONTEXT_OVERHEAD="0")
    assert out.values("info")["free"] == GIB - 100 * MIB


def test_without_a_limits_file_the_environment_is_trusted(probe: Probe) -> None:
    out = probe.run("ctx:0", "info", CUDA_DEVICE_MEMORY_LIMIT="2g")
    assert out.values("info")["total"] == 2 * GIB
