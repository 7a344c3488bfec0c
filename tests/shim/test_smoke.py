"""vslice-smoke, the check a user runs in a container, run here on the host under the shim
against the fake driver: it reports the slice, stops allocating at it, measures the compute
share, and every key it prints is documented in docs/smoke.md."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT, Report, Smoke

DOC = ROOT / "docs" / "smoke.md"
NODE = (
    "GPU-4c1f0e3a-0000-4000-8000-000000000000,Tesla-T4,15360m;"
    "GPU-4c1f0e3a-0000-4000-8000-000000000001,Tesla-T4,16g"
)


def _slice(smoke: Smoke, **extra: str) -> dict[str, str]:
    return {
        "CUDA_DEVICE_MEMORY_LIMIT_0": "1000m",
        "CUDA_DEVICE_MEMORY_SHARED_CACHE": str(smoke.probe.region),
        **extra,
    }


def _wait_holding(holder: subprocess.Popen[str]) -> Report:
    """Reads the holder's output up to the line that says it holds its memory."""
    assert holder.stdout is not None
    lines = []
    for line in holder.stdout:
        lines.append(line)
        if line.startswith("holding_seconds="):
            return Report(0, "".join(lines), "")
    raise AssertionError("".join(lines) + (holder.stderr.read() if holder.stderr else ""))


def _stop(holder: subprocess.Popen[str]) -> None:
    holder.kill()
    holder.wait()


def test_memory_mode_reports_the_slice_and_stops_at_it(smoke: Smoke) -> None:
    # 200 MiB of context overhead, measured by the shim and charged to the slice
    report = smoke.run("memory", **_slice(smoke, FAKE_CUDA_CONTEXT_MEM="200m"))
    assert report.returncode == 0, report.stdout + report.stderr
    assert report.first == "vslice-smoke version=1 mode=memory"
    assert report["result"] == "ok"
    assert (report["devices"], report["device"]) == ("1", "0")
    assert report["device.0.total_mib"] == report["device.0.info_total_mib"] == "1000"
    assert report["device.0.info_free_mib"] == "800"
    assert (report["nvml.0.total_mib"], report["nvml.0.used_mib"]) == ("1000", "200")
    assert report["nvml.0.processes"] == "1"
    assert report["nvml.0.process.0.pid"] == report["pid"]  # the container's own pid
    # 256 MiB steps: refused when the next step would pass the slice, then refined to the MiB
    assert report["step_mib"] == "256"
    assert (report["allocated_mib"], report["oom_at_mib"]) == ("768", "1024")
    assert report["oom_error"] == "CUDA_ERROR_OUT_OF_MEMORY"
    assert report.number("max_allocated_mib") + 200 == 1000
    assert report["at_oom.info_free_mib"] == "0"
    assert report["at_oom.nvml_used_mib"] == report["at_oom.nvml_process_used_mib"] == "1000"
    assert report["freed_mib"] == "800"


def test_memory_mode_without_the_shim_sees_the_whole_card(smoke: Smoke) -> None:
    report = smoke.run("memory", "--step", "512m", shim=False, FAKE_CUDA_TOTAL_MEM="2g")
    assert report.returncode == 0, report.stdout + report.stderr
    assert report["device.0.info_total_mib"] == report["nvml.0.total_mib"] == "2048"
    assert report["max_allocated_mib"] == report["at_oom.nvml_used_mib"] == "2048"
    # the driver lists a host pid, not this process: what the shim's process list repairs
    assert report["at_oom.nvml_process_used_mib"] == "n/a"


def test_a_held_slice_is_seen_by_the_next_process_of_the_container(smoke: Smoke) -> None:
    env = _slice(smoke, VSLICE_CONTEXT_OVERHEAD="0")
    holder = smoke.start("hold", "--memory", "300m", "--seconds", "60", **env)
    try:
        held = _wait_holding(holder)
        report = smoke.run("memory", "--step", "100m", **env)
    finally:
        _stop(holder)
    assert held["held_mib"] == "300"
    assert report["device.0.info_free_mib"] == "700"
    assert report["max_allocated_mib"] == "700"
    pids = {report[f"nvml.0.process.{k}.pid"]: k for k in range(int(report["nvml.0.processes"]))}
    assert report[f"nvml.0.process.{pids[held['pid']]}.used_mib"] == "300"


def test_sigterm_ends_a_hold_early_and_frees_its_memory_through_the_driver(smoke: Smoke) -> None:
    # What a deleted pod's holder gets from the kubelet: SIGTERM, then the memory is free.
    env = _slice(smoke, VSLICE_CONTEXT_OVERHEAD="0")
    holder = smoke.start("hold", "--memory", "300m", "--seconds", "600", **env)
    try:
        _wait_holding(holder)
        holder.terminate()
        out, err = holder.communicate(timeout=10)
    finally:
        if holder.poll() is None:
            _stop(holder)
    assert holder.returncode == 0, out + err
    # What follows the holding line (already read): the stop, the free, the result.
    assert {"hold_stopped=SIGTERM", "freed_mib=300", "result=ok"} <= set(out.splitlines()), out
    after = smoke.run("memory", "--step", "100m", **env)
    assert after["device.0.info_free_mib"] == "1000"  # nothing left held in the region


def test_memory_hold_keeps_the_whole_slice_until_it_ends(smoke: Smoke) -> None:
    env = _slice(smoke, VSLICE_CONTEXT_OVERHEAD="0")
    holder = smoke.start("memory", "--hold", "60", **env)
    try:
        held = _wait_holding(holder)
        refused = smoke.run("hold", "--memory", "1m", "--seconds", "0", **env)
    finally:
        _stop(holder)
    assert held["max_allocated_mib"] == "1000"
    assert refused.returncode == 4
    assert refused["hold_error"] == "CUDA_ERROR_OUT_OF_MEMORY"
    assert refused["error"].startswith("cannot allocate 1 MiB")


def test_containers_on_one_card_of_a_node_add_up(smoke: Smoke) -> None:
    # two containers, no shim, one state file: the second sees the first's memory on its card
    node = {"FAKE_NVIDIA_GPUS": NODE}
    holder = smoke.start(
        "hold", "--memory", "10g", "--seconds", "60", shim=False, NVIDIA_VISIBLE_DEVICES="1", **node
    )
    try:
        _wait_holding(holder)
        report = smoke.run(
            "memory", "--device", "1", shim=False, NVIDIA_VISIBLE_DEVICES="0,1", **node
        )
    finally:
        _stop(holder)
    assert report["device.1.uuid"] == "GPU-4c1f0e3a-0000-4000-8000-000000000001"
    assert report["device.1.info_free_mib"] == "6144"
    assert report["max_allocated_mib"] == "6144"
    assert report["nvml.0.used_mib"] == "0"  # the other card is untouched


def test_compute_mode_reports_the_compute_slice(smoke: Smoke) -> None:
    report = smoke.run("compute", "--seconds", "3", **_slice(smoke, CUDA_DEVICE_SM_LIMIT="30"))
    assert report.returncode == 0, report.stdout + report.stderr
    assert report.first == "vslice-smoke version=1 mode=compute"
    assert report["kernel_ms"] == "2"
    assert abs(report.number("busy_fraction") - 0.30) <= 0.05, report.stdout
    assert abs(report.number("busy_ms") - 2 * int(report["launches"])) < 1  # events time kernels


def test_compute_mode_without_a_limit_keeps_the_device_busy(smoke: Smoke) -> None:
    report = smoke.run("compute", "--seconds", "1", "--kernel-ms", "1", shim=False)
    assert report.returncode == 0, report.stdout + report.stderr
    assert report.number("busy_fraction") >= 0.9


def test_no_gpu_exits_3_with_a_clear_line(smoke: Smoke) -> None:
    report = smoke.run("memory", shim=False, FAKE_NVIDIA_GPUS=NODE, NVIDIA_VISIBLE_DEVICES="none")
    assert report.returncode == 3
    assert report["devices"] == "0"
    assert report["error"] == "no GPU visible to CUDA"


def test_a_driver_that_cannot_load_exits_1_with_a_clear_line(smoke: Smoke, tmp_path: Path) -> None:
    missing = tmp_path / "libcuda.so.1"
    report = smoke.run("memory", "--cuda-library", str(missing))
    assert report.returncode == 1
    assert report["error"].startswith(f"cannot load {missing}")


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["fly"],
        ["hold", "--seconds", "1"],
        ["memory", "--step", "lots"],
        ["compute"],
        ["memory", "--device"],
        ["memory", "--colour", "red"],
    ],
)
def test_a_bad_command_line_exits_2(smoke: Smoke, args: list[str]) -> None:
    report = smoke.run(*args)
    assert report.returncode == 2
    assert "usage: vslice-smoke" in report.stderr


def test_a_device_the_container_lacks_exits_2(smoke: Smoke) -> None:
    report = smoke.run("memory", "--device", "3")
    assert report.returncode == 2
    assert report["error"] == "--device 3: only 1 GPU(s) visible"


def _pattern(key: str) -> str:
    """device.0.name -> device.<i>.name; nvml.0.process.1.pid -> nvml.<i>.process.<k>.pid"""
    names = iter(["<i>", "<k>"])
    return ".".join(next(names) if part.isdigit() else part for part in key.split("."))


def test_every_key_it_prints_is_documented(smoke: Smoke) -> None:
    env = _slice(smoke, CUDA_DEVICE_SM_LIMIT="50")
    reports = [
        smoke.run("memory", "--hold", "0.1", **env),
        smoke.run("hold", "--memory", "64m", "--seconds", "0", **env),
        smoke.run("hold", "--memory", "2g", "--seconds", "0", **env),
        smoke.run("compute", "--seconds", "0.3", **env),
        smoke.run("memory", "--nvml-library", "nowhere.so", **env),
    ]
    documented = set(re.findall(r"^\| `([^`]+)` \|", DOC.read_text(), flags=re.MULTILINE))
    printed = {_pattern(key) for report in reports for key in report.values}
    assert printed - documented == set()
    assert {"oom_at_mib", "busy_fraction", "nvml.error", "error"} <= printed


def test_the_card_gets_back_the_memory_of_a_process_killed_while_holding_it(smoke: Smoke) -> None:
    """As a real driver does: a process killed (SIGKILL, nothing of it runs after) no longer
    counts on the card. Only what live processes hold does."""
    card = {"FAKE_CUDA_TOTAL_MEM": "2g", "FAKE_CUDA_CONTEXT_MEM": "0"}
    holder = smoke.start("hold", "--memory", "1536m", "--seconds", "60", shim=False, **card)
    try:
        _wait_holding(holder)
        while_alive = smoke.run("memory", "--step", "256m", shim=False, **card)
    finally:
        _stop(holder)
    after = smoke.run("memory", "--step", "256m", shim=False, **card)
    assert while_alive["max_allocated_mib"] == "512", while_alive.stdout
    assert after["max_allocated_mib"] == "2048", after.stdout
    assert after["device.0.info_free_mib"] == "2048"
