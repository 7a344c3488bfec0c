"""The device plugin with ``injection: cdi``, over its real protocol: the node's CDI spec file
(written before registering, rewritten on inventory changes, never seen half-written, stale
copies removed), Allocate naming its devices, and the spec read by the CDI library containerd
itself uses (``cdi_check/``, built with Go). ``injection: mounts`` with driver edits is here
too; the mounts mode without them is test_deviceplugin_grpc.py.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubelet import Kubelet
from plugin_lab import (
    GPU_A,
    GPU_B,
    NODE,
    Lab,
    allocate,
    gpu_pod,
    grant,
    inventory,
    make_lab,
)
from test_deviceplugin_grpc import recorded
from vslice_node.handover.container import container_handover

SPEC = "vslice.io-gpu.json"
GPU_C = "GPU-6c7f0d8e-0000-4000-8000-00000000000c"
DEVICE_NODES = ("nvidia0", "nvidia1", "nvidia2", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")


@pytest.fixture
def dev_dir(tmp_path: Path) -> Path:
    """Stand-in device nodes: links to /dev/null, a character device every host has."""
    directory = tmp_path / "dev"
    directory.mkdir()
    for name in DEVICE_NODES:
        (directory / name).symlink_to("/dev/null")
    return directory


@pytest.fixture
def new_lab(short_dir: Path, tmp_path: Path) -> Iterator[Callable[..., Lab]]:
    labs: list[Lab] = []

    def make(**settings: Any) -> Lab:
        labs.append(make_lab(short_dir, tmp_path, **settings))
        return labs[-1]

    yield make
    for lab in labs:
        lab.plugin.stop()


@pytest.fixture
def lab(new_lab: Callable[..., Lab], dev_dir: Path) -> Lab:
    return new_lab(host_dev_dir=str(dev_dir))


@pytest.fixture
def running(lab: Lab) -> Iterator[Lab]:
    kubelet = Kubelet(lab.directory)
    lab.plugin.start()
    kubelet.next_registration()
    yield lab
    kubelet.stop()


def spec_of(lab: Lab) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((lab.files / "cdi" / SPEC).read_text())
    return document


def device_names(spec: dict[str, Any]) -> list[str]:
    return [f"{spec['kind']}={device['name']}" for device in spec["devices"]]


def wait_until(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


# -- CDI mode ----------------------------------------------------------------------------------


def test_allocate_names_cdi_devices_that_the_nodes_spec_file_defines(running: Lab) -> None:
    running.api.put_pod(
        gpu_pod("train", "2026-01-01T10:00:00Z", {"main": [grant(GPU_B, 1, 30720, 50)]})
    )
    answer = allocate(running.client(), f"{GPU_A}::2")
    assert [device.name for device in answer.cdi_devices] == [f"vslice.io/gpu={GPU_B}"]
    cache = "/run/vslice/uid-train/main"
    assert dict(answer.envs) == {
        "NVIDIA_VISIBLE_DEVICES": GPU_B,
        "CUDA_DEVICE_MEMORY_LIMIT_0": "30720m",
        "CUDA_DEVICE_SM_LIMIT": "50",
        "CUDA_DEVICE_SM_LIMIT_0": "50",
        "CUDA_DEVICE_MEMORY_SHARED_CACHE": f"{cache}/vslice.cache",
        "VSLICE_LIMITS_FILE": "/run/vslice-limits/limits",
    }
    assert [(m.container_path, m.host_path, m.read_only) for m in answer.mounts] == [
        (cache, str(running.cache_root / "uid-train" / "main"), False),
        ("/run/vslice-limits", str(running.files / "limits" / "uid-train" / "main"), True),
    ]
    assert list(answer.devices) == []
    spec = spec_of(running)
    assert device_names(spec) == [f"vslice.io/gpu={GPU_A}", f"vslice.io/gpu={GPU_B}"]
    shim = str(running.files / "libvslice.so")
    assert {m["containerPath"] for m in spec["containerEdits"]["mounts"]} == {
        shim,
        "/etc/ld.so.preload",
    }
    assert recorded(running, "train") == ["main"]
    status = running.plugin.status()
    assert status["injection"] == "cdi"
    assert status["cdi_spec"] == {"path": str(running.files / "cdi" / SPEC), "state": "written"}


def test_the_spec_file_exists_before_the_plugin_registers(lab: Lab) -> None:
    assert not (lab.files / "cdi").exists()
    lab.plugin.start()  # no kubelet yet: the file must not wait for one
    assert device_names(spec_of(lab)) == [f"vslice.io/gpu={GPU_A}", f"vslice.io/gpu={GPU_B}"]


def test_host_device_numbers_are_read_into_the_spec(running: Lab, dev_dir: Path) -> None:
    null = os.stat("/dev/null").st_rdev
    spec = spec_of(running)
    node = spec["devices"][1]["containerEdits"]["deviceNodes"][0]
    assert node == {
        "path": "/dev/nvidia1",
        "hostPath": str(dev_dir / "nvidia1"),
        "type": "c",
        "major": os.major(null),
        "minor": os.minor(null),
        "permissions": "rw",
    }
    assert running.plugin.status()["host_files"] == "ok"


def test_the_spec_follows_the_inventory_and_is_whole_at_every_moment(running: Lab) -> None:
    path = running.files / "cdi" / SPEC
    broken: list[str] = []
    reads = 0
    stop = threading.Event()

    def reader() -> None:
        nonlocal reads
        while not stop.is_set():
            try:
                json.loads(path.read_text())
                reads += 1
            except (OSError, ValueError) as exc:  # missing or partial: never acceptable
                broken.append(repr(exc))

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for round_ in range(6):
            extra = [{"uuid": GPU_C, "index": 2}] if round_ % 2 == 0 else []
            running.inventory_file.write_text(yaml.safe_dump(inventory(extra=extra)))
            wanted = 3 if extra else 2

            def rewritten(wanted: int = wanted) -> bool:
                return len(spec_of(running)["devices"]) == wanted

            wait_until(rewritten)
    finally:
        stop.set()
        thread.join(5)
    assert broken == []
    assert reads > 0
    assert sorted(p.name for p in path.parent.iterdir()) == [SPEC]


def test_a_node_without_gpus_removes_its_spec_file(running: Lab) -> None:
    empty = inventory()
    empty["nodes"][0]["gpus"] = []
    running.inventory_file.write_text(yaml.safe_dump(empty))
    wait_until(lambda: not (running.files / "cdi" / SPEC).exists())
    assert running.plugin.status()["cdi_spec"]["state"] == "no GPUs: no spec file"  # type: ignore[index]


def test_stale_spec_files_of_this_node_go_and_everything_else_stays(lab: Lab) -> None:
    directory = lab.files / "cdi"
    directory.mkdir()
    ours = {"cdiVersion": "0.6.0", "kind": "old.example/gpu", "devices": []}
    (directory / "old.example-gpu.json").write_text(
        json.dumps({**ours, "annotations": {"vslice.io/device-plugin": NODE}})
    )
    (directory / "other-node.json").write_text(
        json.dumps({**ours, "annotations": {"vslice.io/device-plugin": "gpu-node-2"}})
    )
    (directory / "nvidia.yaml").write_text("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\n")
    (directory / "broken.json").write_text("{")
    leftover = directory / f".vslice-{SPEC}.abc.tmp"
    leftover.write_text("{")
    os.utime(leftover, (time.time() - 3600, time.time() - 3600))
    fresh = directory / f".vslice-{SPEC}.def.tmp"  # another writer may still be at work
    fresh.write_text("{")
    lab.plugin.start()
    assert sorted(p.name for p in directory.iterdir()) == sorted(
        [SPEC, "other-node.json", "nvidia.yaml", "broken.json", fresh.name]
    )


def test_a_spec_directory_that_cannot_be_written_is_reported_and_allocate_still_answers(
    new_lab: Callable[..., Lab], tmp_path: Path
) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    lab = new_lab(cdi_spec_dir=str(blocker / "cdi"))
    kubelet = Kubelet(lab.directory)
    try:
        lab.plugin.start()
        kubelet.next_registration()
        state = lab.plugin.status()["cdi_spec"]["state"]  # type: ignore[index]
        assert state.startswith("failing: Not a directory")
        lab.api.put_pod(gpu_pod("train", "2026-01-01T10:00:00Z", {"main": [grant(GPU_A, 0)]}))
        answer = allocate(lab.client(), f"{GPU_A}::0")
        assert [d.name for d in answer.cdi_devices] == [f"vslice.io/gpu={GPU_A}"]
    finally:
        kubelet.stop()


def test_missing_host_files_are_reported_on_status_and_logged_once_each(
    new_lab: Callable[..., Lab], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    empty = tmp_path / "empty-dev"
    empty.mkdir()
    library = tmp_path / "libcuda.so.1"
    lab = new_lab(host_dev_dir=str(empty), driver_libraries=[str(library)])
    with caplog.at_level(logging.WARNING, logger="vslice.deviceplugin"):
        lab.plugin.start()
        time.sleep(0.5)  # a few refresh passes: still one line per path
    expected = [str(library)] + [str(empty / n) for n in ("nvidia0", "nvidia1", *DEVICE_NODES[3:])]
    assert lab.plugin.status()["host_files"] == f"missing: {', '.join(expected)}"
    logged = [r.__dict__["path"] for r in caplog.records if "missing" in r.getMessage()]
    assert logged == expected
    # The spec is written anyway: the runtime reads the nodes once they exist.
    assert "type" not in spec_of(lab)["devices"][0]["containerEdits"]["deviceNodes"][0]
    library.write_bytes(b"\x7fELF")
    for name in DEVICE_NODES:
        (empty / name).symlink_to("/dev/null")
    wait_until(lambda: lab.plugin.status()["host_files"] == "ok")
    wait_until(lambda: "type" in spec_of(lab)["devices"][0]["containerEdits"]["deviceNodes"][0])


# -- mounts mode ---------------------------------------------------------------------------------


def test_mounts_mode_hands_over_the_driver_and_removes_the_spec_cdi_mode_wrote(
    new_lab: Callable[..., Lab], dev_dir: Path, tmp_path: Path
) -> None:
    directory = tmp_path / "cdi"
    directory.mkdir()
    written = {
        "cdiVersion": "0.6.0",
        "kind": "vslice.io/gpu",
        "annotations": {"vslice.io/device-plugin": NODE},
        "devices": [],
    }
    (directory / SPEC).write_text(json.dumps(written))
    library = tmp_path / "libcuda.so.1"
    library.write_bytes(b"\x7fELF")
    lab = new_lab(
        injection="mounts",
        host_dev_dir=str(dev_dir),
        driver_libraries=[str(library)],
        driver_env={"FAKE_NVIDIA_GPUS": "2"},
        driver_mounts=[{"host_path": str(tmp_path), "container_path": "/var/lib/fake"}],
    )
    kubelet = Kubelet(lab.directory)
    try:
        lab.plugin.start()
        kubelet.next_registration()
        assert not (directory / SPEC).exists()
        assert lab.plugin.status()["cdi_spec"] == "not used"
        lab.api.put_pod(gpu_pod("train", "2026-01-01T10:00:00Z", {"main": [grant(GPU_B, 1)]}))
        answer = allocate(lab.client(), f"{GPU_A}::0")
    finally:
        kubelet.stop()
    assert list(answer.cdi_devices) == []
    assert answer.envs["FAKE_NVIDIA_GPUS"] == "2"
    assert answer.envs["LD_LIBRARY_PATH"] == "/usr/local/nvidia/lib64"
    assert answer.envs["NVIDIA_VISIBLE_DEVICES"] == GPU_B
    mounts = {m.container_path: (m.host_path, m.read_only) for m in answer.mounts}
    assert mounts["/usr/local/nvidia/lib64/libcuda.so.1"] == (str(library), True)
    assert mounts["/var/lib/fake"] == (str(tmp_path), True)
    assert [(d.container_path, d.host_path) for d in answer.devices] == [
        (f"/dev/{name}", str(dev_dir / name)) for name in ("nvidia1", *DEVICE_NODES[3:])
    ]


# -- the CDI library containerd uses -----------------------------------------------------------


@pytest.mark.slow
def test_containerds_cdi_library_reads_the_spec_and_injects_what_mounts_mode_would(
    new_lab: Callable[..., Lab], dev_dir: Path, tmp_path: Path, cdi_check: Path
) -> None:
    library = tmp_path / "libcuda.so.1"
    library.write_bytes(b"\x7fELF")
    driver = {
        "host_dev_dir": str(dev_dir),
        "driver_libraries": [str(library)],
        "driver_env": {"FAKE_NVIDIA_GPUS": "2"},
        "driver_mounts": [{"host_path": str(tmp_path), "container_path": "/var/lib/fake"}],
    }
    lab = new_lab(**driver)
    lab.plugin.start()
    lab.api.put_pod(gpu_pod("train", "2026-01-01T10:00:00Z", {"main": [grant(GPU_B, 1)]}))
    answer = allocate(lab.client(), f"{GPU_A}::0")
    names = [device.name for device in answer.cdi_devices]
    result = subprocess.run(
        [str(cdi_check), str(lab.files / "cdi"), *names],
        capture_output=True,
        text=True,
        timeout=60,
    )
    report = json.loads(result.stdout)
    assert report["errors"] == [] and result.returncode == 0, result.stdout + result.stderr
    assert report["devices"] == [f"vslice.io/gpu={GPU_A}", f"vslice.io/gpu={GPU_B}"]
    oci = report["oci"]
    injected_env = dict(item.split("=", 1) for item in oci["process"]["env"])
    injected_mounts = {m["destination"]: m["source"] for m in oci["mounts"]}
    injected_devices = {d["path"] for d in oci["linux"]["devices"]}
    # The same container in mounts mode: CDI must add exactly what the response adds there.
    plain = dataclasses.replace(lab.plugin.handover, injection="mounts")
    reference = container_handover(
        plain, [grant(GPU_B, 1)], "uid-train", "main", {GPU_A: 0, GPU_B: 1}
    )
    cdi_only = set(reference.envs) - set(answer.envs)
    assert injected_env == {k: reference.envs[k] for k in cdi_only}
    own = {m.container_path for m in answer.mounts}
    assert injected_mounts == {
        m.container_path: m.host_path for m in reference.mounts if m.container_path not in own
    }
    assert injected_devices == {d.container_path for d in reference.devices}
    null = os.stat("/dev/null").st_rdev
    rules = oci["linux"]["resources"]["devices"]
    assert {(r["type"], r["major"], r["minor"], r["access"]) for r in rules} == {
        ("c", os.major(null), os.minor(null), "rw")
    }
