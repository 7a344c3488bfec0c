"""The DRA driver's node side without the wire: what a prepared claim gets (limits file,
region directory, CDI devices that the CDI library containerd uses resolves to exactly what
the device-plugin path hands a container), idempotence across restarts through the
checkpoint, unprepare, errors naming the claim, and the ResourceSlice publisher."""

from __future__ import annotations

import dataclasses
import json
import stat
import subprocess
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from deep_trees import deep_nest
from dra_fakes import NODE, REF, Claims, Slices, allocated_claim
from vslice_core.errors import ClusterError
from vslice_core.model import Gpu, GpuGrant, NodeInventory
from vslice_node.dra.claims import ClaimError, ClaimRef, Prepared
from vslice_node.dra.prepare import ClaimPreparer, claim_spec_path
from vslice_node.dra.publisher import SlicePublisher
from vslice_node.handover.checkpoint import Checkpoint
from vslice_node.handover.container import Handover, Layout, cdi_spec, container_handover
from vslice_node.handover.driver import Driver
from vslice_node.handover.files import LIMITS_MODE
from vslice_node.handover.hostfiles import device_numbers
from vslice_node.handover.specfile import SpecFile

GPU_A = "GPU-11111111-0000-4000-8000-00000000000a"
GPU_B = "GPU-11111111-0000-4000-8000-00000000000b"
INVENTORY = NodeInventory(
    name=NODE,
    gpus=[
        Gpu(uuid=GPU_A, model="Tesla-T4", memory_mib=15360, slots=4, index=0),
        Gpu(uuid=GPU_B, model="Tesla-T4", memory_mib=15360, slots=4, index=1),
    ],
)


@pytest.fixture
def handover(tmp_path: Path) -> Handover:
    library = tmp_path / "driver" / "libcuda.so.1"
    library.parent.mkdir()
    library.write_bytes(b"\x7fELF")
    layout = Layout(
        cache_root=tmp_path / "regions",
        limits_root=tmp_path / "limits",
        shim_library=str(tmp_path / "libvslice.so"),
        preload_file=str(tmp_path / "ld.so.preload"),
    )
    dev = tmp_path / "dev"  # stand-in device nodes: links to /dev/null, which every host has
    dev.mkdir()
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"):
        (dev / name).symlink_to("/dev/null")
    driver = Driver(libraries=(str(library),), dev_dir=str(dev))
    return Handover(layout, driver, shim_env={"VSLICE_LOG_LEVEL": "info"})


def preparer(tmp_path: Path, handover: Handover, claims: Claims) -> ClaimPreparer:
    return ClaimPreparer(
        NODE,
        lambda: INVENTORY,
        claims,
        handover,
        tmp_path / "cdi",
        Checkpoint(tmp_path / "plugin" / "checkpoint.json"),
    )


def test_a_prepared_claim_gets_its_limits_region_and_cdi_devices(
    tmp_path: Path, handover: Handover
) -> None:
    answer = preparer(tmp_path, handover, Claims(allocated_claim())).prepare([REF])[REF.uid]
    assert isinstance(answer, Prepared)
    (device,) = answer.devices
    assert (device.request_names, device.pool_name, device.device_name) == (
        ("main",),
        NODE,
        "gpu-1",
    )
    assert device.cdi_device_ids == (
        f"vslice.io/gpu={GPU_B}",
        f"vslice.io/claim={REF.uid}-main",
    )
    limits_file = tmp_path / "limits" / REF.uid / "main" / "limits"
    # The same file, mode and directory mode as on the device-plugin path
    # (test_deviceplugin_grpc: one writer, vslice_node.handover.files, serves both).
    assert stat.S_IMODE(limits_file.stat().st_mode) == LIMITS_MODE == 0o444
    assert stat.S_IMODE(limits_file.parent.stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "regions" / REF.uid / "main").stat().st_mode) == 0o777
    limits = limits_file.read_text()
    assert "CUDA_DEVICE_MEMORY_LIMIT_0=4096m" in limits
    assert "CUDA_DEVICE_SM_LIMIT_0=25" in limits
    assert (tmp_path / "regions" / REF.uid / "main").is_dir()
    spec = json.loads(claim_spec_path(tmp_path / "cdi", REF.uid).read_text())
    env = dict(e.split("=", 1) for e in spec["devices"][0]["containerEdits"]["env"])
    assert env["NVIDIA_VISIBLE_DEVICES"] == GPU_B
    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "4096m"
    assert env["VSLICE_LOG_LEVEL"] == "info"


def test_prepare_again_and_after_a_restart_answers_the_same_without_the_api(
    tmp_path: Path, handover: Handover
) -> None:
    claims = Claims(allocated_claim())
    first = preparer(tmp_path, handover, claims).prepare([REF])
    claims.fail = ClusterError("the API server is down")
    restarted = preparer(tmp_path, handover, claims)
    assert restarted.prepare([REF]) == first
    assert claims.reads == 1


def test_unprepare_removes_everything_and_is_idempotent(tmp_path: Path, handover: Handover) -> None:
    claims = Claims(allocated_claim())
    preparer(tmp_path, handover, claims).prepare([REF])
    restarted = preparer(tmp_path, handover, claims)
    assert restarted.unprepare([REF]) == {REF.uid: None}
    assert not claim_spec_path(tmp_path / "cdi", REF.uid).exists()
    assert not (tmp_path / "limits" / REF.uid).exists()
    assert not (tmp_path / "regions" / REF.uid).exists()
    assert restarted.checkpoint.uids() == set()
    assert restarted.unprepare([REF]) == {REF.uid: None}


def test_unprepare_removes_a_hostile_tree_in_the_claims_region_without_leaving_it(
    tmp_path: Path, handover: Handover
) -> None:
    """The claim's region directory is the containers' to write: a nest deeper than Python's
    recursion limit (shutil.rmtree raised RecursionError on it, past the OSError handler) and
    links to host files must neither stop the unprepare nor reach outside."""
    outside = tmp_path / "host"
    outside.mkdir()
    (outside / "keep").write_text("host data")
    claims = Claims(allocated_claim())
    prepared = preparer(tmp_path, handover, claims)
    prepared.prepare([REF])
    region = tmp_path / "regions" / REF.uid / "main"
    (region / "to-host").symlink_to(outside)
    with deep_nest(region, tmp_path / "regions" / REF.uid):
        assert prepared.unprepare([REF]) == {REF.uid: None}
    assert not (tmp_path / "regions" / REF.uid).exists()
    assert (outside / "keep").read_text() == "host data"


@pytest.mark.parametrize(
    ("stored", "fragment"),
    [
        (None, "team/train-gpu (claim-uid-1) does not exist"),
        (allocated_claim(ClaimRef("team", "other-uid", "train-gpu")), "has UID 'other-uid'"),
        (allocated_claim(device="gpu-7"), "status.allocation.devices.results[0].device"),
        (allocated_claim(memory="100Gi"), "consumedCapacity.memory must be at most 15360Mi"),
        (
            {"metadata": {**allocated_claim()["metadata"]}, "status": {}},
            "no device of gpu.vslice.io",
        ),
    ],
)
def test_a_claim_that_cannot_be_prepared_says_why_and_leaves_nothing(
    tmp_path: Path, handover: Handover, stored: dict[str, Any] | None, fragment: str
) -> None:
    claims = Claims(*([stored] if stored else []))
    prep = preparer(tmp_path, handover, claims)
    answer = prep.prepare([REF])[REF.uid]
    assert isinstance(answer, ClaimError)
    assert fragment in answer.message and "team/train-gpu" in answer.message
    assert prep.checkpoint.uids() == set()
    assert not (tmp_path / "cdi").exists()


def test_an_unreachable_api_server_fails_only_that_claim(
    tmp_path: Path, handover: Handover
) -> None:
    claims = Claims(allocated_claim())
    claims.fail = ClusterError("connection refused")
    answer = preparer(tmp_path, handover, claims).prepare([REF])[REF.uid]
    assert isinstance(answer, ClaimError) and "connection refused" in answer.message


def test_a_slow_claim_read_holds_up_no_other_claim(tmp_path: Path, handover: Handover) -> None:
    # Prepare reads each claim once, with no lock held: the kubelet prepares pods in
    # parallel, and one claim waiting on the API server must not delay another pod's.
    slow = ClaimRef(namespace="team", uid="claim-uid-slow", name="slow-gpu")
    gate, entered = threading.Event(), threading.Event()

    class SlowClaims(Claims):
        def resource_claim(self, namespace: str, name: str) -> Mapping[str, Any] | None:
            if name == slow.name:
                entered.set()
                assert gate.wait(10)
            return super().resource_claim(namespace, name)

    claims = SlowClaims(allocated_claim(), allocated_claim(slow))
    prep = preparer(tmp_path, handover, claims)
    answers: list[Mapping[str, Prepared | ClaimError]] = []
    waiting = threading.Thread(target=lambda: answers.append(prep.prepare([slow])))
    waiting.start()
    assert entered.wait(5)
    started = time.monotonic()
    assert isinstance(prep.prepare([REF])[REF.uid], Prepared)
    assert time.monotonic() - started < 2 and waiting.is_alive()
    gate.set()
    waiting.join(10)
    assert isinstance(answers[0][slow.uid], Prepared)
    assert claims.reads == 2  # one read per claim
    assert prep.checkpoint.uids() == {REF.uid, slow.uid}


def test_an_unreadable_checkpoint_is_moved_aside(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.json"
    path.write_text("{not json")
    assert Checkpoint(path).uids() == set()
    assert path.with_suffix(".corrupt").read_text() == "{not json"


def test_a_claim_resolves_through_the_cdi_library_to_what_the_device_plugin_gives(
    tmp_path: Path, handover: Handover, cdi_check: Path
) -> None:
    prep = preparer(tmp_path, handover, Claims(allocated_claim()))
    minors = {GPU_A: 0, GPU_B: 1}
    nodes = [*handover.driver.edits().devices, *(handover.driver.gpu_node(m) for m in (0, 1))]
    numbers = device_numbers(d.host_path for d in nodes)
    spec = cdi_spec(handover, NODE, minors, numbers)
    SpecFile(tmp_path / "cdi", handover.cdi_kind, NODE).update(spec)
    answer = prep.prepare([REF])[REF.uid]
    assert isinstance(answer, Prepared)
    names = list(answer.devices[0].cdi_device_ids)
    result = subprocess.run(
        [str(cdi_check), str(tmp_path / "cdi"), *names], capture_output=True, text=True, timeout=60
    )
    report = json.loads(result.stdout)
    assert report["errors"] == [] and result.returncode == 0, result.stdout + result.stderr
    oci = report["oci"]
    injected_env = dict(item.split("=", 1) for item in oci["process"]["env"])
    injected_mounts = {m["destination"]: (m["source"], "ro" in m["options"]) for m in oci["mounts"]}
    # The same slice on the device-plugin path, everything in the answer (mounts mode), with
    # the claim UID where the pod UID would be.
    grant = GpuGrant(uuid=GPU_B, index=1, memory_mib=4096, cores=25)
    plain = dataclasses.replace(handover, injection="mounts")
    reference = container_handover(plain, [grant], REF.uid, "main", minors)
    assert injected_env == reference.envs
    assert injected_mounts == {
        m.container_path: (m.host_path, m.read_only) for m in reference.mounts
    }
    assert {d["path"] for d in oci["linux"]["devices"]} == {
        d.container_path for d in reference.devices
    }


def test_the_slice_is_written_on_change_only_with_a_new_generation() -> None:
    api = Slices()
    publisher = SlicePublisher(api, NODE, every_s=30)
    publisher.maybe_publish(INVENTORY, now=0)
    (stored,) = api.stored.values()
    assert stored["spec"]["pool"]["generation"] == 1
    assert stored["metadata"]["ownerReferences"][0]["uid"] == "node-uid"
    publisher.maybe_publish(INVENTORY, now=1)  # nothing changed, no resync due: not even a read
    publisher.maybe_publish(INVENTORY, now=40)  # resync: read, equal, nothing written
    restarted = SlicePublisher(api, NODE)
    restarted.maybe_publish(INVENTORY, now=0)
    assert api.writes == 1
    sick = INVENTORY.model_copy(
        update={
            "gpus": [INVENTORY.gpus[0].model_copy(update={"healthy": False}), INVENTORY.gpus[1]]
        }
    )
    restarted.maybe_publish(sick, now=1)
    (stored,) = api.stored.values()
    assert api.writes == 2 and stored["spec"]["pool"]["generation"] == 2
    assert stored["spec"]["devices"][0]["attributes"]["healthy"] == {"bool": False}


def test_a_failed_publish_is_reported_and_retried() -> None:
    api = Slices()
    api.fail = ClusterError("connection refused")
    publisher = SlicePublisher(api, NODE)
    publisher.maybe_publish(INVENTORY, now=0)
    assert publisher.state.startswith("failing: connection refused")
    api.fail = None
    publisher.maybe_publish(INVENTORY, now=1)
    assert publisher.state == "published" and api.writes == 1
