"""What users run in a slice, on the fake driver with the shim preloaded: NVIDIA's own Python
bindings (``nvidia-ml-py``'s pynvml, ``cuda-bindings``) and the process viewers built on them
(``gpustat``, ``nvitop``), installed from PyPI with the ``dev`` extra.

The fake must answer every entry point these programs call, or they fail (gpustat did) or
take another path than on a real driver. Every NVML lookup they make goes through pynvml's one
resolver, which ``tests/workloads/nvml_trace`` wraps to record each name and whether the
library had it; CUDA entry points go through cuda-bindings' table, which raises
FunctionNotFoundError when the driver lacks one that is called."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import GIB, MIB, Probe

BIN = Path(sys.executable).parent
WORKLOADS = Path(__file__).resolve().parents[1] / "workloads"
ALLOC_PATHS = WORKLOADS / "alloc_paths.py"
TRACER = WORKLOADS / "nvml_trace"  # a sitecustomize recording pynvml's lookups

# What the programs above called on the day this list was written (pynvml 13.615, gpustat 1.1,
# nvitop 1.7): each must be exported by the fake. A name they start calling shows up as missing
# in the test below, whether or not it is listed here.
NVML_CALLED = (
    "nvmlDeviceGetComputeMode",
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetConfComputeMemSizeInfo",
    "nvmlDeviceGetCount_v2",
    "nvmlDeviceGetDecoderUtilization",
    "nvmlDeviceGetDisplayActive",
    "nvmlDeviceGetEncoderUtilization",
    "nvmlDeviceGetEnforcedPowerLimit",
    "nvmlDeviceGetFanSpeed",
    "nvmlDeviceGetGraphicsRunningProcesses_v3",
    "nvmlDeviceGetHandleByIndex_v2",
    "nvmlDeviceGetIndex",
    "nvmlDeviceGetMemoryInfo_v2",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetName",
    "nvmlDeviceGetPciInfo_v3",
    "nvmlDeviceGetPerformanceState",
    "nvmlDeviceGetPersistenceMode",
    "nvmlDeviceGetPowerManagementLimit",
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetRunningProcessDetailList",
    "nvmlDeviceGetTemperatureV",
    "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceIsMigDeviceHandle",
    "nvmlInitWithFlags",
    "nvmlShutdown",
    "nvmlSystemGetCudaDriverVersion",
    "nvmlSystemGetDriverVersion",
)


def _env(probe: Probe, trace: Path, *, shim: bool, **extra: str) -> dict[str, str]:
    return probe.env(
        shim,
        PYTHONPATH=str(TRACER),
        VSLICE_TEST_NVML_TRACE=str(trace),
        FAKE_CUDA_DEVICE_COUNT="2",
        FAKE_CUDA_TOTAL_MEM="8g",
        CUDA_DEVICE_MEMORY_LIMIT="2g",
        CUDA_DEVICE_MEMORY_SHARED_CACHE=str(probe.region),
        VSLICE_CONTEXT_OVERHEAD="0",
        COLUMNS="120",
        **extra,
    )


def _run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"{argv[0]}: {result.stdout}\n{result.stderr}"
    return result


def _lookups(trace: Path) -> dict[str, bool]:
    seen: dict[str, bool] = {}
    for line in trace.read_text().splitlines():
        name, found = line.split()
        seen[name] = seen.get(name, True) and found == "1"
    return seen


def _fake_exports(probe: Probe) -> set[str]:
    out = subprocess.run(
        ["nm", "-D", "--defined-only", str(probe.build / "fake" / "libnvidia-ml.so.1")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {line.split()[-1] for line in out.splitlines() if " T " in line}


def _tools(probe: Probe, trace: Path, *, shim: bool) -> tuple[dict[str, object], str]:
    env = _env(probe, trace, shim=shim)
    gpustat = json.loads(_run([str(BIN / "gpustat"), "--json", "-a"], env).stdout)
    nvitop = _run([str(BIN / "nvitop"), "-1"], env).stdout
    return gpustat, nvitop


@pytest.mark.parametrize("shim", [False, True], ids=["driver", "shim"])
def test_the_tools_call_no_nvml_entry_point_the_fake_lacks(probe: Probe, shim: bool) -> None:
    trace = probe.tmp / "nvml-trace"
    _tools(probe, trace, shim=shim)
    seen = _lookups(trace)
    missing = sorted(name for name, found in seen.items() if not found)
    assert missing == [], f"the tools call NVML entry points the fake lacks: {missing}"
    # The tracer saw the calls (a broken one would see none and prove nothing).
    assert {"nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetPciInfo_v3"} <= set(seen)
    assert sorted(set(NVML_CALLED) - _fake_exports(probe)) == []


def test_gpustat_and_nvitop_show_the_slice_and_the_containers_process(probe: Probe) -> None:
    holder = probe.hold("ctx:0", "alloc:512m", **_env(probe, probe.tmp / "t", shim=True))
    try:
        gpustat, nvitop = _tools(probe, probe.tmp / "nvml-trace", shim=True)
    finally:
        holder.kill()
        holder.wait()
    first = gpustat["gpus"][0]  # type: ignore[index]
    assert (first["memory.total"], first["memory.used"]) == (2048, 512)
    assert [(p["pid"], p["gpu_memory_usage"]) for p in first["processes"]] == [(holder.pid, 512)]
    assert "512.0MiB / 2048MiB" in nvitop
    assert re.search(rf"\b{holder.pid} C ", nvitop), nvitop  # the holder, as a compute process
    assert "00000000:18:00.0" in nvitop


def test_cuda_bindings_are_stopped_at_the_slice_on_every_allocation_path(probe: Probe) -> None:
    env = _env(probe, probe.tmp / "t", shim=True)
    script = [sys.executable, str(ALLOC_PATHS), "1536", "1024"]
    sliced = json.loads(_run(script, env).stdout)
    assert sliced == {
        "total": 2 * GIB,
        "granularity": 2 * MIB,
        "cuMemAlloc": "CUDA_ERROR_OUT_OF_MEMORY",
        "cuMemAllocAsync": "CUDA_ERROR_OUT_OF_MEMORY",
        "cuMemAllocManaged": "CUDA_ERROR_OUT_OF_MEMORY",
        "cuMemCreate": "CUDA_ERROR_OUT_OF_MEMORY",
    }
    # The same program on the bare fake card: everything fits, so the limit above is the
    # shim's, and the VMM sequence (reserve, map, set access, copy) runs to its end.
    whole = json.loads(_run(script, _env(probe, probe.tmp / "t", shim=False)).stdout)
    assert whole == {"total": 8 * GIB, "granularity": 2 * MIB}


def test_the_process_detail_list_shows_the_containers_processes(probe: Probe) -> None:
    script = textwrap.dedent(
        """
        import json, pynvml
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        rows = {}
        for mode in ("COMPUTE", "GRAPHICS", "MPS", "ALL"):
            mode_value = getattr(pynvml, "NVML_PROCESS_MODE_" + mode)
            listed = pynvml.nvmlDeviceGetRunningProcessDetailList(
                handle, pynvml.nvmlProcessDetailList_v1, mode_value)
            rows[mode] = [[p.pid, p.usedGpuMemory, p.gpuInstanceId] for p in listed]
        print(json.dumps(rows))
        """
    )
    env = _env(probe, probe.tmp / "t", shim=True)
    holder = probe.hold("ctx:0", "alloc:256m", **env)
    try:
        sliced = json.loads(_run([sys.executable, "-c", script], env).stdout)
        bare = json.loads(_run([sys.executable, "-c", script], {**env, "LD_PRELOAD": ""}).stdout)
    finally:
        holder.kill()
        holder.wait()
    mine = [[holder.pid, 256 * MIB, 0xFFFFFFFF]]
    assert sliced == {"COMPUTE": mine, "GRAPHICS": [], "MPS": [], "ALL": mine}
    # The driver alone lists a host PID the container cannot see (shim/fake/nvml.c).
    host = [[4_000_000, 256 * MIB, 0xFFFFFFFF]]
    assert bare == {"COMPUTE": host, "GRAPHICS": [], "MPS": [], "ALL": host}


def test_the_fake_board_agrees_with_its_driver_and_keeps_nvmls_contract(probe: Probe) -> None:
    script = textwrap.dedent(
        """
        import json, pynvml
        from cuda.bindings import driver as cu
        A = cu.CUdevice_attribute
        cu.cuInit(0)
        dev = cu.cuDeviceGet(1)[1]
        attr = lambda a: cu.cuDeviceGetAttribute(a, dev)[1]
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(1)
        def code(call, *args):
            try:
                call(*args)
                return "ok"
            except pynvml.NVMLError as e:
                return type(e).__name__
        bad_version = pynvml.c_nvmlTemperature_v1_t()
        bad_version.version = 7
        bad_version.sensorType = 0
        fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetTemperatureV")
        pci = pynvml.nvmlDeviceGetPciInfo_v3(h)
        print(json.dumps({
            "bus": [pci.bus, attr(A.CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)],
            "busId": [pci.busId, pci.busIdLegacy],
            "cc": [list(pynvml.nvmlDeviceGetCudaComputeCapability(h)),
                   [attr(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
                    attr(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)]],
            "sm_mhz": [pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                       attr(A.CU_DEVICE_ATTRIBUTE_CLOCK_RATE) // 1000],
            "mem_mhz": [pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_MEM),
                        attr(A.CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE) // 1000],
            "cuda": [pynvml.nvmlSystemGetCudaDriverVersion(), cu.cuDriverGetVersion()[1]],
            "idle": [pynvml.nvmlDeviceGetPowerUsage(h), pynvml.nvmlDeviceGetTemperature(h, 0),
                     pynvml.nvmlDeviceGetPerformanceState(h)],
            "fan": code(pynvml.nvmlDeviceGetFanSpeed, h),
            "sensor": code(pynvml.nvmlDeviceGetTemperature, h, 1),
            "clock": code(pynvml.nvmlDeviceGetClockInfo, h, 9),
            "ecc": code(pynvml.nvmlDeviceGetTotalEccErrors, h, 2, 0),
            "version": fn(h, pynvml.byref(bad_version)),
            "graphics": pynvml.nvmlDeviceGetGraphicsRunningProcesses(h),
        }))
        """
    )
    env = _env(probe, probe.tmp / "t", shim=False)
    board = json.loads(_run([sys.executable, "-c", script], env).stdout)
    assert board == {
        "bus": [0x19, 0x19],  # physical 1: the second card of the node
        "busId": ["00000000:19:00.0", "0000:19:00.0"],
        "cc": [[9, 0], [9, 0]],
        "sm_mhz": [1000, 1000],
        "mem_mhz": [2619, 2619],
        "cuda": [12080, 12080],
        "idle": [70000, 32, 8],
        "fan": "NVMLError_NotSupported",
        "sensor": "NVMLError_InvalidArgument",
        "clock": "NVMLError_InvalidArgument",
        "ecc": "NVMLError_InvalidArgument",
        "version": 25,  # NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        "graphics": [],
    }


def test_a_busy_fake_card_draws_more_power_and_runs_in_p0(probe: Probe) -> None:
    env = _env(probe, probe.tmp / "t", shim=False)
    script = textwrap.dedent(
        """
        import json, pynvml, time
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        time.sleep(1.0)  # a full second of the kernels below in the sampling window
        print(json.dumps([pynvml.nvmlDeviceGetUtilizationRates(h).gpu,
                          pynvml.nvmlDeviceGetPowerUsage(h),
                          pynvml.nvmlDeviceGetTemperature(h, 0),
                          pynvml.nvmlDeviceGetPerformanceState(h)]))
        """
    )
    busy = probe.start("ctx:0", "kernels:3:2000", shim=False, **env)
    try:
        util, power, temperature, pstate = json.loads(
            _run([sys.executable, "-c", script], env).stdout
        )
    finally:
        busy.kill()
        busy.wait()
    assert util >= 90
    assert power >= 70_000 + (700_000 - 70_000) // 100 * 90
    assert temperature >= 32 + (68 - 32) * 90 // 100
    assert pstate == 0
