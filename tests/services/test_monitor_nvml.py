"""Whole-GPU metrics through pynvml against the shim's fake libnvidia-ml.so.1 (child process)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from fake_nvml import fake_nvml_env, fake_uuid, missing_symbols

PROBE = """
import json
from vslice_services.monitor.nodegpus import NodeGpuCollector, start_nvml
nvml = start_nvml()
samples = {}
for family in NodeGpuCollector(nvml).collect():
    for s in family.samples:
        samples[s.name + "/" + s.labels["gpu"]] = s.value
print(json.dumps(samples))
"""


def test_node_gpu_metrics_report_each_gpus_memory_from_nvml(tmp_path: Path) -> None:
    # The fake is built from shim/ in every run: a missing export is a bug, not an absent GPU.
    assert missing_symbols() == [], "the fake libnvidia-ml.so.1 lacks functions pynvml needs"
    result = subprocess.run(
        [sys.executable, "-c", PROBE],
        env=fake_nvml_env(tmp_path, devices=2, memory="4g"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    samples = json.loads(result.stdout)
    for index in range(2):
        assert samples[f"vslice_gpu_memory_total_bytes/{fake_uuid(index)}"] == 4 * 2**30
        assert samples[f"vslice_gpu_memory_used_bytes/{fake_uuid(index)}"] == 0
