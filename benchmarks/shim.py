"""Cost the shim adds to the driver calls it intercepts, against the fake driver.

Runs shim/build/tests/bench with and without libvslice.so preloaded, several rounds. Each round
runs both sides back to back (alternating which goes first, so a drift in the machine's load
hits both alike) and gives one paired ratio, with / without. The figure reported is the median
of the paired ratios, printed with their spread (lowest..highest) and the median time of each
side: one run's median is what to compare, and the spread says how far to trust it.

* alloc/free: one cuMemAlloc_v2 + cuMemFree_v2 pair with a memory limit and a shared region
  set (the full accounting path: reserve under the region lock, remember, release). Two sizes:
  64 KiB, where the fake driver's own cost is a ~100 ns malloc (the worst case for the ratio),
  and 4 MiB, where the fake driver maps memory like a real driver does (microseconds).
* contended: the same pair from 4 threads at once.
* launch: cuLaunchKernel with no compute limit (the path must stay a passthrough).
* start-up: 200 processes of one container started at once, each attaching to the shared
  region and allocating (wall time until all have exited, with and without the shim).

Instructions per call, which a loaded machine does not disturb, are counted with ``perf`` where
it can count user-space instructions, else with valgrind's callgrind where it is installed
(the difference between a run of 2N and one of N calls, so start-up cost cancels out).

Each row ends with a line ``shim <row>_ratio=<x> spread=<lo>..<hi>`` (rows: alloc_free_64_kib,
alloc_free_4_mib, alloc_free_4_thr_64_kib, launch). The last line is
``shim alloc_free_ratio=<x> launch_ratio=<y>`` (the median paired ratios of alloc/free at 64 KiB
and of launch).
Usage: ``.venv/bin/python benchmarks/shim.py [--rounds N] [--driver fake|real]
[--no-instructions]``; with ``--driver real`` (tests/gpu/run.sh) the same programs run on the
machine's NVIDIA driver.
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


def _perf_count(cmd: list[str], env: dict[str, str]) -> int | None:
    done = subprocess.run(
        ["perf", "stat", "-x,", "-e", "instructions:u", *cmd], env=env, capture_output=True,
        text=True,
    )  # fmt: skip
    fields = done.stderr.strip().splitlines()[-1].split(",") if done.stderr.strip() else []
    if done.returncode != 0 or not fields or not fields[0].isdigit():
        return None
    return int(fields[0])


def _callgrind_count(cmd: list[str], env: dict[str, str]) -> int | None:
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/out", *cmd],
            env=env, capture_output=True, text=True,
        )  # fmt: skip
    for line in done.stderr.splitlines():
        if "refs:" in line:
            return int(line.split("refs:")[1].strip().replace(",", ""))
    return None


def counter() -> str | None:
    """The instruction counter: perf if it counts user-space instructions here, else
    callgrind if valgrind is installed, else None."""
    if shutil.which("perf") and _perf_count(["true"], dict(os.environ)) is not None:
        return "perf"
    return "callgrind" if shutil.which("valgrind") else None


def instructions(args: list[str], shim: bool, region: Path, tool: str) -> float | None:
    """User-space instructions per call: (count for 2N calls - count for N calls) / N."""
    calls = int(args[1]) // (50 if tool == "callgrind" else 1)  # callgrind runs ~50x slower
    counts = []
    for n in (calls, 2 * calls):
        cmd = [str(BUILD / "tests" / "bench"), args[0], str(n), *args[2:]]
        count_with = _perf_count if tool == "perf" else _callgrind_count
        count = count_with(cmd, environment(shim, region))
        if count is None:
            return None
        counts.append(count)
    return (counts[1] - counts[0]) / calls


def measure(name: str, args: list[str], rounds: int, region: Path, tool: str | None) -> float:
    plain, shimmed, ratios = [], [], []
    for number in range(rounds):
        if number % 2 == 0:
            without = run(args, False, region)
            with_shim = run(args, True, region)
        else:
            with_shim = run(args, True, region)
            without = run(args, False, region)
        plain.append(without)
        shimmed.append(with_shim)
        ratios.append(with_shim / without)
    ratio = statistics.median(ratios)
    without, with_shim = statistics.median(plain), statistics.median(shimmed)
    print(
        f"{name:<24} without {without:9.1f} ns  with {with_shim:9.1f} ns"
        f"  added {with_shim - without:7.1f} ns  ratio {ratio:.2f}"
        f"  (paired ratios {min(ratios):.2f}..{max(ratios):.2f}, medians of {rounds} rounds)"
    )
    if tool is not None:
        counted = (instructions(args, False, region, tool), instructions(args, True, region, tool))
        if counted[0] and counted[1]:
            print(
                f"{'':<24} instructions per call ({tool}): without {counted[0]:.0f}, with"
                f" {counted[1]:.0f}, added {counted[1] - counted[0]:.0f},"
                f" ratio {counted[1] / counted[0]:.2f}"
            )
    key = name.split("(")[0].strip().replace("/", "_").replace(" ", "_").lower()
    print(f"shim {key}_ratio={ratio:.2f} spread={min(ratios):.2f}..{max(ratios):.2f}")
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
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--driver", choices=["fake", "real"], default="fake")
    parser.add_argument(
        "--no-instructions", action="store_true", help="skip the instruction counts"
    )
    options = parser.parse_args()
    rounds = options.rounds
    REAL_DRIVER = options.driver == "real"
    kernel = "empty" if REAL_DRIVER else "fake_kernel_0"
    tool = None if options.no_instructions else counter()
    print(f"driver: {options.driver}, instruction counts: {tool or 'none'}")
    build()
    with tempfile.TemporaryDirectory() as tmp:
        region = Path(tmp) / "region"
        small = measure("alloc/free 64 KiB", ["alloc", "200000", "64k"], rounds, region, tool)
        measure("alloc/free 4 MiB", ["alloc", "50000", "4m"], rounds, region, tool)
        measure("alloc/free 4 thr 64 KiB", ["alloc", "50000", "64k", "4"], rounds, region, tool)
        launch = measure(
            "launch (no SM limit)", ["launch", "2000000", kernel], rounds, region, tool
        )
        if not REAL_DRIVER:
            startup(200, region)
    print(f"shim alloc_free_ratio={small:.2f} launch_ratio={launch:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
