"""Memory slices: every allocation path is charged, the slice is enforced before the driver
is asked, and cuMemGetInfo / cuDeviceTotalMem / NVML report the slice."""

from __future__ import annotations

import pytest
from conftest import GIB, MIB, Probe

CUDA_SUCCESS = 0
CUDA_ERROR_OUT_OF_MEMORY = 2


def test_allocation_beyond_the_slice_fails_with_out_of_memory(probe: Probe) -> None:
    out = probe.run(
        "ctx:0", "alloc:700m", "alloc:400m", "alloc:300m", CUDA_DEVICE_MEMORY_LIMIT="1g"
    )
    assert out.code("alloc:700m") == CUDA_SUCCESS
    assert out.code("alloc:400m") == CUDA_ERROR_OUT_OF_MEMORY
    assert out.code("alloc:300m") == CUDA_SUCCESS


def test_refused_allocation_never_reaches_the_driver(probe: Probe) -> None:
    # the fake device has 2 GiB; after the refusal it must still have all of it free
    out = probe.run(
        "ctx:0", "alloc:1g", "nvml", FAKE_CUDA_TOTAL_MEM="2g", CUDA_DEVICE_MEMORY_LIMIT="512m"
    )
    assert out.code("alloc:1g") == CUDA_ERROR_OUT_OF_MEMORY
    unlimited = probe.run("ctx:0", "nvml", shim=False, FAKE_CUDA_TOTAL_MEM="2g")
    assert unlimited.nvml(0)["used"] == 0


@pytest.mark.parametrize(
    ("command", "charged"),
    [
        ("alloc:64m", 64 * MIB),
        ("managed:64m", 64 * MIB),
        ("async:64m", 64 * MIB),
        ("pool:64m", 64 * MIB),
        ("pitch:1000:65536", 1024 * 65536),
        ("vmm:64m", 64 * MIB),
        ("array:2048:2048", 2048 * 2048 * 16),
        ("array3d:256:256:64", 256 * 256 * 64 * 16),
        ("mipmap:2048:2048:3", (2048 * 2048 + 1024 * 1024 + 512 * 512) * 16),
        ("procaddr:64m", 64 * MIB),
        ("procaddr_linked:64m", 64 * MIB),
    ],
)
def test_every_allocation_path_is_charged_and_freed(
    probe: Probe, command: str, charged: int
) -> None:
    out = probe.run("ctx:0", "info", command, "info", "free", "info", CUDA_DEVICE_MEMORY_LIMIT="1g")
    assert out.code(command) == CUDA_SUCCESS
    before, during, after = (out.values("info", n)["free"] for n in range(3))
    assert before == GIB
    assert before - during == charged
    assert after == before


@pytest.mark.parametrize(
    "command",
    [
        "alloc:2g",
        "managed:2g",
        "async:2g",
        "pool:2g",
        "vmm:2g",
        "procaddr:2g",
        "procaddr_linked:2g",
    ],
)
def test_every_allocation_path_is_refused_beyond_the_slice(probe: Probe, command: str) -> None:
    out = probe.run("ctx:0", command, CUDA_DEVICE_MEMORY_LIMIT="1g")
    assert out.code(command) == CUDA_ERROR_OUT_OF_MEMORY


def test_mem_get_info_reports_the_slice_and_never_underflows(probe: Probe) -> None:
    out = probe.run(
        "ctx:0",
        "alloc:300m",
        "info",
        CUDA_DEVICE_MEMORY_LIMIT="256m",  # context overhead alone fills the slice
        VSLICE_CONTEXT_OVERHEAD="512m",
        FAKE_CUDA_CONTEXT_MEM="512m",
    )
    assert out.code("alloc:300m") == CUDA_ERROR_OUT_OF_MEMORY
    assert out.code("info") == CUDA_SUCCESS
    assert out.values("info") == {"free": 0, "total": 256 * MIB}


def test_context_overhead_is_charged_once_per_process(probe: Probe) -> None:
    out = probe.run(
        "ctx:0",
        "info",
        "ctx:0",
        "info",
        CUDA_DEVICE_MEMORY_LIMIT="1g",
        VSLICE_CONTEXT_OVERHEAD="100m",
    )
    assert out.values("info", 0)["free"] == GIB - 100 * MIB
    assert out.values("info", 1)["free"] == GIB - 100 * MIB


def test_context_overhead_is_measured_by_default(probe: Probe) -> None:
    # the fake driver takes 300 MiB of the card per context, as a real one takes a few hundred
    out = probe.run(
        "ctx:0",
        "info",
        "alloc:800m",
        CUDA_DEVICE_MEMORY_LIMIT="1g",
        CUDA_DEVICE_MEMORY_SHARED_CACHE=str(probe.region),
        FAKE_CUDA_CONTEXT_MEM="300m",
    )
    assert out.values("info")["free"] == GIB - 300 * MIB
    assert out.code("alloc:800m") == CUDA_ERROR_OUT_OF_MEMORY


def test_context_overhead_can_be_turned_off(probe: Probe) -> None:
    out = probe.run(
        "ctx:0",
        "info",
        CUDA_DEVICE_MEMORY_LIMIT="1g",
        FAKE_CUDA_CONTEXT_MEM="300m",
        VSLICE_CONTEXT_OVERHEAD="0",
    )
    assert out.values("info")["free"] == GIB


def test_device_total_memory_is_the_slice(probe: Probe) -> None:
    out = probe.run("ctx:0", "total:0", CUDA_DEVICE_MEMORY_LIMIT="3000m")
    assert out.values("total:0")["bytes"] == 3000 * MIB


def test_nvml_reports_the_slice_and_the_container_usage(probe: Probe) -> None:
    out = probe.run(
        "ctx:0",
        "alloc:100m",
        "nvml",
        CUDA_DEVICE_MEMORY_LIMIT="1g",
        CUDA_DEVICE_MEMORY_SHARED_CACHE=str(probe.region),
    )
    nvml = out.nvml(0)
    assert nvml["total"] == nvml["total2"] == GIB
    assert nvml["used"] == nvml["used2"] == 100 * MIB
    assert nvml["free"] == nvml["free2"] == GIB - 100 * MIB


def test_nvml_shows_the_slice_before_any_cuda_process_ran(probe: Probe) -> None:
    out = probe.run("nvml", CUDA_DEVICE_MEMORY_LIMIT="2g")
    assert out.nvml(0)["total"] == 2 * GIB
    assert out.nvml(0)["free"] == 2 * GIB


def test_per_index_limits_follow_cuda_visible_devices(probe: Probe) -> None:
    # four fake GPUs; the container sees physical 3 and 1 as CUDA devices 0 and 1
    env = {
        "FAKE_CUDA_DEVICE_COUNT": "4",
        "CUDA_VISIBLE_DEVICES": "3,1",
        "CUDA_DEVICE_MEMORY_LIMIT_0": "1g",
        "CUDA_DEVICE_MEMORY_LIMIT_1": "2g",
        "CUDA_DEVICE_MEMORY_SHARED_CACHE": str(probe.region),
    }
    out = probe.run("ctx:0", "info", "alloc:1500m", "ctx:1", "info", "alloc:1500m", "nvml", **env)
    assert out.values("info", 0)["total"] == GIB
    assert out.code("alloc:1500m", 0) == CUDA_ERROR_OUT_OF_MEMORY
    assert out.values("info", 1)["total"] == 2 * GIB
    assert out.code("alloc:1500m", 1) == CUDA_SUCCESS
    # NVML lists all four physical devices: 3 has the 1 GiB slice, 1 the 2 GiB slice
    assert out.nvml(3)["total"] == GIB
    assert out.nvml(1)["total"] == 2 * GIB
    assert out.nvml(1)["used"] == 1500 * MIB
    assert out.nvml(0)["total"] == 16 * GIB  # not this container's: unchanged


def test_a_global_limit_applies_to_every_device(probe: Probe) -> None:
    out = probe.run("ctx:1", "info", FAKE_CUDA_DEVICE_COUNT="2", CUDA_DEVICE_MEMORY_LIMIT="512m")
    assert out.values("info")["total"] == 512 * MIB


def test_many_threads_allocating_at_once_keep_the_accounts_exact(probe: Probe) -> None:
    out = probe.run(
        "ctx:0",
        "stress:16:400:40m",
        "info",
        CUDA_DEVICE_MEMORY_LIMIT="64m",  # two threads holding 40 MiB at once do not fit
        CUDA_DEVICE_MEMORY_SHARED_CACHE=str(probe.region),
        timeout=120,
    )
    stress = out.values("stress")
    assert stress["failures"] == 0
    assert stress["refused"] > 0
    assert out.values("info") == {"free": 64 * MIB, "total": 64 * MIB}


def test_pinned_host_memory_does_not_count_against_the_slice(probe: Probe) -> None:
    out = probe.run(
        "ctx:0", "host:2g", "pinned:2g", "info", "alloc:1g", "nvml", CUDA_DEVICE_MEMORY_LIMIT="1g"
    )
    assert (out.code("host:2g"), out.code("pinned:2g")) == (CUDA_SUCCESS, CUDA_SUCCESS)
    assert out.values("info")["free"] == GIB  # host memory leaves the slice untouched
    assert out.code("alloc:1g") == CUDA_SUCCESS
    assert out.nvml(0)["used"] == GIB


def test_allocations_from_a_created_pool_count_against_the_slice(probe: Probe) -> None:
    out = probe.run(
        "ctx:0",
        "mkpool:0",
        "cpool:600m",
        "cpool:600m",
        "info",
        "free",
        "info",
        CUDA_DEVICE_MEMORY_LIMIT="1g",
    )
    assert out.code("cpool:600m", 0) == CUDA_SUCCESS
    assert out.code("cpool:600m", 1) == CUDA_ERROR_OUT_OF_MEMORY
    assert out.values("info", 0)["free"] == GIB - 600 * MIB
    assert out.values("info", 1)["free"] == GIB
