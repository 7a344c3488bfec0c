"""From the device plugin's answer to the monitor's metrics, with the real shim in between.

The environment and region path the device plugin hands a container are given to a CUDA
program (the shim's test probe) running with the real ``libvslice.so`` preloaded over the
shim's fake driver; the shim writes the region, the monitor serves what it recorded. Only the
driver is a stand-in (no GPU here).
"""

from __future__ import annotations

import os
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_nvml import FAKE_DIR, ROOT, fake_uuid
from prometheus_client.parser import text_string_to_metric_families
from vslice_core.model import GpuGrant
from vslice_node.handover.container import (
    REGION_FILE,
    Handover,
    Layout,
    container_handover,
    limits_text,
)
from vslice_node.monitor.main import metrics_service
from vslice_node.monitor.podnames import PodView
from vslice_node.monitor.settings import MonitorSettings

SHIM = ROOT / "shim" / "build" / "libvslice.so"
PROBE = ROOT / "shim" / "build" / "tests" / "probe"
MIB = 1024 * 1024


@pytest.fixture(scope="module")
def built() -> None:
    if not (SHIM.exists() and PROBE.exists() and (FAKE_DIR / "libcuda.so.1").exists()):
        subprocess.run(["make", "-C", str(ROOT / "shim"), "-j2", "tests"], check=True)


@pytest.fixture
def program(built: None, tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    root = tmp_path / "containers"
    # In a container the region directory is bind-mounted; a host process sees the host path.
    layout = Layout(cache_root=root, container_cache_root=str(root))
    grant = GpuGrant(uuid=fake_uuid(0), index=0, memory_mib=1024, cores=40)
    answer = container_handover(Handover(layout), [grant], "uid-1", "main", {fake_uuid(0): 0})
    layout.host_cache_dir("uid-1", "main").mkdir(parents=True)
    # The limits file as the allocator writes it; a host process finds it by its host path.
    limits = tmp_path / "limits"
    limits.write_text(
        limits_text(
            [grant], layout.container_cache_dir("uid-1", "main") / REGION_FILE, {}, "u", "c"
        )
    )
    env = {
        **os.environ,
        **answer.envs,
        "VSLICE_LIMITS_FILE": str(limits),
        "LD_PRELOAD": str(SHIM),
        "LD_LIBRARY_PATH": str(FAKE_DIR),
        "FAKE_CUDA_STATE": str(tmp_path / "fake-gpu"),
        "FAKE_CUDA_TOTAL_MEM": "16g",
    }
    process = subprocess.Popen(
        [str(PROBE), "ctx:0", "alloc:256m", "alloc:64m", "kernels:1:200", "hold"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    lines = []
    for line in process.stdout:
        lines.append(line.strip())
        if line.strip() == "ready":
            break
    assert lines[-1] == "ready", lines
    yield root, process
    process.kill()
    process.wait()


def test_memory_and_compute_recorded_by_the_shim_reach_the_metrics(
    program: tuple[Path, subprocess.Popen[str]],
) -> None:
    root, _ = program
    settings = MonitorSettings(
        listen="127.0.0.1:0", backend="static", cache_root=str(root), pod_names=False
    )
    http, _ = metrics_service(settings, lambda _uids: PodView({"uid-1": ("team-a", "train")}))
    http.start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{http.port}/metrics", timeout=5) as r:
            text = r.read().decode()
    finally:
        http.stop()
    samples = {
        sample.name: sample
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("vslice_container_")
    }
    used = samples["vslice_container_gpu_memory_used_bytes"]
    assert used.labels["gpu"] == fake_uuid(0)
    assert used.labels["pod"] == "train"
    assert used.value >= 320 * MIB
    assert samples["vslice_container_gpu_memory_limit_bytes"].value == 1024 * MIB
    assert samples["vslice_container_gpu_sm_limit_ratio"].value == 0.4
    assert samples["vslice_container_gpu_launches_total"].value > 0
    assert samples["vslice_container_gpu_busy_seconds_total"].value > 0
    assert samples["vslice_container_processes"].value == 1
