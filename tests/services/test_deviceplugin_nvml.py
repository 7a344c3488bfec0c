"""The NVML backend on its real code path: pynvml loading the shim's fake libnvidia-ml.so.1
in a child process (no GPU or driver exists here; the fake stands in for the driver only)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from fake_nvml import fake_nvml_env, fake_uuid, run_probe

PROBE = """
import json
from vslice_node.gpus.backends.nvml import NvmlBackend
from vslice_node.deviceplugin.devices import virtual_devices
backend = NvmlBackend("node-1", slots=4)
inventory = backend.inventory()
backend.wait_for_change(0.05)  # no XID events in the fake: just waits
print(json.dumps({
    "gpus": [gpu.model_dump() for gpu in inventory.gpus],
    "minors": backend.minors(),
    "devices": [d.id for d in virtual_devices(inventory.gpus)],
}))
backend.close()
"""


def test_nvml_backend_reads_every_gpu_through_pynvml(tmp_path: Path) -> None:
    found = run_probe(PROBE, tmp_path, devices=2, memory="8g")
    assert found["gpus"] == [
        {
            "uuid": fake_uuid(i),
            "model": f"Fake-NVIDIA-GPU-{i}",
            "memory_mib": 8192,
            "cores": 100,
            "slots": 4,
            "index": i,
            "numa": 0,
            "healthy": True,
            "cordoned": False,
        }
        for i in range(2)
    ]
    # The fake has no nvmlDeviceGetMinorNumber: the backend falls back to the index.
    assert found["minors"] == {fake_uuid(0): 0, fake_uuid(1): 1}
    assert found["devices"][:2] == [f"{fake_uuid(0)}::0", f"{fake_uuid(0)}::1"]
    assert len(found["devices"]) == 8


def test_nvml_backend_without_a_driver_fails_with_one_clear_line(tmp_path: Path) -> None:
    probe = (
        "from vslice_node.gpus.backends.nvml import NvmlBackend\n"
        "from vslice_node.gpus.backends import BackendUnavailable\n"
        "try:\n    NvmlBackend('n', 1)\nexcept BackendUnavailable as e:\n    print(e)\n"
    )
    env = {**fake_nvml_env(tmp_path), "LD_LIBRARY_PATH": str(tmp_path)}  # no library there
    result = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("NVML cannot start:")
