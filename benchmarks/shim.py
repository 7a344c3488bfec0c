"""Cost the shim adds to the driver calls it intercepts, against the fake driver.

Runs shim/build/tests/bench with and without libvslice.so preloaded, interleaved, several
rounds. The machine is shared, so each side's best round is taken as its cost (the least
disturbed run) and the ratio is best-with over best-without; medians are printed beside it.

* alloc/free: one cuMemAlloc_v2 + cuMemFree_v2 pair with a memory limit and a shared region
  set (the full accounting path: reserve under the region lock, remember, release). Two sizes:
  64 KiB, where the fake driver's own cost is a ~100 ns malloc (the worst case for the ratio),
  and 4 MiB, where the fake driver maps memory like a real driver does (microseconds).
* contended: the same pair from 4 threads at once.
* launch: cuLaunchKernel with no compute limit (the path must stay a passthrough).
* start-up: 200 processes of one container started at once, each attaching to the shared
  region and allocating (wall time until all have exited, with and without the shim).

Where ``perf`` can count user-space instructions, the same comparison is also made in
instructions per call (the difference between a run of 2N and one of N calls, so start-up
cost cancels out), which a loaded machine does not disturb.

The last line is ``shim alloc_free_ratio=<x> launch_ratio=<y>`` (alloc/free at 64 KiB, time).
Usage: ``.venv/bin/python benchmarks/shim.py [--rounds N] [--driver fake|real]``; with
``--driver real`` (tests/gpu/run.sh) the same programs run on the machine's NVIDIA driver.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "shim" / "build"


def build() -> None:
    subprocess.run(["make", "-C", str(ROOT / "shim"), "-j2", "tests"], check=True,
                   capture_output=True)  # fmt: skip


REAL_DRIVER = False


def environment(shim: bool, region: Path) -> dict[str, str]:
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
    return env


def run(args: list[str], shim: bool, region: Path) -> float:
    env = environment(shim, region)
    out = subprocess.run(
        [str(BUILD / "tests" / "bench"), *args], env=env, capture_output=True, text=True, check=True
    ).stdout
    return float(out.split("ns=")[1].split()[0])


def instructions(args: list[str], shim: bool, region: Path) -> float | None:
    """User-space instructions per call: (count for 2N calls - count for N calls) / N."""
    if shutil.which("perf") is None:
        return None
    counts = []
    for calls in (int(args[1]), 2 * int(args[1])):
        env = environment(shim, region)
        cmd = ["perf", "stat", "-x,", "-e", "instructions:u", str(BUILD / "tests" / "bench")]
        done = subprocess.run(
            [*cmd, args[0], str(calls), *args[2:]], env=env, capture_output=True, text=True
        )
        fields = done.stderr.strip().splitlines()[-1].split(",") if done.stderr.strip() else []
        if done.returncode != 0 or not fields or not fields[0].isdigit():
            return None
        counts.append(int(fields[0]))
    return (counts[1] - counts[0]) / int(args[1])


def measure(name: str, args: list[str], rounds: int, region: Path) -> float:
    plain, shimmed = [], []
    for _ in range(rounds):
        plain.append(run(args, False, region))
        shimmed.append(run(args, True, region))
    without, with_shim = min(plain), min(shimmed)
    ratio = with_shim / without
    print(
        f"{name:<24} without {without:9.1f} ns  with {with_shim:9.1f} ns"
        f"  added {with_shim - without:7.1f} ns  ratio {ratio:.2f}"
        f"  (medians {statistics.median(plain):.1f} / {statistics.median(shimmed):.1f} ns)"
    )
    counted = (instructions(args, False, region), instructions(args, True, region))
    if counted[0] and counted[1]:
        print(
            f"{'':<24} instructions per call: without {counted[0]:.0f}, with {counted[1]:.0f}"
            f", ratio {counted[1] / counted[0]:.2f}"
        )
    return ratio


def startup(processes: int, region: Path) -> None:
    """Wall time for `processes` programs started at once to attach, allocate and exit."""
    times = []
    for shim in (False, True):
        env = environment(shim, region)
        start = time.monotonic()
        children = [
            subprocess.Popen(
                [str(BUILD / "tests" / "probe"), "ctx:0", "alloc:1m", "sleep:200"],
                env=env,
                stdout=subprocess.DEVNULL,
            )
            for _ in range(processes)
        ]
        for child in children:
            child.wait()
        times.append(time.monotonic() - start)
    print(f"{processes} processes at once    without {times[0]:.2f} s  with {times[1]:.2f} s")


def main() -> int:
    global REAL_DRIVER
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
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
        if not REAL_DRIVER:
            startup(200, region)
    print(f"shim alloc_free_ratio={small:.2f} launch_ratio={launch:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
