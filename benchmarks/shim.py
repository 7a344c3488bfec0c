"""Cost the shim adds to the driver calls it intercepts, against the fake driver.

Runs shim/build/tests/bench with and without libvslice.so preloaded, interleaved, several
rounds, and reports medians:

* alloc/free: one cuMemAlloc_v2 + cuMemFree_v2 pair with a memory limit and a shared region
  set (the full accounting path: reserve under the region lock, remember, release). Two sizes:
  64 KiB, where the fake driver's own cost is a ~100 ns malloc (the worst case for the ratio),
  and 4 MiB, where the fake driver maps memory like a real driver does (microseconds).
* contended: the same pair from 4 threads at once.
* launch: cuLaunchKernel with no compute limit (the path must stay a passthrough).

The last line is ``shim alloc_free_ratio=<x> launch_ratio=<y>`` (alloc/free at 64 KiB).
Usage: ``.venv/bin/python benchmarks/shim.py [--rounds N] [--driver fake|real]``; with
``--driver real`` (tests/gpu/run.sh) the same programs run on the machine's NVIDIA driver.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "shim" / "build"


def build() -> None:
    subprocess.run(["make", "-C", str(ROOT / "shim"), "-j2", "tests"], check=True,
                   capture_output=True)  # fmt: skip


REAL_DRIVER = False


def run(args: list[str], shim: bool, region: Path) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CUDA_", "VSLICE_", "LD_P"))}
    if REAL_DRIVER:
        env.pop("LD_LIBRARY_PATH", None)
    else:
        env["LD_LIBRARY_PATH"] = str(BUILD / "fake")
        env["FAKE_CUDA_TOTAL_MEM"] = "64g"
    if shim:
        env["LD_PRELOAD"] = str(BUILD / "libvslice.so")
        env["CUDA_DEVICE_MEMORY_LIMIT"] = "32g"
        env["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = str(region)
    out = subprocess.run(
        [str(BUILD / "tests" / "bench"), *args], env=env, capture_output=True, text=True, check=True
    ).stdout
    return float(out.split("ns=")[1].split()[0])


def measure(name: str, args: list[str], rounds: int, region: Path) -> float:
    plain, shimmed, ratios = [], [], []
    for _ in range(rounds):
        a = run(args, False, region)
        b = run(args, True, region)
        plain.append(a)
        shimmed.append(b)
        ratios.append(b / a)
    ratio = statistics.median(ratios)
    without, with_shim = statistics.median(plain), statistics.median(shimmed)
    print(
        f"{name:<24} without {without:9.1f} ns  with {with_shim:9.1f} ns"
        f"  added {with_shim - without:8.1f} ns  ratio {ratio:.2f}"
    )
    return ratio


def main() -> int:
    global REAL_DRIVER
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--driver", choices=["fake", "real"], default="fake")
    options = parser.parse_args()
    rounds = options.rounds
    REAL_DRIVER = options.driver == "real"
    kernel = "empty" if REAL_DRIVER else "fake_kernel_0"
    print(f"driver: {options.driver}")
    build()
    with tempfile.TemporaryDirectory() as tmp:
        region = Path(tmp) / "region"
        small = measure("alloc/free 64 KiB", ["alloc", "200000", "64k"], rounds, region)
        measure("alloc/free 4 MiB", ["alloc", "50000", "4m"], rounds, region)
        measure("alloc/free 4 thr 64 KiB", ["alloc", "50000", "64k", "4"], rounds, region)
        launch = measure("launch (no SM limit)", ["launch", "2000000", kernel], rounds, region)
    print(f"shim alloc_free_ratio={small:.2f} launch_ratio={launch:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
