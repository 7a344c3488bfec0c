"""The shim's own driver and NVML declarations agree with NVIDIA's cuda.h and nvml.h.

The headers come from PyPI wheels (nvidia-cuda-runtime-cu12, nvidia-nvml-dev-cu12), fetched by
.ci/setup.d/20-shim.sh into ~/.cache/vslice/cuda-headers/include; `make -C shim drift` compiles
every source with the official declarations in force and compares constants and layouts."""

from __future__ import annotations

import subprocess
from pathlib import Path

from conftest import SHIM

HEADERS = Path.home() / ".cache" / "vslice" / "cuda-headers" / "include"


def test_declarations_match_the_official_headers(shim_build: Path) -> None:
    # The headers come from PyPI, which CI reaches: their absence is a setup failure, not a skip.
    for header in ("cuda.h", "nvml.h"):
        assert (HEADERS / header).exists(), f"{HEADERS / header} missing: run .ci/setup"
    result = subprocess.run(
        ["make", "-C", str(SHIM), "drift", f"CUDA_HEADERS={HEADERS}"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no drift" in result.stdout
