"""Every documented way of reaching the driver's entry points meets the shim: a process in a
1 GiB slice of an 8 GiB card cannot allocate 2 GiB, whichever route it takes to the driver's
allocation function (shim/tests/escape.c tries each one; docs/security.md lists them)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import Probe

SLICE = {"FAKE_CUDA_TOTAL_MEM": "8g", "CUDA_DEVICE_MEMORY_LIMIT": "1g"}
OUT_OF_MEMORY = "2"
# The fake driver built with a version on every symbol (shim/tests/lib/versioned_driver.map).
DRIVER_VERSION = "VSLICE_FAKE_DRIVER_1"


def escape(probe: Probe, *routes: str, shim: bool = True, driver: str = "fake") -> list[list[str]]:
    """Runs build/tests/escape with a 1 GiB slice; one "<route> <CUresult> <who>" per route."""
    env = probe.env(shim, **SLICE)
    if driver == "versioned":
        env["LD_LIBRARY_PATH"] = f"{probe.build / 'tests' / 'versioned'}:{env['LD_LIBRARY_PATH']}"
    result = subprocess.run(
        [str(probe.build / "tests" / "escape"), *routes],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = [line.split() for line in result.stdout.splitlines()]
    assert len(lines) == len(routes), result.stdout + result.stderr
    return lines


def stopped(route: str) -> list[str]:
    return [route, OUT_OF_MEMORY, "shim"]


ROUTES = [
    "dlsym:2g",
    "deepbind:2g",
    "libc_dlsym:2g",
    "libc_dlvsym:2g",
    "dlmopen:2g",
    "procaddr:2g",
    "procaddr_v2:2g",
    "procaddr_ptsz:2g",
]


def test_without_the_shim_each_route_allocates_beyond_the_slice(probe: Probe) -> None:
    # What the routes are tried against: with nothing in between they reach the driver.
    lines = escape(probe, *ROUTES, shim=False)
    assert lines == [[route.split(":")[0], "0", "driver"] for route in ROUTES]


@pytest.mark.parametrize("route", ["dlsym:2g", "deepbind:2g"])
def test_a_driver_looked_up_with_dlsym_is_stopped_at_the_slice(probe: Probe, route: str) -> None:
    # RTLD_DEEPBIND changes what the driver binds to, not what the program's dlsym returns.
    assert escape(probe, route) == [stopped(route.split(":")[0])]


def test_a_lookup_by_dlvsym_with_the_drivers_own_version_is_stopped_at_the_slice(
    probe: Probe,
) -> None:
    lines = escape(probe, f"dlvsym:{DRIVER_VERSION}:2g", driver="versioned")
    assert lines == [stopped("dlvsym")]


def test_a_lookup_by_dlvsym_with_a_version_the_driver_lacks_finds_nothing(probe: Probe) -> None:
    # NVIDIA's libraries carry no symbol versions: glibc finds nothing, and neither does the shim.
    assert escape(probe, "dlvsym:GLIBC_2.34:2g") == [["dlvsym", "-1", "none"]]
    assert escape(probe, "dlvsym:GLIBC_2.34:2g", driver="versioned") == [["dlvsym", "-1", "none"]]


@pytest.mark.parametrize("route", ["libc_dlsym:2g", "libc_dlvsym:2g"])
def test_glibcs_own_dlsym_looked_up_by_name_is_stopped_at_the_slice(
    probe: Probe, route: str
) -> None:
    # dlsym(libc, "dlsym") and dlvsym(libc, "dlsym", "GLIBC_2.34") hand out the shim's dlsym.
    assert escape(probe, route) == [stopped(route.split(":")[0])]


def test_a_driver_loaded_into_a_new_namespace_with_dlmopen_is_stopped_at_the_slice(
    probe: Probe,
) -> None:
    # The new namespace's own libc would look the driver up past the shim: the driver is loaded
    # into the base namespace instead, where every lookup meets the shim.
    assert escape(probe, "dlmopen:2g") == [stopped("dlmopen")]


def test_a_copy_of_the_driver_under_another_name_loaded_with_dlmopen_is_stopped_at_the_slice(
    probe: Probe,
) -> None:
    copy = probe.tmp / "libgpu.so"
    shutil.copy(probe.build / "fake" / "libcuda.so.1", copy)
    assert escape(probe, f"dlmopen_path:{copy}:2g") == [stopped("dlmopen_path")]


def test_dlmopen_of_the_driver_by_path_into_a_new_namespace_gives_a_base_namespace_handle(
    probe: Probe,
) -> None:
    driver = probe.build / "fake" / "libcuda.so.1"
    nvml = probe.build / "fake" / "libnvidia-ml.so.1"
    lines = escape(probe, f"namespace:{driver}", f"namespace:{nvml}", "namespace:libcuda.so.1")
    assert lines == [["namespace", "0", "new=0", "error=0"]] * 3


def test_dlmopen_of_a_library_without_the_driver_keeps_its_new_namespace(probe: Probe) -> None:
    # and the shim's look at what was loaded leaves no error for dlerror() to report
    assert escape(probe, "namespace:libm.so.6") == [["namespace", "0", "new=1", "error=0"]]


@pytest.mark.parametrize("route", ["procaddr:2g", "procaddr_v2:2g", "procaddr_ptsz:2g"])
def test_a_driver_function_from_cu_get_proc_address_is_stopped_at_the_slice(
    probe: Probe, route: str
) -> None:
    assert escape(probe, route) == [stopped(route.split(":")[0])]


def test_an_allocation_within_the_slice_through_each_route_still_succeeds(probe: Probe) -> None:
    routes = [route.replace("2g", "512m") for route in ROUTES]
    assert escape(probe, *routes) == [[route.split(":")[0], "0", "shim"] for route in routes]


def test_the_shim_exports_its_own_dlsym_dlvsym_and_dlmopen(shim_build: Path) -> None:
    out = subprocess.run(
        ["nm", "-D", "--defined-only", str(shim_build / "libvslice.so")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    exported = {line.split()[-1] for line in out.splitlines()}
    assert {"dlsym", "dlvsym", "dlmopen"} <= exported
