"""The shared region: processes of one container share one slice; the memory of a process
that was SIGKILLed comes back; the monitor's reader sees devices and processes."""

from __future__ import annotations

import signal
import subprocess

from conftest import GIB, MIB, Outcome, Probe
from vslice_shim import open_region

CUDA_SUCCESS = 0
CUDA_ERROR_OUT_OF_MEMORY = 2


def _container(probe: Probe, **extra: str) -> dict[str, str]:
    return {
        "CUDA_DEVICE_MEMORY_LIMIT": "1g",
        "CUDA_DEVICE_MEMORY_SHARED_CACHE": str(probe.region),
        **extra,
    }


def _hold(probe: Probe, *commands: str, **env: str) -> subprocess.Popen[str]:
    return probe.hold(*commands, **env)


def test_processes_of_a_container_share_one_limit(probe: Probe) -> None:
    env = _container(probe)
    holder = _hold(probe, "ctx:0", "alloc:600m", **env)
    try:
        out = probe.run("ctx:0", "alloc:500m", "alloc:400m", "info", **env)
        assert out.code("alloc:500m") == CUDA_ERROR_OUT_OF_MEMORY
        assert out.code("alloc:400m") == CUDA_SUCCESS
        assert out.values("info") == {"free": 24 * MIB, "total": GIB}
    finally:
        holder.kill()
        holder.wait()


def test_memory_of_a_sigkilled_process_comes_back(probe: Probe) -> None:
    env = _container(probe)
    holder = _hold(probe, "ctx:0", "alloc:900m", **env)
    blocked = probe.run("ctx:0", "alloc:500m", **env)
    assert blocked.code("alloc:500m") == CUDA_ERROR_OUT_OF_MEMORY
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    out = probe.run("ctx:0", "alloc:500m", "info", **env)
    assert out.code("alloc:500m") == CUDA_SUCCESS
    assert out.values("info")["free"] == GIB - 500 * MIB


def test_the_reader_sees_devices_and_live_processes(probe: Probe) -> None:
    env = _container(probe, CUDA_DEVICE_SM_LIMIT="40", VSLICE_CONTEXT_OVERHEAD="10m")
    holder = _hold(probe, "ctx:0", "alloc:100m", **env)
    try:
        with open_region(probe.region) as region:
            snap = region.snapshot()
        assert snap.version == (1, 0)
        (device,) = snap.devices
        assert device.index == 0
        assert device.uuid.startswith("GPU-56534c46-")
        assert device.memory_limit == GIB
        assert device.sm_limit == 40
        assert device.memory_used == 110 * MIB
        (process,) = snap.processes
        assert process.pid == holder.pid
        assert process.memory_used[0] == 110 * MIB
        assert process.context_memory[0] == 10 * MIB
    finally:
        holder.kill()
        holder.wait()


def test_a_process_that_exits_gives_its_slot_back(probe: Probe) -> None:
    env = _container(probe)
    probe.run("ctx:0", "alloc:100m", **env)
    with open_region(probe.region) as region:
        snap = region.snapshot()
    assert snap.processes == ()
    assert snap.devices[0].memory_used == 0


def test_the_region_file_is_writable_by_every_user_of_the_container(probe: Probe) -> None:
    probe.run("ctx:0", "alloc:1m", **_container(probe))
    assert probe.region.stat().st_mode & 0o777 == 0o666


def test_processes_allocating_at_once_never_exceed_the_slice(probe: Probe) -> None:
    # The fake card is exactly as large as the slice: any allocation the shim let through
    # beyond the slice would be refused by the driver instead, without the shim's log line.
    env = _container(probe, CUDA_DEVICE_MEMORY_LIMIT="64m", VSLICE_CONTEXT_OVERHEAD="0")
    env |= {"FAKE_CUDA_TOTAL_MEM": "64m", "VSLICE_LOG_LEVEL": "info"}
    workers = [probe.start("ctx:0", "stress:4:500:40m", **env) for _ in range(4)]
    refused_total = 0
    for worker in workers:
        stdout, stderr = worker.communicate(timeout=120)
        stress = Outcome(worker.returncode, stdout, stderr).values("stress")
        assert stress["failures"] == 0, stdout + stderr
        assert stress["refused"] == stderr.count("refused: beyond the memory slice")
        refused_total += stress["refused"]
    assert refused_total > 0  # the slice was really contended
    with open_region(probe.region) as region:
        snap = region.snapshot()
    assert snap.devices[0].memory_used == 0


def test_a_process_killed_while_holding_the_lock_leaves_consistent_accounts(
    probe: Probe,
) -> None:
    env = _container(probe)
    holder = _hold(probe, "ctx:0", "alloc:100m", **env)
    try:
        killed = subprocess.run(
            [str(probe.build / "tests" / "die_holding_lock"), str(probe.region)],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert killed.returncode == -signal.SIGKILL
        assert killed.stdout.strip() == "locked"
        out = probe.run("ctx:0", "alloc:950m", "info", **env, timeout=30)
        assert out.code("alloc:950m") == CUDA_ERROR_OUT_OF_MEMORY  # holder's 100m still count
        assert out.values("info")["free"] == GIB - 100 * MIB
        with open_region(probe.region) as region:
            snap = region.snapshot()
        assert snap.lock_recoveries == 1
        assert snap.devices[0].memory_used == 100 * MIB
    finally:
        holder.kill()
        holder.wait()


def test_an_nvml_reader_takes_no_process_slot(probe: Probe) -> None:
    env = _container(probe)
    holder = _hold(probe, "ctx:0", "alloc:100m", **env)
    try:
        reader = _hold(probe, "nvml", **env)
        with open_region(probe.region) as region:
            pids = [p.pid for p in region.snapshot().processes]
        reader.kill()
        reader.wait()
        assert pids == [holder.pid]
    finally:
        holder.kill()
        holder.wait()
