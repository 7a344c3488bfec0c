"""The fake driver answers what real programs and other CUDA interposers call in a container:
NVML's v1 names, per-process utilisation, device attributes, memory pools and pinned host
memory, with the driver's contracts (sizing calls, error codes)."""

from __future__ import annotations

import time

import pytest
from conftest import GIB, MIB, Probe

CUDA_SUCCESS = 0
CUDA_ERROR_INVALID_VALUE = 1
CUDA_ERROR_OUT_OF_MEMORY = 2
NVML_SUCCESS = 0
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
FAKE_HOST_PID = 4_000_000  # the fake's stand-in for a host PID (shim/fake/nvml.c)


def test_nvml_v1_names_answer_like_their_v2_forms(probe: Probe) -> None:
    out = probe.run("nvmlv1", shim=False, FAKE_CUDA_DEVICE_COUNT="3")
    assert out.code("nvmlv1") == NVML_SUCCESS
    assert out.values("nvmlv1") == {
        "count": 3,
        "same": 1,
        "beyond": NVML_ERROR_INVALID_ARGUMENT,
    }


def test_process_utilization_reports_the_busy_device_with_the_sizing_contract(
    probe: Probe,
) -> None:
    out = probe.run("ctx:0", "kernels:1:1000", "putil:0", shim=False)
    sample = out.values("putil")
    assert out.code("putil") == NVML_SUCCESS
    # NULL buffer and a buffer of no room both get the count needed and INSUFFICIENT_SIZE
    assert (sample["sizing"], sample["needed"]) == (NVML_ERROR_INSUFFICIENT_SIZE, 1)
    assert (sample["small"], sample["none"]) == (NVML_ERROR_INSUFFICIENT_SIZE, 1)
    assert sample["count"] == 1
    assert sample["pid"] == FAKE_HOST_PID  # the driver's view from a container: a host PID
    assert sample["sm"] >= 50, sample  # kernels ran back to back during the last second
    assert abs(sample["ts"] - time.time() * 1e6) < 60e6  # CPU time in microseconds


def test_process_utilization_without_samples_is_not_found(probe: Probe) -> None:
    idle = probe.run("putil:0", shim=False)
    assert idle.code("putil") == NVML_ERROR_NOT_FOUND
    assert idle.values("putil")["sizing"] == NVML_ERROR_NOT_FOUND
    future = probe.run("ctx:0", "kernels:1:1000", f"putil:{int(time.time() * 1e6) + 10**9}")
    assert future.code("putil") == NVML_ERROR_NOT_FOUND  # nothing newer than lastSeenTimeStamp


@pytest.mark.parametrize(
    ("attribute", "value"),
    [
        (39, 2048),  # MAX_THREADS_PER_MULTIPROCESSOR: HAMi-core asks for it in cuInit
        (1, 1024),  # MAX_THREADS_PER_BLOCK
        (10, 32),  # WARP_SIZE
        (13, 1_000_000),  # CLOCK_RATE, kHz
        (16, 132),  # MULTIPROCESSOR_COUNT
        (75, 9),  # COMPUTE_CAPABILITY_MAJOR
        (76, 0),  # COMPUTE_CAPABILITY_MINOR
        (81, 233472),  # MAX_SHARED_MEMORY_PER_MULTIPROCESSOR
        (102, 1),  # VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
        (115, 1),  # MEMORY_POOLS_SUPPORTED
        (17, 0),  # KERNEL_EXEC_TIMEOUT: known to the driver, not a feature of the card
    ],
)
def test_device_attributes_have_plausible_values(probe: Probe, attribute: int, value: int) -> None:
    out = probe.run("ctx:0", f"attr:{attribute}", shim=False)
    assert out.code(f"attr:{attribute}") == CUDA_SUCCESS
    assert out.values(f"attr:{attribute}")["value"] == value


@pytest.mark.parametrize("attribute", [0, 100000])
def test_an_attribute_the_driver_does_not_know_is_invalid(probe: Probe, attribute: int) -> None:
    out = probe.run("ctx:0", f"attr:{attribute}", shim=False)
    assert out.code(f"attr:{attribute}") == CUDA_ERROR_INVALID_VALUE


def test_a_created_pool_reports_used_and_reserved_memory(probe: Probe) -> None:
    out = probe.run(
        "ctx:0",
        "mkpool:0",
        "getpool",
        "cpool:64m",
        "cpool:32m",
        "poolattr",
        "free",  # the 32m
        "poolattr",
        "threshold:1g",  # now freed memory stays reserved in the pool
        "free",  # the 64m
        "poolattr",
        "nvml",
        "resethigh",
        "poolattr",
        "rmpool",
        "nvml",
        shim=False,
    )
    assert out.code("mkpool:0") == CUDA_SUCCESS
    assert out.values("getpool") == {"made": 0, "default": 1}  # creating does not make it current
    attrs = [out.values("poolattr", n) for n in range(4)]
    assert out.code("poolattr") == CUDA_SUCCESS
    assert attrs[0] == {
        "used": 96 * MIB,
        "used_high": 96 * MIB,
        "reserved": 96 * MIB,
        "reserved_high": 96 * MIB,
        "threshold": 0,
        "reuse": 1,
    }
    assert (attrs[1]["used"], attrs[1]["reserved"], attrs[1]["used_high"]) == (
        64 * MIB,
        64 * MIB,
        96 * MIB,
    )
    assert (attrs[2]["used"], attrs[2]["reserved"], attrs[2]["threshold"]) == (0, 64 * MIB, GIB)
    assert out.values("nvml", 0)["used"] == 64 * MIB  # the card still holds the pool's reserve
    assert (attrs[3]["used_high"], attrs[3]["reserved_high"]) == (0, 64 * MIB)
    assert out.code("rmpool") == CUDA_SUCCESS
    assert out.values("nvml", 1)["used"] == 0  # destroying the pool gives its reserve back


def test_a_pools_maximum_size_is_enforced(probe: Probe) -> None:
    out = probe.run("ctx:0", "mkpool:64m", "cpool:48m", "cpool:32m", "cpool:16m", shim=False)
    assert out.code("cpool:48m") == CUDA_SUCCESS
    assert out.code("cpool:32m") == CUDA_ERROR_OUT_OF_MEMORY
    assert out.code("cpool:16m") == CUDA_SUCCESS


def test_async_allocations_come_from_the_devices_current_pool(probe: Probe) -> None:
    out = probe.run(
        "ctx:0",
        "mkpool:0",
        "setpool",
        "getpool",
        "async:16m",
        "poolattr",
        "rmpool",
        "getpool",
        shim=False,
    )
    assert out.code("setpool") == CUDA_SUCCESS
    assert out.values("getpool", 0) == {"made": 1, "default": 0}
    assert out.values("poolattr")["used"] == 16 * MIB
    assert out.code("rmpool") == CUDA_SUCCESS
    assert out.values("getpool", 1) == {"made": 0, "default": 1}  # back to the default pool


def test_pinned_host_memory_is_not_device_memory(probe: Probe) -> None:
    out = probe.run(
        "ctx:0",
        "host:3g",
        "pinned:2g",
        "info",
        "nvml",
        "free",
        "free",
        shim=False,
        FAKE_CUDA_TOTAL_MEM="4g",
    )
    assert (out.code("host:3g"), out.code("pinned:2g")) == (CUDA_SUCCESS, CUDA_SUCCESS)
    assert out.values("info")["free"] == 4 * GIB
    assert out.values("nvml")["used"] == 0
    assert out.code("free", 0) == out.code("free", 1) == CUDA_SUCCESS  # cuMemFreeHost
