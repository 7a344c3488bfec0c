"""The driver-enforced memory backend on the node agent's side: which backend a node takes and
why, the hook each container is given on both node paths (read back through the CDI library
containerd uses), and the per-container hook specs' lifetime. The hook program itself and the
fake driver's enforcement are tested in tests/shim/test_driver_memory_limits.py; the whole path
on the real node in tests/e2e/test_realnode_driver_limits.py."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from dra_fakes import NODE, REF, Claims, allocated_claim
from vslice_core.model import Gpu, GpuGrant, NodeInventory
from vslice_node.agent.settings import NodeAgentSettings
from vslice_node.dra.claims import Prepared
from vslice_node.dra.prepare import ClaimPreparer
from vslice_node.handover.checkpoint import Checkpoint
from vslice_node.handover.container import Handover, Layout, cdi_spec, container_handover
from vslice_node.handover.driver import Driver
from vslice_node.handover.files import remove_orphan_specs, write_container_files, write_hook_spec
from vslice_node.handover.hostfiles import device_numbers
from vslice_node.handover.memorybackend import (
    MemoryBackendUnavailable,
    ProbeAnswer,
    choose_backend,
    probe_driver,
)
from vslice_node.handover.memoryhook import MemoryHook, container_spec_path
from vslice_node.handover.specfile import SpecFile
from vslice_serving.settings import load_settings

UID = "0b6f2d8e-5c1a-4c43-9a57-3f1f0c2a9e10"
GPU_A = "GPU-11111111-0000-4000-8000-00000000000a"
GPU_B = "GPU-11111111-0000-4000-8000-00000000000b"
HOOK = "/usr/local/vslice/bin/vslice-memory-limit"
AVAILABLE = ProbeAnswer(True, "available: driver 615.20, 2 GPU(s)")
MISSING = ProbeAnswer(False, "unavailable: nvmlDeviceSetMemoryLimits_v1 missing: driver 570.86")


def never() -> ProbeAnswer:
    raise AssertionError("the probe must not run here")


# -- which backend -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "cgroup_v2", "answer", "backend", "words"),
    [
        ("auto", True, AVAILABLE, "driver", "available: driver 615.20"),
        ("auto", True, MISSING, "shim", "driver 570.86"),
        ("auto", False, None, "shim", "cgroup v1"),
        ("shim", True, None, "shim", "memory_backend is shim"),
        ("driver", True, AVAILABLE, "driver", "available"),
        ("driver", False, AVAILABLE, "driver", "cgroup v1 node"),
    ],
)
def test_the_backend_follows_the_setting_the_cgroup_version_and_the_probe(
    setting: str, cgroup_v2: bool, answer: ProbeAnswer | None, backend: str, words: str
) -> None:
    def probe() -> ProbeAnswer:
        assert answer is not None, "the probe must not run here"
        return answer

    choice = choose_backend(setting, "cdi", cgroup_v2, probe)  # type: ignore[arg-type]
    assert choice.backend == backend
    assert words in choice.reason


def test_driver_asked_for_on_a_node_that_cannot_stops_the_agent_naming_why() -> None:
    with pytest.raises(MemoryBackendUnavailable) as raised:
        choose_backend("driver", "cdi", True, lambda: MISSING)
    message = str(raised.value)
    assert "memory_backend is driver" in message
    assert "driver 570.86" in message
    assert "auto" in message and "shim" in message


def test_without_cdi_auto_keeps_the_shim_without_asking_the_driver() -> None:
    choice = choose_backend("auto", "mounts", True, never)
    assert choice.backend == "shim"
    assert "CDI" in choice.reason


@pytest.mark.parametrize(
    ("handover", "words"),
    [
        (
            {"memory_backend": "driver", "injection": "mounts"},
            r"memory_backend driver needs handover\.injection cdi",
        ),
        ({"memory_backend": "kernel"}, "memory_backend"),
    ],
)
def test_the_settings_refuse_a_backend_they_cannot_give(
    tmp_path: Path, handover: dict[str, str], words: str
) -> None:
    config = tmp_path / "agent.yaml"
    agent = {"node_name": "n1", "backend": "static", "inventory": "/etc/vslice/cluster.yaml"}
    config.write_text(yaml.safe_dump({**agent, "handover": handover}))
    with pytest.raises(ValueError, match=words):
        load_settings(NodeAgentSettings, config)


# -- the probe, run as the agent runs it ----------------------------------------------------


def program(tmp_path: Path, body: str) -> str:
    path = tmp_path / "vslice-memory-limit"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def test_the_probe_passes_the_library_and_environment_and_reads_the_verdict(
    tmp_path: Path,
) -> None:
    said = program(
        tmp_path,
        'test "$1 $2 $3" = "probe --nvml /lib/libnvidia-ml.so.1" || exit 2\n'
        'echo "available: driver 615.20, $FAKE_NVIDIA_GPUS GPU(s)"\n',
    )
    answer = probe_driver(said, "/lib/libnvidia-ml.so.1", {"FAKE_NVIDIA_GPUS": "2"})
    assert answer == ProbeAnswer(True, "available: driver 615.20, 2 GPU(s)")


def test_the_probe_tells_unavailable_from_broken_and_missing(tmp_path: Path) -> None:
    unavailable = program(tmp_path, 'echo "unavailable: no GPUs"; exit 3\n')
    assert probe_driver(unavailable, "x", {}) == ProbeAnswer(False, "unavailable: no GPUs")
    broken = program(tmp_path, 'echo "Segmentation fault" >&2; exit 139\n')
    answer = probe_driver(broken, "x", {})
    assert not answer.available
    assert "exit 139" in answer.line and "Segmentation fault" in answer.line
    gone = probe_driver(str(tmp_path / "nowhere"), "x", {})
    assert not gone.available and "missing or not executable" in gone.line
    slow = program(tmp_path, "sleep 5\n")
    late = probe_driver(slow, "x", {}, timeout_s=0.5)
    assert not late.available and "did not answer" in late.line


# -- the hook each container gets ------------------------------------------------------------


def grant(uuid: str = GPU_B, index: int = 1, memory: int = 4096) -> GpuGrant:
    return GpuGrant(uuid=uuid, index=index, memory_mib=memory, cores=25)


@pytest.fixture
def handover(tmp_path: Path) -> Handover:
    dev = tmp_path / "dev"  # stand-in device nodes: links to /dev/null, which every host has
    dev.mkdir()
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"):
        (dev / name).symlink_to("/dev/null")
    layout = Layout(
        cache_root=tmp_path / "regions",
        limits_root=tmp_path / "limits",
        shim_library=str(tmp_path / "libvslice.so"),
        preload_file=str(tmp_path / "ld.so.preload"),
    )
    hook = MemoryHook(
        program=HOOK,
        nvml_library="/opt/fake/libnvidia-ml.so.1",
        spec_dir=tmp_path / "cdi",
        env={"FAKE_CUDA_STATE": "/srv/lab/fake-state"},
    )
    return Handover(layout, Driver(dev_dir=str(dev)), memory_hook=hook)


def node_spec(handover: Handover, tmp_path: Path) -> None:
    minors = {GPU_A: 0, GPU_B: 1}
    nodes = [*handover.driver.edits().devices, *(handover.driver.gpu_node(m) for m in (0, 1))]
    spec = cdi_spec(handover, NODE, minors, device_numbers(d.host_path for d in nodes))
    SpecFile(tmp_path / "cdi", handover.cdi_kind, NODE).update(spec)


def injected(cdi_check: Path, spec_dir: Path, names: list[str]) -> dict[str, object]:
    """The OCI spec containerd's CDI library makes of ``names``."""
    result = subprocess.run(
        [str(cdi_check), str(spec_dir), *names], capture_output=True, text=True, timeout=60
    )
    report = json.loads(result.stdout)
    assert report["errors"] == [] and result.returncode == 0, result.stdout + result.stderr
    oci: dict[str, object] = report["oci"]
    return oci


def test_on_the_device_plugin_path_the_response_names_the_containers_hook_device(
    tmp_path: Path, handover: Handover, cdi_check: Path
) -> None:
    node_spec(handover, tmp_path)
    grants = [grant(GPU_B, 1, 4096), grant(GPU_A, 0, 1024)]
    write_container_files(handover, grants, UID, "main")
    written = write_hook_spec(handover, grants, UID, "main")
    assert written == container_spec_path(tmp_path / "cdi", UID, "main")
    answer = container_handover(handover, grants, UID, "main", {GPU_A: 0, GPU_B: 1})
    assert answer.hooks == []  # a response cannot carry one
    assert answer.cdi_devices == [
        f"vslice.io/gpu={GPU_B}",
        f"vslice.io/gpu={GPU_A}",
        f"vslice.io/container={UID}-main",
    ]
    oci = injected(cdi_check, tmp_path / "cdi", answer.cdi_devices)
    (hook,) = oci["hooks"]["createRuntime"]  # type: ignore[index]
    mark = tmp_path / "limits" / UID / "main" / "memory-backend"
    assert hook["path"] == HOOK
    assert hook["args"] == [
        "vslice-memory-limit",
        "set",
        "--nvml",
        "/opt/fake/libnvidia-ml.so.1",
        "--mark",
        str(mark),
        f"{GPU_B}={4096 << 20}",
        f"{GPU_A}={1024 << 20}",
    ]
    assert hook["env"] == ["FAKE_CUDA_STATE=/srv/lab/fake-state"]
    assert hook["timeout"] == 30
    # Nothing else moved into the container's spec: its limits still travel in the response.
    assert "CUDA_DEVICE_MEMORY_LIMIT_0" in answer.envs


def test_a_shim_only_node_writes_no_hook_spec_and_names_no_container_device(
    tmp_path: Path, handover: Handover
) -> None:
    plain = dataclasses.replace(handover, memory_hook=None)
    assert write_hook_spec(plain, [grant()], UID, "main") is None
    answer = container_handover(plain, [grant()], UID, "main", {GPU_B: 1})
    assert answer.cdi_devices == [f"vslice.io/gpu={GPU_B}"]
    assert not (tmp_path / "cdi").exists()


def test_on_the_dra_path_the_claims_device_carries_the_hook(
    tmp_path: Path, handover: Handover, cdi_check: Path
) -> None:
    node_spec(handover, tmp_path)
    inventory = NodeInventory(
        name=NODE,
        gpus=[
            Gpu(uuid=GPU_A, model="Tesla-T4", memory_mib=15360, slots=4, index=0),
            Gpu(uuid=GPU_B, model="Tesla-T4", memory_mib=15360, slots=4, index=1),
        ],
    )
    preparer = ClaimPreparer(
        NODE,
        lambda: inventory,
        Claims(allocated_claim()),
        handover,
        tmp_path / "cdi",
        Checkpoint(tmp_path / "plugin" / "checkpoint.json"),
    )
    answer = preparer.prepare([REF])[REF.uid]
    assert isinstance(answer, Prepared)
    oci = injected(cdi_check, tmp_path / "cdi", list(answer.devices[0].cdi_device_ids))
    (hook,) = oci["hooks"]["createRuntime"]  # type: ignore[index]
    mark = tmp_path / "limits" / REF.uid / "main" / "memory-backend"
    assert hook["args"][4:] == ["--mark", str(mark), f"{GPU_B}={4096 << 20}"]


def test_hook_specs_go_with_their_pods_limits_directory(tmp_path: Path, handover: Handover) -> None:
    for uid in (UID, "5e0c1c5e-0000-4000-8000-000000000002"):
        write_container_files(handover, [grant()], uid, "main")
        write_hook_spec(handover, [grant()], uid, "main")
    other_vendor = tmp_path / "cdi" / "nvidia.com-gpu.json"
    other_vendor.write_text("{}")
    gone = tmp_path / "limits" / "5e0c1c5e-0000-4000-8000-000000000002"
    for item in gone.rglob("*"):
        if item.is_file():
            item.unlink()
    for item in sorted(gone.rglob("*"), reverse=True):
        item.rmdir()
    gone.rmdir()
    removed = remove_orphan_specs(tmp_path / "cdi", tmp_path / "limits")
    assert [p.name for p in removed] == [
        "vslice.io-container_5e0c1c5e-0000-4000-8000-000000000002_main.json"
    ]
    assert container_spec_path(tmp_path / "cdi", UID, "main").is_file()
    assert other_vendor.is_file()
    assert remove_orphan_specs(tmp_path / "cdi", tmp_path / "limits") == []
    assert remove_orphan_specs(tmp_path / "missing", tmp_path / "limits") == []
    assert os.listdir(tmp_path / "cdi")  # the node's own spec and the live one stay
