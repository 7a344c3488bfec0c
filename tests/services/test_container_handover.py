"""What a container is handed, in both injection modes, and the node's CDI spec: pure functions."""

from __future__ import annotations

import dataclasses
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from vslice_core.errors import InvalidRequest
from vslice_core.model import GpuGrant
from vslice_node.agent.settings import NodeAgentSettings
from vslice_node.handover import cdispec
from vslice_node.handover.cdispec import DeviceNumbers
from vslice_node.handover.container import (
    ContainerHandover,
    Handover,
    Layout,
    cdi_spec,
    container_handover,
    environment,
    limits_text,
)
from vslice_node.handover.driver import Driver
from vslice_node.handover.edits import DeviceNodeSpec, MountSpec
from vslice_serving.settings import load_settings

SHIM = "/usr/local/vslice/lib/libvslice.so"
PRELOAD = "/usr/local/vslice/ld.so.preload"
RO = ["ro", "nosuid", "nodev", "bind"]
RW = ["rw", "nosuid", "nodev", "bind"]

LAB_DRIVER = Driver(
    libraries=("/opt/vslice/fake/libcuda.so.1", "/opt/vslice/fake/libnvidia-ml.so.1"),
    env={"FAKE_NVIDIA_GPUS": "2"},
    mounts=(MountSpec("/var/lib/fake-gpu", "/srv/lab/fake-gpu", read_only=False),),
    dev_dir="/srv/lab/dev",
)


def grant(uuid: str = "GPU-a", index: int = 0, memory: int = 1024, cores: int = 30) -> GpuGrant:
    return GpuGrant(uuid=uuid, index=index, memory_mib=memory, cores=cores)


def handover(**changes: Any) -> Handover:
    base = Handover(Layout(cache_root=Path("/var/lib/vslice/containers")), LAB_DRIVER)
    return dataclasses.replace(base, **changes)


def test_environment_names_each_visible_gpu_limit_by_its_position() -> None:
    envs = environment(
        [grant("GPU-x", 3, 4096, 25), grant("GPU-y", 1, 2048, 25)],
        PurePosixPath("/run/vslice/u/c/vslice.cache"),
    )
    assert envs == {
        "NVIDIA_VISIBLE_DEVICES": "GPU-x,GPU-y",
        "CUDA_DEVICE_MEMORY_SHARED_CACHE": "/run/vslice/u/c/vslice.cache",
        "CUDA_DEVICE_SM_LIMIT": "25",
        "CUDA_DEVICE_MEMORY_LIMIT_0": "4096m",
        "CUDA_DEVICE_SM_LIMIT_0": "25",
        "CUDA_DEVICE_MEMORY_LIMIT_1": "2048m",
        "CUDA_DEVICE_SM_LIMIT_1": "25",
    }


def test_every_container_gets_its_own_region_path_and_host_directory() -> None:
    plan = handover(injection="mounts", driver=Driver())
    one = container_handover(plan, [grant()], "uid-1", "main", {"GPU-a": 4})
    two = container_handover(plan, [grant()], "uid-1", "sidecar", {"GPU-a": 4})
    assert (
        one.envs["CUDA_DEVICE_MEMORY_SHARED_CACHE"] != two.envs["CUDA_DEVICE_MEMORY_SHARED_CACHE"]
    )
    assert {m.host_path for m in one.mounts} & {m.host_path for m in two.mounts} == {SHIM, PRELOAD}
    assert one.devices[0].host_path == "/dev/nvidia4"


def test_the_limits_file_holds_exactly_what_the_shim_enforces() -> None:
    text = limits_text(
        [grant("GPU-x", 3, 4096, 25), grant("GPU-y", 1, 2048, 40)],
        PurePosixPath("/run/vslice/u/c/vslice.cache"),
        {"VSLICE_CONTEXT_OVERHEAD": "300m", "VSLICE_LOG_LEVEL": "info"},
        "u",
        "c",
    )
    assert text.splitlines()[1:] == [
        "VSLICE_LIMITS_VERSION=1",
        "CUDA_DEVICE_MEMORY_SHARED_CACHE=/run/vslice/u/c/vslice.cache",
        "CUDA_DEVICE_MEMORY_LIMIT_0=4096m",
        "CUDA_DEVICE_SM_LIMIT_0=25",
        "CUDA_DEVICE_MEMORY_LIMIT_1=2048m",
        "CUDA_DEVICE_SM_LIMIT_1=40",
        "VSLICE_CONTEXT_OVERHEAD=300m",
    ]
    assert text.startswith("# ") and text.endswith("\n")


def test_the_limits_directory_is_mounted_read_only_apart_from_the_region() -> None:
    answer = container_handover(handover(), [grant()], "uid-1", "main", {})
    mounts = {m.container_path: m for m in answer.mounts}
    assert mounts["/run/vslice-limits"] == LIMITS_MOUNT
    assert mounts["/run/vslice-limits"].read_only
    assert not LIMITS_MOUNT.host_path.startswith("/var/lib/vslice/containers")


def test_node_wide_shim_settings_reach_the_container_only_when_set() -> None:
    settings = NodeAgentSettings(
        backend="static", inventory="x.yaml", context_overhead="300m", shim_log_level=""
    )
    shim_env = settings.handover.shim_env
    assert shim_env == {"VSLICE_CONTEXT_OVERHEAD": "300m"}
    for mode in ("cdi", "mounts"):
        answer = container_handover(
            handover(injection=mode, shim_env=shim_env), [grant()], "u", "c", {}
        )
        assert answer.envs["VSLICE_CONTEXT_OVERHEAD"] == "300m"
        assert "VSLICE_LOG_LEVEL" not in answer.envs


# -- the two modes -------------------------------------------------------------------------


LIMITS = {
    "NVIDIA_VISIBLE_DEVICES": "GPU-b",
    "CUDA_DEVICE_MEMORY_SHARED_CACHE": "/run/vslice/uid-1/main/vslice.cache",
    "CUDA_DEVICE_SM_LIMIT": "30",
    "CUDA_DEVICE_MEMORY_LIMIT_0": "1024m",
    "CUDA_DEVICE_SM_LIMIT_0": "30",
    "VSLICE_LIMITS_FILE": "/run/vslice-limits/limits",
}
REGION = MountSpec("/run/vslice/uid-1/main", "/var/lib/vslice/containers/uid-1/main", False)
LIMITS_MOUNT = MountSpec("/run/vslice-limits", "/var/lib/vslice/limits/uid-1/main", True)


def test_in_mounts_mode_the_response_carries_everything_including_the_driver() -> None:
    answer = container_handover(
        handover(injection="mounts"), [grant("GPU-b", 1)], "uid-1", "main", {}
    )
    assert answer == ContainerHandover(
        envs={
            "FAKE_NVIDIA_GPUS": "2",
            "LD_LIBRARY_PATH": "/usr/local/nvidia/lib64",
            **LIMITS,
        },
        mounts=[
            MountSpec(SHIM, SHIM, True),
            MountSpec("/etc/ld.so.preload", PRELOAD, True),
            MountSpec("/usr/local/nvidia/lib64/libcuda.so.1", LAB_DRIVER.libraries[0], True),
            MountSpec("/usr/local/nvidia/lib64/libnvidia-ml.so.1", LAB_DRIVER.libraries[1], True),
            MountSpec("/var/lib/fake-gpu", "/srv/lab/fake-gpu", False),
            REGION,
            LIMITS_MOUNT,
        ],
        devices=[
            DeviceNodeSpec("/dev/nvidia1", "/srv/lab/dev/nvidia1"),
            DeviceNodeSpec("/dev/nvidiactl", "/srv/lab/dev/nvidiactl"),
            DeviceNodeSpec("/dev/nvidia-uvm", "/srv/lab/dev/nvidia-uvm"),
            DeviceNodeSpec("/dev/nvidia-uvm-tools", "/srv/lab/dev/nvidia-uvm-tools"),
        ],
        cdi_devices=[],
    )


def test_without_driver_settings_mounts_mode_answers_as_before_cdi() -> None:
    plan = handover(injection="mounts", driver=Driver())
    answer = container_handover(plan, [grant("GPU-b", 1)], "uid-1", "main", {"GPU-b": 3})
    assert answer.envs == LIMITS
    assert answer.mounts == [
        MountSpec(SHIM, SHIM, True),
        MountSpec("/etc/ld.so.preload", PRELOAD, True),
        REGION,
        LIMITS_MOUNT,
    ]
    assert [d.host_path for d in answer.devices] == [
        "/dev/nvidia3",
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
    ]
    assert answer.cdi_devices == []


def test_in_cdi_mode_the_response_names_the_gpus_and_keeps_only_what_is_per_container() -> None:
    grants = [grant("GPU-b", 1), grant("GPU-a", 0)]
    answer = container_handover(handover(), grants, "uid-1", "main", {"GPU-a": 0, "GPU-b": 1})
    assert answer == ContainerHandover(
        envs={
            **LIMITS,
            "NVIDIA_VISIBLE_DEVICES": "GPU-b,GPU-a",
            "CUDA_DEVICE_MEMORY_LIMIT_1": "1024m",
            "CUDA_DEVICE_SM_LIMIT_1": "30",
        },
        mounts=[REGION, LIMITS_MOUNT],
        devices=[],
        cdi_devices=["vslice.io/gpu=GPU-b", "vslice.io/gpu=GPU-a"],
    )


def test_driver_cdi_device_templates_add_a_name_per_granted_gpu_in_both_modes() -> None:
    templates = ("nvidia.com/gpu={uuid}", "example.com/gpu=card{index}")
    grants = [grant("GPU-b", 1), grant("GPU-a", 0)]
    cdi = container_handover(handover(driver_cdi_devices=templates), grants, "u", "c", {})
    assert cdi.cdi_devices == [
        "vslice.io/gpu=GPU-b",
        "vslice.io/gpu=GPU-a",
        "nvidia.com/gpu=GPU-b",
        "example.com/gpu=card1",
        "nvidia.com/gpu=GPU-a",
        "example.com/gpu=card0",
    ]
    plan = handover(injection="mounts", driver_cdi_devices=("nvidia.com/gpu={uuid}",))
    mounts = container_handover(plan, grants, "u", "c", {})
    assert mounts.cdi_devices == ["nvidia.com/gpu=GPU-b", "nvidia.com/gpu=GPU-a"]


def test_the_node_spec_has_one_device_per_gpu_and_the_shared_edits_once() -> None:
    numbers = {
        "/srv/lab/dev/nvidia0": DeviceNumbers("c", 195, 0),
        "/srv/lab/dev/nvidiactl": DeviceNumbers("c", 195, 255),
    }
    spec = cdi_spec(handover(), "gpu-node-1", {"GPU-b": 1, "GPU-a": 0}, numbers)
    assert spec == {
        "cdiVersion": "0.6.0",
        "kind": "vslice.io/gpu",
        "annotations": {"vslice.io/device-plugin": "gpu-node-1"},
        "devices": [
            {
                "name": "GPU-a",
                "containerEdits": {
                    "deviceNodes": [
                        {
                            "path": "/dev/nvidia0",
                            "hostPath": "/srv/lab/dev/nvidia0",
                            "type": "c",
                            "major": 195,
                            "minor": 0,
                            "permissions": "rw",
                        }
                    ]
                },
            },
            {
                "name": "GPU-b",
                "containerEdits": {
                    "deviceNodes": [
                        # No host node to read: the runtime stats hostPath itself.
                        {
                            "path": "/dev/nvidia1",
                            "hostPath": "/srv/lab/dev/nvidia1",
                            "permissions": "rw",
                        }
                    ]
                },
            },
        ],
        "containerEdits": {
            "env": ["FAKE_NVIDIA_GPUS=2", "LD_LIBRARY_PATH=/usr/local/nvidia/lib64"],
            "deviceNodes": [
                {
                    "path": "/dev/nvidiactl",
                    "hostPath": "/srv/lab/dev/nvidiactl",
                    "type": "c",
                    "major": 195,
                    "minor": 255,
                    "permissions": "rw",
                },
                {
                    "path": "/dev/nvidia-uvm",
                    "hostPath": "/srv/lab/dev/nvidia-uvm",
                    "permissions": "rw",
                },
                {
                    "path": "/dev/nvidia-uvm-tools",
                    "hostPath": "/srv/lab/dev/nvidia-uvm-tools",
                    "permissions": "rw",
                },
            ],
            "mounts": [
                {"hostPath": SHIM, "containerPath": SHIM, "options": RO, "type": "bind"},
                {
                    "hostPath": PRELOAD,
                    "containerPath": "/etc/ld.so.preload",
                    "options": RO,
                    "type": "bind",
                },
                {
                    "hostPath": "/opt/vslice/fake/libcuda.so.1",
                    "containerPath": "/usr/local/nvidia/lib64/libcuda.so.1",
                    "options": RO,
                    "type": "bind",
                },
                {
                    "hostPath": "/opt/vslice/fake/libnvidia-ml.so.1",
                    "containerPath": "/usr/local/nvidia/lib64/libnvidia-ml.so.1",
                    "options": RO,
                    "type": "bind",
                },
                {
                    "hostPath": "/srv/lab/fake-gpu",
                    "containerPath": "/var/lib/fake-gpu",
                    "options": RW,
                    "type": "bind",
                },
            ],
        },
    }


def _applied(spec: dict[str, Any], names: list[str], answer: ContainerHandover) -> dict[str, Any]:
    """What a runtime ends up with: the response, then spec-level edits and each device's."""
    edits = [spec["containerEdits"]] + [
        d["containerEdits"] for d in spec["devices"] if f"{spec['kind']}={d['name']}" in names
    ]
    env = dict(answer.envs)
    for part in edits:
        env.update(item.split("=", 1) for item in part.get("env", []))
    mounts = {(m.container_path, m.host_path, m.read_only) for m in answer.mounts} | {
        (m["containerPath"], m["hostPath"], m["options"][0] == "ro")
        for part in edits
        for m in part.get("mounts", [])
    }
    devices = {(d.container_path, d.host_path) for d in answer.devices} | {
        (d["path"], d["hostPath"]) for part in edits for d in part.get("deviceNodes", [])
    }
    return {"env": env, "mounts": mounts, "devices": devices}


@given(
    cores=st.lists(st.integers(0, 100), min_size=1, max_size=3),
    memory=st.integers(1, 81920),
)
def test_both_modes_give_a_container_exactly_the_same_edits(cores: list[int], memory: int) -> None:
    minors = {"GPU-a": 0, "GPU-b": 1, "GPU-c": 2}
    grants = [grant(uuid, minors[uuid], memory, c) for uuid, c in zip(minors, cores, strict=False)]
    cdi = container_handover(handover(), grants, "uid-1", "main", minors)
    spec = cdi_spec(handover(), "n", minors, {})
    mounts = container_handover(handover(injection="mounts"), grants, "uid-1", "main", minors)
    assert _applied(spec, cdi.cdi_devices, cdi) == _applied(spec, [], mounts)


# -- CDI names -----------------------------------------------------------------------------


def test_a_gpu_uuid_that_is_a_valid_cdi_name_is_used_as_it_is() -> None:
    uuid = "GPU-6c7f0d8e-0000-4000-8000-00000000000a"
    assert cdispec.device_name(uuid) == uuid
    assert cdispec.qualified_name("vslice.io/gpu", uuid) == f"vslice.io/gpu={uuid}"


def test_other_uuids_become_valid_names_that_still_tell_gpus_apart() -> None:
    one, two = cdispec.device_name("MIG-GPU-x/1/0"), cdispec.device_name("MIG-GPU-x_1/0")
    assert one.startswith("MIG-GPU-x_1_0-") and one != two
    assert cdispec.is_device_name(one) and cdispec.is_device_name(two)
    assert cdispec.is_device_name(cdispec.device_name("/"))


@given(st.text(min_size=1, max_size=40))
def test_every_uuid_gets_a_valid_cdi_device_name(uuid: str) -> None:
    name = cdispec.device_name(uuid)
    assert cdispec.is_device_name(name)
    assert cdispec.qualified_problem(cdispec.qualified_name(cdispec.DEFAULT_KIND, uuid)) is None


@pytest.mark.parametrize(
    ("kind", "valid"),
    [
        ("vslice.io/gpu", True),
        ("example.com/gpu.v2", True),
        ("a-b_c/x9", True),
        ("vslice.io", False),
        ("vslice.io/gpu/x", False),
        ("1vendor/gpu", False),
        ("vendor/gpu-", False),
        ("v/gpu", False),  # one-character parts crash the Go parser's check
        ("vendor/g p", False),
    ],
)
def test_cdi_kinds_follow_the_cdi_librarys_rules(kind: str, valid: bool) -> None:
    assert (cdispec.kind_problem(kind) is None) is valid


# -- settings ------------------------------------------------------------------------------


def test_the_new_settings_default_to_cdi_with_no_driver_edits() -> None:
    settings = NodeAgentSettings(backend="static", inventory="x.yaml")
    assert settings.handover.injection == "cdi"
    assert settings.cdi.spec_dir == "/var/run/cdi"
    assert settings.cdi.kind == "vslice.io/gpu"
    assert settings.driver.libraries == []
    assert settings.driver.container_dir == "/usr/local/nvidia/lib64"
    assert settings.driver.env == {}
    assert settings.driver.mounts == []
    assert settings.driver.host_dev_dir == "/dev"
    assert settings.driver.cdi_devices == []


def test_driver_settings_read_from_yaml_keep_numbers_as_strings(tmp_path: Path) -> None:
    config = tmp_path / "device-plugin.yaml"
    config.write_text(
        "backend: static\ninventory: x.yaml\n"
        "driver_env: {FAKE_NVIDIA_GPUS: 2, FAKE_FLAG: true}\n"
        "driver_mounts: [{host_path: /srv/state, container_path: /var/state, read_only: false}]\n"
    )
    settings = load_settings(NodeAgentSettings, config)
    assert settings.driver.env == {"FAKE_NVIDIA_GPUS": "2", "FAKE_FLAG": "true"}
    assert settings.driver.mounts[0].read_only is False


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"injection": "oci"}, "handover.injection: Input should be 'cdi' or 'mounts', got 'oci'"),
        ({"cdi_spec_dir": "cdi"}, "cdi.spec_dir must be an absolute path, got 'cdi'"),
        ({"host_dev_dir": "dev"}, "driver.host_dev_dir must be an absolute path, got 'dev'"),
        ({"driver_container_dir": "lib"}, "driver.container_dir must be an absolute path"),
        ({"cdi_kind": "vslice.io"}, "cdi.kind must be 'vendor/class' with one '/', got"),
        ({"cdi_kind": "vslice.io/g"}, "cdi.kind class 'g' must start with a letter"),
        ({"driver_libraries": ["libcuda.so.1"]}, "driver.libraries[0] must be an absolute path"),
        (
            {"driver_libraries": ["/a/libcuda.so.1", "/b/libcuda.so.1"]},
            "'/a/libcuda.so.1' and '/b/libcuda.so.1' would both be mounted as 'libcuda.so.1'",
        ),
        (
            {"driver_env": {"CUDA_DEVICE_MEMORY_LIMIT_0": "99g"}},
            "driver.env must not set 'CUDA_DEVICE_MEMORY_LIMIT_0': Allocate sets it",
        ),
        ({"driver_env": {"A=B": "1"}}, "driver.env: 'A=B' is not a usable variable name"),
        (
            {"driver_libraries": ["/a/libcuda.so.1"], "driver_env": {"LD_LIBRARY_PATH": "/x"}},
            "driver.env must not set 'LD_LIBRARY_PATH' when driver.libraries are given",
        ),
        (
            {"driver_mounts": [{"host_path": "state", "container_path": "/state"}]},
            "driver.mounts[0].host_path must be an absolute path, got 'state'",
        ),
        (
            {"driver_mounts": [{"host_path": "/s", "container_path": "/etc/ld.so.preload"}]},
            "'/etc/ld.so.preload' is already the mount point of handover.preload_file",
        ),
        (
            {"driver_mounts": [{"host_path": "/s", "container_path": "/s", "ro": True}]},
            "unknown setting 'driver.mounts.0.ro'",
        ),
        (
            {"driver_cdi_devices": ["nvidia.com/gpu={serial}"]},
            "driver.cdi_devices[0] unknown placeholder {serial}",
        ),
        (
            {"driver_cdi_devices": ["nvidia.com/gpu"]},
            "driver.cdi_devices[0] must be 'vendor/class=name', got 'nvidia.com/gpu'",
        ),
    ],
)
def test_invalid_delivery_settings_are_refused_naming_the_setting_and_value(
    tmp_path: Path, values: dict[str, Any], message: str
) -> None:
    config = tmp_path / "device-plugin.yaml"
    config.write_text(yaml.safe_dump({"backend": "static", "inventory": "x.yaml", **values}))
    with pytest.raises(InvalidRequest) as raised:
        load_settings(NodeAgentSettings, config)
    assert message in str(raised.value)
