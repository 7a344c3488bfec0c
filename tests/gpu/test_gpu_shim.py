"""The shim on a real GPU and driver (run by tests/gpu/run.sh).

Skipped, with the reason, where no NVIDIA driver is present; the fake-driver tests in
tests/shim cover the same behaviour everywhere else."""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "shim" / "build"
GIB = 1 << 30


def _has_gpu() -> bool:
    smi = shutil.which("nvidia-smi")
    return smi is not None and subprocess.run([smi, "-L"], capture_output=True).returncode == 0


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not _has_gpu(), reason="no NVIDIA GPU/driver: nvidia-smi -L fails here"),
]


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CUDA_DEVICE_", "VSLICE_"))}
    env.pop("LD_LIBRARY_PATH", None)  # the real driver, not the fake one
    env["LD_PRELOAD"] = str(BUILD / "libvslice.so")
    env["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = str(tmp / "region")
    env.update(extra)
    return env


@pytest.fixture(scope="module", autouse=True)
def built() -> None:
    subprocess.run(["make", "-C", str(ROOT / "shim"), "tests"], check=True, capture_output=True)


def _probe(tmp: Path, *commands: str, **env: str) -> dict[str, list[str]]:
    out = subprocess.run(
        [str(BUILD / "tests" / "probe"), *commands],
        env=_env(tmp, **env),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return {line.split()[0]: line.split()[1:] for line in out.stdout.splitlines()}


def hold(env: dict[str, str], allocation: str) -> subprocess.Popen[str]:
    """The probe holding ``allocation`` on device 0 under ``env``, once it says "ready"; the
    caller kills it."""
    holder = subprocess.Popen(
        [str(BUILD / "tests" / "probe"), "ctx:0", allocation, "hold"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    assert any(line.strip() == "ready" for line in holder.stdout), "the holder ended early"
    return holder


def test_a_driver_program_is_limited_on_the_real_driver(tmp_path: Path) -> None:
    out = _probe(
        tmp_path,
        "ctx:0",
        "alloc:1500m",
        "alloc:1g",
        "vmm:512m",
        "procaddr:1g",
        "info",
        CUDA_DEVICE_MEMORY_LIMIT="2g",
    )
    assert out["alloc:1500m"][0] == "0"
    assert out["alloc:1g"][0] == "2"
    assert out["vmm:512m"][0] == "0"
    assert out["procaddr:1g"][0] == "2"
    assert "total=2147483648" in out["info"]


def _torch(tmp: Path, code: str, **env: str) -> subprocess.CompletedProcess[str]:
    if subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode:
        # A GPU machine without PyTorch must not pass the PyTorch checks by skipping them.
        pytest.fail(
            f"PyTorch is not installed for {sys.executable}: pip install torch, or "
            "run tests/gpu/run.sh with PYTHON=<an interpreter that has it>"
        )
    return subprocess.run(
        [sys.executable, "-c", code], env=_env(tmp, **env), capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip


TORCH_OOM = """
import torch
free, total = torch.cuda.mem_get_info()
assert total == 2 << 30, total
kept = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
try:
    torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
except torch.cuda.OutOfMemoryError:
    print("oom")
"""


def test_pytorch_allocation_beyond_the_slice_raises_oom(tmp_path: Path) -> None:
    result = _torch(tmp_path, TORCH_OOM, CUDA_DEVICE_MEMORY_LIMIT="2g")
    assert result.stdout.strip() == "oom", result.stderr


def test_pytorch_expandable_segments_are_limited(tmp_path: Path) -> None:
    result = _torch(
        tmp_path,
        TORCH_OOM,
        CUDA_DEVICE_MEMORY_LIMIT="2g",
        PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True",
    )
    assert result.stdout.strip() == "oom", result.stderr


def test_nvidia_smi_shows_the_slice(tmp_path: Path) -> None:
    out = subprocess.run(
        ["nvidia-smi", "-i", "0", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
        env=_env(tmp_path, CUDA_DEVICE_MEMORY_LIMIT="3000m"),
        capture_output=True,
        text=True,
        check=True,
    )
    assert int(out.stdout.strip()) == 3000


def test_nvidia_smi_lists_the_containers_processes_from_the_region(tmp_path: Path) -> None:
    from vslice_shim import open_region

    env = _env(tmp_path, CUDA_DEVICE_MEMORY_LIMIT="3000m")
    holder = hold(env, "alloc:256m")
    try:
        query = ["nvidia-smi", "-i", "0", "--query-compute-apps=pid,used_memory"]
        out = subprocess.run(
            [*query, "--format=csv,noheader,nounits"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        listed = {int(p): int(m) for p, m in (line.split(",") for line in out.stdout.splitlines())}
        with open_region(tmp_path / "region") as region:
            (slot,) = [p for p in region.snapshot().processes if p.pid == holder.pid]
        # the shim's account, not the driver's: context overhead included, in MiB
        assert listed == {holder.pid: slot.memory_used[0] >> 20}
    finally:
        holder.kill()
        holder.wait()


UTILISATION = ["nvidia-smi", "-i", "0", "--query-gpu=utilization.gpu", "--format=csv,noheader"]


def _utilisation(stop: threading.Event, samples: list[int]) -> None:
    while not stop.is_set():
        out = subprocess.run(
            [*UTILISATION[:-1], UTILISATION[-1] + ",nounits"],
            capture_output=True,
            text=True,
        )
        if out.returncode == 0 and out.stdout.strip().isdigit():
            samples.append(int(out.stdout.strip()))
        time.sleep(0.2)


@pytest.mark.parametrize("limit", [30, 60])
def test_sm_pacing_with_real_kernels_tracks_the_limit(tmp_path: Path, limit: int) -> None:
    samples: list[int] = []
    stop = threading.Event()
    sampler = threading.Thread(target=_utilisation, args=(stop, samples))
    sampler.start()
    try:
        out = _probe(tmp_path, "ctx:0", "spin:8:2000", CUDA_DEVICE_SM_LIMIT=str(limit))
    finally:
        stop.set()
        sampler.join()
    assert out["spin"][0] == "0"
    steady = samples[len(samples) // 4 : -2]  # NVML averages over its own window: skip the edges
    measured = statistics.mean(steady)
    print(f"SM limit {limit}%: NVML utilisation {measured:.1f}% over {len(steady)} samples")
    assert abs(measured - limit) <= 10
