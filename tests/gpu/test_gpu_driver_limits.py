"""The driver-enforced memory backend on a real driver (run by tests/gpu/run.sh).

What the lab proves on the fake driver (tests/e2e/test_realnode_driver_limits.py), here on
NVIDIA's: ``vslice-memory-limit probe`` tells whether the driver can limit memory per cgroup
(R615+, cgroup v2, not MIG), and where it can, ``vslice-memory-limit set`` holds a process in a
new cgroup at 1 GiB although it runs without the shim. Skipped with the probe's own reason on a
driver that cannot (then the shim alone enforces, which tests/gpu/test_gpu_shim.py checks)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from test_gpu_shim import BUILD, ROOT, _has_gpu

HOOK = BUILD / "hook" / "vslice-memory-limit"
SMOKE = BUILD / "smoke" / "vslice-smoke"
CGROUP_ROOT = Path("/sys/fs/cgroup")
LIMIT_MIB = 1024


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not _has_gpu(), reason="no NVIDIA GPU/driver: nvidia-smi -L fails here"),
]


@pytest.fixture(scope="module", autouse=True)
def built() -> None:
    subprocess.run(["make", "-C", str(ROOT / "shim")], check=True, capture_output=True)


def _plain_env() -> dict[str, str]:
    """No shim, no fake driver: what a program that goes around the shim has."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CUDA_DEVICE_", "VSLICE_"))}
    for name in ("LD_PRELOAD", "LD_LIBRARY_PATH"):
        env.pop(name, None)
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # CUDA's device 0 is nvidia-smi's GPU 0
    return env


def _first_gpu_uuid() -> str:
    listed = subprocess.run(
        ["nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=True,
    )
    return listed.stdout.split()[0]


def test_the_probe_answers_with_a_reason() -> None:
    probe = subprocess.run([str(HOOK), "probe"], capture_output=True, text=True, timeout=60)
    said = (probe.stdout + probe.stderr).strip()
    assert probe.returncode in (0, 3), said
    assert said.startswith("available" if probe.returncode == 0 else "unavailable"), said


def test_the_driver_holds_a_cgroup_at_its_limit_without_the_shim(tmp_path: Path) -> None:
    probe = subprocess.run([str(HOOK), "probe"], capture_output=True, text=True, timeout=60)
    if probe.returncode == 3:
        pytest.skip(f"driver-enforced limits unavailable here: {probe.stdout.strip()}")
    assert probe.returncode == 0, probe.stdout + probe.stderr
    assert (CGROUP_ROOT / "cgroup.controllers").is_file(), "available without cgroup v2?"
    group = CGROUP_ROOT / f"vslice-gpu-check-{os.getpid()}"
    group.mkdir()
    # The shell joins the cgroup, waits for the limit, then becomes the allocating program.
    script = 'echo $$ > "$1/cgroup.procs"; read go; exec "$2" memory --step 256m'
    worker = subprocess.Popen(
        ["sh", "-c", script, "sh", str(group), str(SMOKE)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_plain_env(),
    )
    try:
        for _ in range(100):
            if str(worker.pid) in (group / "cgroup.procs").read_text().split():
                break
            subprocess.run(["sleep", "0.05"], check=True)
        mark = tmp_path / "memory-backend"
        limit = f"{_first_gpu_uuid()}={LIMIT_MIB << 20}"
        done = subprocess.run(
            [str(HOOK), "set", "--pid", str(worker.pid), "--mark", str(mark), limit],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert "backend=driver" in mark.read_text()
        out, err = worker.communicate("go\n", timeout=120)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
        group.rmdir()
    found = dict(w.split("=", 1) for line in out.splitlines() for w in line.split() if "=" in w)
    assert found.get("oom_error") == "CUDA_ERROR_OUT_OF_MEMORY", out + err
    # The context takes some of the limit on a real driver: the program ends below it.
    assert 0 < int(found["max_allocated_mib"]) <= LIMIT_MIB, out
    assert int(found["at_oom.info_free_mib"]) < 64, out
