"""Bad input never crashes the user's program: one clear line on stderr, then a documented
safe behaviour (docs/shim.md): unparsable limits fail closed (the device gets no memory), an
unusable region file is left alone and accounting stays private to the process (its limits
still hold)."""

from __future__ import annotations

import os

import pytest
from conftest import MIB, Probe
from vslice_shim import RegionError, create_region, open_region
from vslice_shim.region import DeviceLimit

CUDA_SUCCESS = 0
CUDA_ERROR_OUT_OF_MEMORY = 2


def _one_line(stderr: str, *words: str) -> None:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("[vslice] "), stderr
    for word in words:
        assert word in lines[0], stderr


@pytest.mark.parametrize("value", ["4x", "-1g", "lots", "99999999999999999999g", "1.5g"])
def test_an_unparsable_memory_limit_fails_closed_and_says_so(probe: Probe, value: str) -> None:
    out = probe.run("ctx:0", "alloc:1m", "info", CUDA_DEVICE_MEMORY_LIMIT=value)
    assert out.returncode == 0
    assert out.code("alloc:1m") == CUDA_ERROR_OUT_OF_MEMORY
    assert out.values("info") == {"free": 0, "total": 0}
    _one_line(out.stderr, "CUDA_DEVICE_MEMORY_LIMIT", value, "no GPU memory")


def test_an_unparsable_per_device_limit_names_its_variable(probe: Probe) -> None:
    out = probe.run(
        "ctx:0",
        "alloc:2g",
        FAKE_CUDA_DEVICE_COUNT="2",
        CUDA_DEVICE_MEMORY_LIMIT_1="2gigs",
        CUDA_DEVICE_MEMORY_LIMIT_0="1g",
    )
    assert out.code("alloc:2g") == CUDA_ERROR_OUT_OF_MEMORY  # device 0 keeps its limit
    _one_line(out.stderr, "CUDA_DEVICE_MEMORY_LIMIT_1='2gigs'", "this device")


def test_an_unparsable_per_device_limit_closes_only_its_device(probe: Probe) -> None:
    out = probe.run(
        "ctx:0",
        "alloc:500m",
        "ctx:1",
        "alloc:1m",
        FAKE_CUDA_DEVICE_COUNT="2",
        CUDA_DEVICE_MEMORY_LIMIT_1="2gigs",
        CUDA_DEVICE_MEMORY_LIMIT_0="1g",
    )
    assert out.code("alloc:500m") == CUDA_SUCCESS
    assert out.code("alloc:1m") == CUDA_ERROR_OUT_OF_MEMORY


@pytest.mark.parametrize("value", ["150", "half", "-5"])
def test_an_unparsable_compute_limit_fails_closed_and_says_so(probe: Probe, value: str) -> None:
    out = probe.run("ctx:0", "alloc:1m", CUDA_DEVICE_SM_LIMIT=value)
    assert out.returncode == 0
    assert out.code("alloc:1m") == CUDA_ERROR_OUT_OF_MEMORY
    _one_line(out.stderr, "CUDA_DEVICE_SM_LIMIT", value, "no GPU memory")


def test_a_region_in_a_missing_directory_keeps_limits_private(probe: Probe) -> None:
    path = probe.tmp / "missing" / "region"
    out = probe.run(
        "ctx:0",
        "alloc:2g",
        CUDA_DEVICE_MEMORY_LIMIT="1g",
        CUDA_DEVICE_MEMORY_SHARED_CACHE=str(path),
    )
    assert out.code("alloc:2g") == CUDA_ERROR_OUT_OF_MEMORY
    _one_line(out.stderr, str(path), "private")


def test_a_foreign_region_file_is_left_alone(probe: Probe) -> None:
    content = os.urandom(4096)
    probe.region.write_bytes(content)
    out = probe.run(
        "ctx:0",
        "alloc:2g",
        CUDA_DEVICE_MEMORY_LIMIT="1g",
        CUDA_DEVICE_MEMORY_SHARED_CACHE=str(probe.region),
    )
    assert out.code("alloc:2g") == CUDA_ERROR_OUT_OF_MEMORY
    _one_line(out.stderr, "not a vslice region")
    assert probe.region.read_bytes() == content
    with pytest.raises(RegionError, match="not a vslice region"):
        open_region(probe.region)


def test_a_region_of_another_major_version_is_refused(probe: Probe) -> None:
    create_region(probe.region, [DeviceLimit("GPU-" + "1" * 32, 1 << 30)], version=(2, 0))
    before = probe.region.read_bytes()
    out = probe.run(
        "ctx:0",
        "alloc:512m",
        CUDA_DEVICE_MEMORY_LIMIT="1g",
        CUDA_DEVICE_MEMORY_SHARED_CACHE=str(probe.region),
    )
    assert out.code("alloc:512m") == CUDA_SUCCESS
    _one_line(out.stderr, "version 2.0")
    assert probe.region.read_bytes() == before
    with pytest.raises(RegionError, match=r"version 2\.0"):
        open_region(probe.region)


def test_a_newer_minor_version_is_accepted(probe: Probe) -> None:
    create_region(probe.region, version=(1, 7))
    out = probe.run(
        "ctx:0",
        "alloc:100m",
        CUDA_DEVICE_MEMORY_LIMIT="1g",
        CUDA_DEVICE_MEMORY_SHARED_CACHE=str(probe.region),
    )
    assert out.stderr == ""
    with open_region(probe.region) as region:
        assert region.snapshot().version == (1, 7)


def test_limits_written_into_the_region_are_never_enforced(probe: Probe) -> None:
    # The region is writable by the container: a limit found there (here 8 GiB, or 200 MiB,
    # for the first fake GPU) neither raises nor lowers the process's own 1 GiB.
    uuid = "GPU-56534c46-414b-4510-8000-000000000000"
    for written in (8192 * MIB, 200 * MIB):
        create_region(probe.region, [DeviceLimit(uuid, written)])
        out = probe.run(
            "ctx:0",
            "info",
            "alloc:1500m",
            CUDA_DEVICE_MEMORY_LIMIT="1g",
            CUDA_DEVICE_MEMORY_SHARED_CACHE=str(probe.region),
        )
        assert out.values("info")["total"] == 1024 * MIB
        assert out.code("alloc:1500m") == CUDA_ERROR_OUT_OF_MEMORY
        probe.region.unlink()


def test_a_short_region_file_is_refused(probe: Probe) -> None:
    probe.region.write_bytes(b"VSLICERG")
    out = probe.run(
        "ctx:0",
        "alloc:2g",
        CUDA_DEVICE_MEMORY_LIMIT="1g",
        CUDA_DEVICE_MEMORY_SHARED_CACHE=str(probe.region),
    )
    assert out.code("alloc:2g") == CUDA_ERROR_OUT_OF_MEMORY
    _one_line(out.stderr, "too short")
    with pytest.raises(RegionError, match="bytes"):
        open_region(probe.region)


def test_a_missing_region_is_a_clear_reader_error(probe: Probe) -> None:
    with pytest.raises(RegionError, match="cannot open region"):
        open_region(probe.tmp / "nothing")


def test_an_unknown_log_level_is_reported_once(probe: Probe) -> None:
    out = probe.run("ctx:0", "alloc:1m", VSLICE_LOG_LEVEL="chatty")
    _one_line(out.stderr, "VSLICE_LOG_LEVEL='chatty'")


def test_info_logging_explains_a_refusal(probe: Probe) -> None:
    out = probe.run("ctx:0", "alloc:2g", CUDA_DEVICE_MEMORY_LIMIT="1g", VSLICE_LOG_LEVEL="info")
    _one_line(out.stderr, "refused", "slice")
