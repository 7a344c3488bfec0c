"""Whole-GPU metrics through pynvml against the shim's fake libnvidia-ml.so.1 (child process)."""

from __future__ import annotations

from pathlib import Path

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
