"""NVIDIA's Python bindings and the viewers built on them, under the shim, on a real GPU and
driver (run by tests/gpu/run.sh): the same programs as tests/shim/test_nvidia_tools.py and
tests/e2e/test_realnode_nvidia_tools.py, which run them on the fake driver.

They need ``cuda-bindings``, ``nvidia-ml-py``, ``gpustat`` and ``nvitop`` in the interpreter
(vslice's ``dev`` extra); a GPU machine without them fails these checks rather than passing
them by skipping."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_gpu_shim import GIB, _env, _has_gpu, hold

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not _has_gpu(), reason="no NVIDIA GPU/driver: nvidia-smi -L fails here"),
]

ALLOC_PATHS = Path(__file__).resolve().parents[1] / "workloads" / "alloc_paths.py"
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module", autouse=True)
def tools() -> None:
    script = "import cuda.bindings.driver, pynvml, gpustat, nvitop"
    if subprocess.run([sys.executable, "-c", script], capture_output=True).returncode:
        pytest.fail(
            f"cuda-bindings, nvidia-ml-py, gpustat or nvitop is missing for {sys.executable}: "
            "pip install -e '.[dev]', or run tests/gpu/run.sh with PYTHON=<one that has them>"
        )


def test_cuda_bindings_stop_at_the_slice_on_every_path(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(ALLOC_PATHS), "1536", "1024"],
        env=_env(tmp_path, CUDA_DEVICE_MEMORY_LIMIT="2g"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report.pop("total") == 2 * GIB
    assert report.pop("granularity") > 0  # the driver's own
    assert report == dict.fromkeys(
        ("cuMemAlloc", "cuMemAllocAsync", "cuMemAllocManaged", "cuMemCreate"),
        "CUDA_ERROR_OUT_OF_MEMORY",
    )


def test_gpustat_and_nvitop_show_the_slice_and_the_holder(tmp_path: Path) -> None:
    env = _env(tmp_path, CUDA_DEVICE_MEMORY_LIMIT="2g", CUDA_VISIBLE_DEVICES="0", COLUMNS="120")
    holder = hold(env, "alloc:512m")
    try:
        gpustat = subprocess.run(
            [str(BIN / "gpustat"), "--json", "-a"], env=env, capture_output=True, text=True
        )
        nvitop = subprocess.run(
            [str(BIN / "nvitop"), "-1"], env=env, capture_output=True, text=True
        )
    finally:
        holder.kill()
        holder.wait()
    assert gpustat.returncode == 0 and nvitop.returncode == 0, gpustat.stderr + nvitop.stderr
    first = json.loads(gpustat.stdout)["gpus"][0]
    assert first["memory.total"] == 2048
    assert [p["pid"] for p in first["processes"]] == [holder.pid]
    assert re.search(r"/ 2048MiB", nvitop.stdout), nvitop.stdout
    assert re.search(rf"\b{holder.pid} C ", nvitop.stdout), nvitop.stdout
