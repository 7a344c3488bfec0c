"""Whole-GPU metrics through pynvml against the shim's fake libnvidia-ml.so.1 (child process),
and their units against an in-process stand-in for pynvml."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from fake_nvml import fake_uuid, run_probe

PROBE = """
import json
from vslice_node.monitor.nodegpus import NodeGpuCollector, start_nvml
nvml = start_nvml()
samples = {}
for family in NodeGpuCollector(nvml).collect():
    for s in family.samples:
        samples[s.name + "/" + s.labels["gpu"]] = s.value
print(json.dumps(samples))
"""


def test_node_gpu_metrics_report_each_gpus_memory_from_nvml(tmp_path: Path) -> None:
    samples = run_probe(PROBE, tmp_path, devices=2, memory="4g")
    for index in range(2):
        assert samples[f"vslice_gpu_memory_total_bytes/{fake_uuid(index)}"] == 4 * 2**30
        assert samples[f"vslice_gpu_memory_used_bytes/{fake_uuid(index)}"] == 0


HAMI_PROBE = """
import json
from vslice_node.monitor.nodegpus import NodeGpuCollector, start_nvml
nvml = start_nvml()
print(json.dumps([
    [s.name, s.labels, s.value]
    for family in NodeGpuCollector(nvml, hami=True).collect()
    for s in family.samples
]))
"""


def test_hami_host_series_carry_hamis_labels_and_units(tmp_path: Path) -> None:
    samples = run_probe(HAMI_PROBE, tmp_path, devices=2, memory="4g")
    by_name: dict[str, list[tuple[dict[str, str], float]]] = {}
    for name, labels, value in samples:
        by_name.setdefault(name, []).append((labels, value))
    host = {
        "deviceidx": "1",
        "deviceuuid": fake_uuid(1),
        "devicetype": "NVIDIA-Fake NVIDIA GPU 1",
        "zone": "vGPU",
    }
    assert (host, 0) in by_name["HostGPUMemoryUsage"]  # bytes in use, none here
    assert (host, 0) in by_name["HostCoreUtilization"]  # percent, an idle GPU
    utilization = by_name["vslice_gpu_utilization_ratio"]
    assert [labels for labels, _ in utilization] == [
        {"gpu": fake_uuid(0), "index": "0"},
        {"gpu": fake_uuid(1), "index": "1"},
    ]
    assert "vslice_gpu_utilization_percent" not in by_name


class _Nvml:
    """Just enough of pynvml for one GPU 37 % busy holding 3 GiB (no library needed)."""

    class NVMLError(Exception):
        value = 0

    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_ERROR_FUNCTION_NOT_FOUND = 13

    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetUUID(self, handle: int) -> bytes:
        return b"GPU-1"

    def nvmlDeviceGetName(self, handle: int) -> str:
        return "H200"

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(used=3 * 2**30, total=141 * 2**30)

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(gpu=37)


def test_gpu_utilization_is_a_ratio_and_hamis_a_percentage() -> None:
    from vslice_node.monitor.nodegpus import NodeGpuCollector

    values = {
        s.name: s.value
        for family in NodeGpuCollector(_Nvml(), hami=True).collect()
        for s in family.samples
    }
    assert values["vslice_gpu_utilization_ratio"] == pytest.approx(0.37)
    assert values["HostCoreUtilization"] == 37
    assert values["HostGPUMemoryUsage"] == values["vslice_gpu_memory_used_bytes"] == 3 * 2**30
    plain = {s.name for f in NodeGpuCollector(_Nvml()).collect() for s in f.samples}
    assert plain == {
        "vslice_gpu_memory_used_bytes",
        "vslice_gpu_memory_total_bytes",
        "vslice_gpu_utilization_ratio",
    }
