"""What users run in a slice, in a real container on the lab's real node: the Python workload
image (``vslice.local/python-tools:1``, vslice_build.workload) with NVIDIA's ``cuda-bindings``
and ``nvidia-ml-py``, ``gpustat`` and ``nvitop``, in a 2 GiB slice of a 22.5 GiB card, with
the shim the node agent preloads and the fake driver it mounts.

One pod runs ``tests/workloads/alloc_paths.py`` (every allocation path the bindings expose,
stream-ordered and VMM included), then holds 512 MiB in a second process while gpustat and
nvitop look at the card."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import LabHandle
from realnode_pods import RealNode
from vslice_build.binaries import cache_root
from vslice_build.workload import WORKLOAD_IMAGE, build_workload
from vslice_lab.lab import import_image

pytestmark = pytest.mark.timeout(600)

ALLOC_PATHS = Path(__file__).resolve().parents[1] / "workloads" / "alloc_paths.py"
HOLD = """
from cuda.bindings import driver as cu
cu.cuInit(0)
cu.cuCtxSetCurrent(cu.cuDevicePrimaryCtxRetain(cu.cuDeviceGet(0)[1])[1])
err, pointer = cu.cuMemAlloc(512 << 20)
assert err == cu.CUresult.CUDA_SUCCESS, err
open("/tmp/ready", "w").close()
import time
time.sleep(120)
"""
SCRIPT = """
set -e
python3 -c "$ALLOC_PATHS" 1536 1024 > /tmp/alloc.json
python3 -c "$HOLD" &
holder=$!
while [ ! -e /tmp/ready ]; do sleep 0.2; done
echo "holder $holder"
echo "alloc $(cat /tmp/alloc.json)"
echo "gpustat $(gpustat --json -a | tr -d '\\n')"
echo "---nvitop"
COLUMNS=120 nvitop -1
kill $holder
"""


@pytest.fixture(scope="module")
def workload_image(lab: LabHandle) -> str:
    """The workload image in the real node's containerd (written once, then cached)."""
    archive = build_workload(cache_root().parent / "images")
    import_image(lab.state_dir, archive)
    return WORKLOAD_IMAGE


def test_nvidias_bindings_and_viewers_see_and_hold_to_the_slice(
    real_node: RealNode, namespace: str, workload_image: str
) -> None:
    real_node.smoke_pod(
        namespace,
        "tools",
        [],
        memory_mib=2048,
        image=workload_image,
        command=["sh", "-c", SCRIPT],
        env={"ALLOC_PATHS": ALLOC_PATHS.read_text(), "HOLD": HOLD},
    )
    pod = real_node.wait_finished(namespace, "tools", timeout=180)
    log = real_node.logs(namespace, "tools")
    assert pod["status"]["phase"] == "Succeeded", log
    lines = dict(line.split(" ", 1) for line in log.split("---nvitop")[0].splitlines() if line)
    holder = int(lines["holder"])

    # NVIDIA's driver bindings: the slice is the card, and every path stops at it.
    assert json.loads(lines["alloc"]) == {
        "total": 2048 << 20,
        "granularity": 2 << 20,
        "cuMemAlloc": "CUDA_ERROR_OUT_OF_MEMORY",
        "cuMemAllocAsync": "CUDA_ERROR_OUT_OF_MEMORY",
        "cuMemAllocManaged": "CUDA_ERROR_OUT_OF_MEMORY",
        "cuMemCreate": "CUDA_ERROR_OUT_OF_MEMORY",
    }

    # gpustat (NVIDIA's NVML bindings): the slice, and the holder by its PID in the container.
    gpus = json.loads(lines["gpustat"])["gpus"]
    assert [gpu["memory.total"] for gpu in gpus] == [2048]
    processes = gpus[0]["processes"]
    assert [p["pid"] for p in processes] == [holder]
    assert processes[0]["gpu_memory_usage"] >= 512
    assert gpus[0]["memory.used"] == processes[0]["gpu_memory_usage"]

    # nvitop: the same card and process.
    nvitop = log.split("---nvitop", 1)[1]
    used = processes[0]["gpu_memory_usage"]
    assert re.search(rf"{used}(\.0)?MiB / 2048MiB", nvitop), nvitop
    assert re.search(rf"\b{holder} C ", nvitop), nvitop
