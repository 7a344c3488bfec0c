"""Compute slices: launches are paced so the container's device busy time tracks the limit.

Busy time is measured on the fake driver's device timeline (when each simulated kernel ran),
not from host CPU time, so a loaded test machine does not change the answer."""

from __future__ import annotations

import pytest
from conftest import Probe, busy_fraction
from vslice_shim import open_region

WINDOW_NS = 2_000_000_000
WARMUP_NS = 500_000_000


def _window(start: int) -> tuple[int, int]:
    return start + WARMUP_NS, start + WARMUP_NS + WINDOW_NS


def test_a_30_percent_limit_keeps_the_device_busy_30_percent(probe: Probe) -> None:
    out = probe.run(
        "ctx:0",
        "kernels:3:2000",
        CUDA_DEVICE_SM_LIMIT="30",
        CUDA_DEVICE_MEMORY_SHARED_CACHE=str(probe.region),
    )
    start = out.values("kernels")["start"]
    busy = busy_fraction(probe.fake_state, 0, *_window(start))
    assert abs(busy * 100 - 30) <= 5, f"busy {busy:.1%}"


@pytest.mark.parametrize("api", ["ptsz", "ex", "coop"])
def test_every_launch_entry_point_is_paced(probe: Probe, api: str) -> None:
    out = probe.run(
        "ctx:0",
        f"kernels:3:2000:{api}",
        CUDA_DEVICE_SM_LIMIT="30",
        CUDA_DEVICE_MEMORY_SHARED_CACHE=str(probe.region),
    )
    assert out.code("kernels") == 0
    start = out.values("kernels")["start"]
    busy = busy_fraction(probe.fake_state, 0, *_window(start))
    assert abs(busy * 100 - 30) <= 5, f"{api}: busy {busy:.1%}"


def test_graph_launches_are_paced(probe: Probe) -> None:
    out = probe.run(
        "ctx:0",
        "graph:3:500:4",  # each launch runs four 0.5 ms kernels
        CUDA_DEVICE_SM_LIMIT="30",
        CUDA_DEVICE_MEMORY_SHARED_CACHE=str(probe.region),
    )
    assert out.code("graph") == 0
    busy = busy_fraction(probe.fake_state, 0, *_window(out.values("graph")["start"]))
    assert abs(busy * 100 - 30) <= 5, f"busy {busy:.1%}"


def test_processes_of_a_container_share_one_compute_limit(probe: Probe) -> None:
    env = {"CUDA_DEVICE_SM_LIMIT": "30", "CUDA_DEVICE_MEMORY_SHARED_CACHE": str(probe.region)}
    workers = [probe.start("ctx:0", "kernels:3:1000", **env) for _ in range(3)]
    starts = []
    for worker in workers:
        stdout, _ = worker.communicate(timeout=60)
        line = next(x for x in stdout.splitlines() if x.startswith("kernels"))
        starts.append(int(line.split("start=")[1].split()[0]))
    busy = busy_fraction(probe.fake_state, 0, *_window(max(starts)))
    assert abs(busy * 100 - 30) <= 5, f"busy {busy:.1%}"


def test_the_limiter_measures_busy_time_on_the_device(probe: Probe) -> None:
    probe.run(
        "ctx:0",
        "kernels:1:1000",
        CUDA_DEVICE_SM_LIMIT="50",
        CUDA_DEVICE_MEMORY_SHARED_CACHE=str(probe.region),
    )
    with open_region(probe.region) as region:
        device = region.snapshot().devices[0]
    assert device.sm_limit == 50
    # every launch is 1 ms; the measured busy time is what the launches took on the device
    assert abs(device.busy_ns - device.launches * 1_000_000) <= 1_000_000 * device.launches // 10
    assert device.throttled_ns > 0


def test_without_a_compute_limit_launches_are_not_paced(probe: Probe) -> None:
    out = probe.run(
        "ctx:0",
        "alloc:1m",
        "kernels:1:1000",
        CUDA_DEVICE_MEMORY_LIMIT="1g",
        CUDA_DEVICE_MEMORY_SHARED_CACHE=str(probe.region),
    )
    start = out.values("kernels")["start"]
    # the host syncs every 16 launches, so a loaded machine leaves some gaps; far above 30 %
    busy = busy_fraction(probe.fake_state, 0, start + 100_000_000, start + 900_000_000)
    assert busy > 0.5, f"busy {busy:.1%}"
    with open_region(probe.region) as region:
        device = region.snapshot().devices[0]
    assert (device.launches, device.throttled_ns) == (0, 0)


def test_a_per_device_compute_limit_applies_to_its_device_only(probe: Probe) -> None:
    env = {
        "FAKE_CUDA_DEVICE_COUNT": "2",
        "CUDA_DEVICE_SM_LIMIT_1": "20",
        "CUDA_DEVICE_MEMORY_SHARED_CACHE": str(probe.region),
    }
    fast = probe.run("ctx:0", "kernels:1:1000", **env)
    slow = probe.run("ctx:1", "kernels:3:1000", **env)
    start0 = fast.values("kernels")["start"]
    start1 = slow.values("kernels")["start"]
    assert busy_fraction(probe.fake_state, 0, start0 + 100_000_000, start0 + 900_000_000) > 0.5
    busy1 = busy_fraction(probe.fake_state, 1, *_window(start1))
    assert abs(busy1 * 100 - 20) <= 5, f"busy {busy1:.1%}"
