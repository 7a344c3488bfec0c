"""nvidia-smi's process list inside a container: NVML's running-process calls answer with the
container's own processes and the memory each holds, from the shared region."""

from __future__ import annotations

import signal
import subprocess

from conftest import MIB, Outcome, Probe

NVML_SUCCESS = 0
NVML_ERROR_INSUFFICIENT_SIZE = 7
NOT_MIG = 0xFFFFFFFF
FAKE_HOST_PID = 4_000_000  # the fake driver's stand-in for a host PID (shim/fake/nvml.c)


def _container(probe: Probe, **extra: str) -> dict[str, str]:
    return {
        "CUDA_DEVICE_MEMORY_LIMIT": "1g",
        "CUDA_DEVICE_MEMORY_SHARED_CACHE": str(probe.region),
        "VSLICE_CONTEXT_OVERHEAD": "0",  # so each process holds exactly what it allocated
        "FAKE_CUDA_DEVICE_COUNT": "2",
        **extra,
    }


def _hold(probe: Probe, *commands: str, shim: bool = True, **env: str) -> subprocess.Popen[str]:
    return probe.hold(*commands, shim=shim, **env)


def _stop(*holders: subprocess.Popen[str]) -> None:
    for holder in holders:
        holder.kill()
        holder.wait()


def _summary(out: Outcome, index: int) -> dict[str, int]:
    for nth in range(sum(line.startswith("procs ") for line in out.lines)):
        values = out.values("procs", nth)
        if values["index"] == index:
            return {"code": out.code("procs", nth), **values}
    raise AssertionError(f"no procs line for device {index}: {out.stdout}{out.stderr}")


def _listed(out: Outcome, index: int) -> dict[int, tuple[int, int, int]]:
    """pid -> (bytes, GPU instance, compute instance) listed for one device."""
    rows = [out.values("proc", nth) for nth in range(len(out.lines)) if _has(out, "proc", nth)]
    return {r["pid"]: (r["used"], r["gi"], r["ci"]) for r in rows if r["index"] == index}


def _has(out: Outcome, command: str, nth: int) -> bool:
    return sum(line.split()[:1] == [command] for line in out.lines) > nth


def test_the_containers_processes_are_listed_with_the_memory_each_holds(probe: Probe) -> None:
    env = _container(probe)
    small = _hold(probe, "ctx:0", "alloc:100m", **env)
    large = _hold(probe, "ctx:0", "alloc:300m", **env)
    try:
        out = probe.run("procs", **env)
        assert _listed(out, 0) == {
            small.pid: (100 * MIB, NOT_MIG, NOT_MIG),
            large.pid: (300 * MIB, NOT_MIG, NOT_MIG),
        }
        summary = _summary(out, 0)
        assert summary["code"] == NVML_SUCCESS and summary["count"] == 2
        # asking the size first (infoCount 0, infos NULL), as nvidia-smi does
        assert (summary["sizing"], summary["needed"]) == (NVML_ERROR_INSUFFICIENT_SIZE, 2)
        assert summary["agree"] == 1  # v1, v2 and v3 give the same list
        # the reader itself holds nothing and is not listed; other devices list nobody
        assert out.values("procs", 1)["count"] == 0
    finally:
        _stop(small, large)


def test_without_the_shim_the_driver_lists_a_pid_the_container_cannot_see(probe: Probe) -> None:
    env = _container(probe)
    holder = _hold(probe, "ctx:0", "alloc:100m", **env)
    try:
        out = probe.run("procs", shim=False, **env)
        assert set(_listed(out, 0)) == {FAKE_HOST_PID}  # what the shim replaces
    finally:
        _stop(holder)


def test_a_killed_process_leaves_the_list(probe: Probe) -> None:
    env = _container(probe)
    stays = _hold(probe, "ctx:0", "alloc:100m", **env)
    killed = _hold(probe, "ctx:0", "alloc:200m", **env)
    try:
        assert set(_listed(probe.run("procs", **env), 0)) == {stays.pid, killed.pid}
        killed.send_signal(signal.SIGKILL)
        killed.wait()
        assert set(_listed(probe.run("procs", **env), 0)) == {stays.pid}
    finally:
        _stop(stays, killed)


def test_devices_of_other_containers_keep_the_drivers_answer(probe: Probe) -> None:
    # Device 0 is busy with a process outside any container; this container sees device 1.
    outsider = _hold(probe, "ctx:0", "alloc:200m", shim=False, FAKE_CUDA_DEVICE_COUNT="2")
    try:
        out = probe.run("procs", **_container(probe, CUDA_VISIBLE_DEVICES="1"))
        assert _listed(out, 0) == {FAKE_HOST_PID: (200 * MIB, NOT_MIG, NOT_MIG)}
        ours = _summary(out, 1)
        # a device of the container that nobody uses: an empty list, not the driver's view
        assert (ours["code"], ours["count"], ours["sizing"]) == (NVML_SUCCESS, 0, NVML_SUCCESS)
    finally:
        _stop(outsider)


def test_without_a_region_file_the_driver_answers(probe: Probe) -> None:
    holder = _hold(probe, "ctx:0", "alloc:100m", CUDA_DEVICE_MEMORY_LIMIT="1g")
    try:
        out = probe.run("procs", CUDA_DEVICE_MEMORY_LIMIT="1g")
        assert set(_listed(out, 0)) == {FAKE_HOST_PID}
    finally:
        _stop(holder)


def test_a_too_small_array_gets_the_count_needed(probe: Probe) -> None:
    env = _container(probe)
    holders = [_hold(probe, "ctx:0", "alloc:10m", **env) for _ in range(3)]
    try:
        out = probe.run("procs", **env)
        summary = _summary(out, 0)
        assert (summary["small"], summary["one"]) == (NVML_ERROR_INSUFFICIENT_SIZE, 3)
        assert set(_listed(out, 0)) == {holder.pid for holder in holders}
    finally:
        _stop(*holders)
