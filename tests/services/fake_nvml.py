"""The shim's fake NVML (``shim/build/fake/libnvidia-ml.so.1``) for real-path NVML tests.

pynvml loads ``libnvidia-ml.so.1`` through the dynamic linker, so a process started with
``LD_LIBRARY_PATH`` pointing at the fake runs vslice's NVML code unchanged. The library is
built with ``make -C shim`` when missing (gcc only, no driver needed).
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
FAKE_DIR = ROOT / "shim" / "build" / "fake"


# What pynvml calls before anything else (``nvmlInit`` -> ``nvmlInitWithFlags``); every
# other function vslice uses degrades gracefully when a library lacks it.
REQUIRED = ("nvmlInitWithFlags", "nvmlDeviceGetCount_v2", "nvmlDeviceGetHandleByIndex_v2")


def missing_symbols() -> list[str]:
    """Functions pynvml needs that the fake does not export (builds the fake if needed)."""
    if not (FAKE_DIR / "libnvidia-ml.so.1").exists():
        subprocess.run(["make", "-C", str(ROOT / "shim"), "-j2"], check=True, capture_output=True)
    library = ctypes.CDLL(str(FAKE_DIR / "libnvidia-ml.so.1"))
    return [name for name in REQUIRED if not hasattr(library, name)]


def fake_nvml_env(tmp: Path, devices: int = 2, memory: str = "8g") -> dict[str, str]:
    """Environment for a child process that sees ``devices`` fake GPUs of ``memory`` each."""
    return {
        **os.environ,
        "LD_LIBRARY_PATH": str(FAKE_DIR),
        "FAKE_CUDA_DEVICE_COUNT": str(devices),
        "FAKE_CUDA_TOTAL_MEM": memory,
        "FAKE_CUDA_STATE": str(tmp / "fake-gpu-state"),
    }


def fake_uuid(index: int) -> str:
    """The UUID the fake reports for device ``index`` (shim/fake/device.c)."""
    return f"GPU-56534c46-414b-4510-8000-0000000000{index:02x}"


def run_probe(probe: str, tmp: Path, devices: int = 2, memory: str = "8g") -> Any:
    """Run ``probe`` (Python printing one JSON value) in a child on the fake; its parsed output.

    The fake is built from shim/ in every run: a missing export is a bug, not an absent GPU.
    """
    assert missing_symbols() == [], "the fake libnvidia-ml.so.1 lacks functions pynvml needs"
    result = subprocess.run(
        [sys.executable, "-c", probe],
        env=fake_nvml_env(tmp, devices=devices, memory=memory),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)
