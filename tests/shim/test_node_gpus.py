"""A node's GPUs in the fake driver (FAKE_NVIDIA_GPUS) and what a container sees of them
(NVIDIA_VISIBLE_DEVICES, then CUDA_VISIBLE_DEVICES), with one shared state per node: every
card keeps its model, UUID and size, and containers on one card share its memory."""

from __future__ import annotations

import subprocess

import pytest
from conftest import GIB, MIB, Outcome, Probe, Smoke

CUDA_SUCCESS = 0
CUDA_ERROR_OUT_OF_MEMORY = 2
CUDA_ERROR_NO_DEVICE = 100

T4_A = "GPU-4c1f0e3a-0000-4000-8000-000000000000"
A100 = "GPU-lab-a100"  # not a canonical UUID: cuDeviceGetUuid gives a stable hash of it
T4_B = "GPU-4c1f0e3a-0000-4000-8000-0000000000b2"
NODE = f"{T4_A},Tesla-T4,15360m; {A100},NVIDIA A100-SXM4-80GB,80g; {T4_B},Tesla-T4,16g"


def _rows(out: Outcome, command: str) -> list[dict[str, str]]:
    """The "device"/"nvmlid" lines: key=value fields, the name last (it may hold spaces)."""
    rows = []
    for line in out.lines:
        if line.split()[:1] != [command]:
            continue
        head, name = line.split(" name=", 1)
        fields = dict(item.split("=", 1) for item in head.split()[2:])
        rows.append({"code": head.split()[1], **fields, "name": name})
    return rows


def _gpus(
    probe: Probe, shim: bool = False, **env: str
) -> tuple[list[dict[str, str]], list[dict[str, str]], Outcome]:
    out = probe.run("init", "devices", "nvmlids", shim=shim, FAKE_NVIDIA_GPUS=NODE, **env)
    return _rows(out, "device"), _rows(out, "nvmlid"), out


def test_every_gpu_of_the_node_has_its_model_uuid_and_memory(probe: Probe) -> None:
    cuda, nvml, _ = _gpus(probe)
    assert [(d["name"], int(d["total"])) for d in cuda] == [
        ("Tesla-T4", 15360 * MIB),
        ("NVIDIA A100-SXM4-80GB", 80 * GIB),
        ("Tesla-T4", 16 * GIB),
    ]
    assert cuda[0]["uuid"] == "4c1f0e3a000040008000000000000000"  # the UUID's own hex digits
    assert cuda[2]["uuid"] == "4c1f0e3a0000400080000000000000b2"
    assert [(g["uuid"], g["name"], g["index"], g["minor"]) for g in nvml] == [
        (T4_A, "Tesla-T4", "0", "0"),
        (A100, "NVIDIA A100-SXM4-80GB", "1", "1"),
        (T4_B, "Tesla-T4", "2", "2"),
    ]
    assert all(g["code"] == "0" and g["byuuid"] == "1" for g in nvml)


def test_a_non_canonical_uuid_gets_a_stable_distinct_hash(probe: Probe) -> None:
    first, _, _ = _gpus(probe)
    again, _, _ = _gpus(probe, NVIDIA_VISIBLE_DEVICES="1")
    assert first[1]["uuid"] == again[0]["uuid"]
    assert len({d["uuid"] for d in first}) == 3
    assert first[1]["uuid"] not in ("0" * 32, "")


@pytest.mark.parametrize("visible", [f"{T4_B},0", f"2, {T4_A}", "0,2", "2,0,2"])
def test_nvidia_visible_devices_picks_gpus_by_uuid_or_index_in_physical_order(
    probe: Probe, visible: str
) -> None:
    cuda, nvml, _ = _gpus(probe, NVIDIA_VISIBLE_DEVICES=visible)
    assert [d["name"] for d in cuda] == ["Tesla-T4", "Tesla-T4"]
    assert [int(d["total"]) for d in cuda] == [15360 * MIB, 16 * GIB]
    # NVML: container indexes 0, 1; minor numbers are the node's /dev/nvidia0 and /dev/nvidia2
    assert [(g["uuid"], g["index"], g["minor"]) for g in nvml] == [
        (T4_A, "0", "0"),
        (T4_B, "1", "2"),
    ]


@pytest.mark.parametrize("visible", ["none", "void", ""])
def test_none_void_and_empty_give_no_gpu(probe: Probe, visible: str) -> None:
    cuda, nvml, out = _gpus(probe, NVIDIA_VISIBLE_DEVICES=visible)
    assert out.values("init") == {"count": 0}
    assert out.code("init") == CUDA_ERROR_NO_DEVICE  # cuInit without a device, like the driver
    assert (cuda, nvml) == ([], [])
    assert out.stderr == ""


@pytest.mark.parametrize("visible", ["all", None])
def test_all_or_unset_gives_every_gpu(probe: Probe, visible: str | None) -> None:
    env = {} if visible is None else {"NVIDIA_VISIBLE_DEVICES": visible}
    cuda, nvml, _ = _gpus(probe, **env)
    assert (len(cuda), len(nvml)) == (3, 3)


def test_cuda_visible_devices_applies_within_the_container(probe: Probe) -> None:
    cuda, nvml, _ = _gpus(probe, NVIDIA_VISIBLE_DEVICES="0,2", CUDA_VISIBLE_DEVICES="1")
    assert [(d["name"], int(d["total"])) for d in cuda] == [("Tesla-T4", 16 * GIB)]
    assert len(nvml) == 2  # NVML ignores CUDA_VISIBLE_DEVICES


def _hold(probe: Probe, *commands: str, **env: str) -> subprocess.Popen[str]:
    return probe.hold(*commands, shim=False, FAKE_NVIDIA_GPUS=NODE, **env)


def test_containers_on_one_gpu_share_its_memory(probe: Probe) -> None:
    # container A sees only the 16 GiB T4 (physical 2) and holds 10 GiB of it
    a = _hold(probe, "ctx:0", "alloc:10g", NVIDIA_VISIBLE_DEVICES=T4_B)
    try:
        # container B sees both T4s; its device 1 is the same card
        b = probe.run(
            "ctx:1",
            "alloc:7g",
            "alloc:6g",
            "nvml",
            "ctx:0",
            "alloc:15g",
            shim=False,
            FAKE_NVIDIA_GPUS=NODE,
            NVIDIA_VISIBLE_DEVICES="0,2",
        )
    finally:
        a.kill()
        a.wait()
    assert b.code("alloc:7g") == CUDA_ERROR_OUT_OF_MEMORY  # 10 + 7 > 16
    assert b.code("alloc:6g") == CUDA_SUCCESS
    assert b.nvml(1)["used"] == 16 * GIB
    assert b.code("alloc:15g") == CUDA_SUCCESS  # the other T4 is untouched


@pytest.mark.parametrize(
    "entry",
    [
        "GPU-x,Tesla-T4",  # two fields
        "GPU-x,Tesla-T4,16g,extra",
        "GPU-x,Tesla-T4,lots",
        "GPU-x,Tesla-T4,0",
        ",Tesla-T4,16g",
        "GPU-x,,16g",
    ],
)
def test_a_bad_entry_names_the_variable_and_the_entry_and_gives_no_gpu(
    smoke: Smoke, entry: str
) -> None:
    # vslice-smoke loads both libraries on its own, so both read the list: one line all the same
    report = smoke.run("memory", shim=False, FAKE_NVIDIA_GPUS=f"{T4_A},Tesla-T4,16g;{entry}")
    assert report.returncode == 3
    assert (report["devices"], report["nvml.devices"]) == ("0", "0")
    lines = report.stderr.splitlines()
    assert len(lines) == 1, report.stderr
    assert "FAKE_NVIDIA_GPUS" in lines[0] and f"'{entry}'" in lines[0]


def test_a_repeated_uuid_is_a_bad_entry(probe: Probe) -> None:
    out = probe.run("init", shim=False, FAKE_NVIDIA_GPUS=f"{T4_A},Tesla-T4,16g;{T4_A},T4,8g")
    assert out.values("init") == {"count": 0}
    assert "FAKE_NVIDIA_GPUS" in out.stderr and "repeats the UUID" in out.stderr


def test_an_unknown_visible_device_gives_no_gpu(probe: Probe) -> None:
    cuda, nvml, out = _gpus(probe, NVIDIA_VISIBLE_DEVICES="0,GPU-nope")
    assert (cuda, nvml) == ([], [])
    assert out.stderr.count("\n") == 1
    assert "NVIDIA_VISIBLE_DEVICES" in out.stderr and "'GPU-nope'" in out.stderr


def test_the_shim_slices_a_gpu_named_by_a_non_canonical_uuid(probe: Probe) -> None:
    # NVML gives "GPU-lab-a100"; the shim must find the CUDA device it hashes to
    out = probe.run(
        "ctx:0",
        "alloc:300m",
        "nvml",
        FAKE_NVIDIA_GPUS=NODE,
        NVIDIA_VISIBLE_DEVICES="1",
        CUDA_DEVICE_MEMORY_LIMIT="1g",
        CUDA_DEVICE_MEMORY_SHARED_CACHE=str(probe.region),
    )
    assert (out.nvml(0)["total"], out.nvml(0)["used"]) == (GIB, 300 * MIB)
