"""The node side of the trust boundary, over the real gRPC protocol: an allocation counts only
with a valid ``vslice.io/allocation-proof`` (docs/device-plugin.md "The allocation proof"), and
each container's limits reach it as a read-only file (docs/device-plugin.md "The limits file").

Pods are signed here with :func:`vslice_core.proof.sign`, exactly as the extender signs them.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from kubelet import Kubelet
from plugin_lab import GPU_A, GPU_B, NODE, Lab, allocate, gpu_pod, grant, make_lab
from test_deviceplugin_grpc import recorded
from vslice_core import annotations as ann
from vslice_core import proof

KEY = proof.Key("k1", bytes(range(32)))
OTHER_KEY = proof.Key("k1", bytes(range(1, 33)))  # same id, another secret


def _key_file(path: Path, *keys: proof.Key) -> Path:
    path.write_text("".join(f"{key.id} {key.secret.hex()}\n" for key in keys))
    return path


def signed(pod: dict[str, Any], key: proof.Key = KEY, node: str = NODE) -> dict[str, Any]:
    annotations = pod["metadata"]["annotations"]
    annotations[proof.PROOF] = proof.sign(
        key, pod["metadata"]["uid"], node, annotations[ann.ALLOCATION]
    )
    return pod


def _pod(name: str, created: str = "2026-01-01T10:00:00Z", memory: int = 30720) -> dict[str, Any]:
    return gpu_pod(name, created, {"main": [grant(GPU_B, 1, memory, 50)]})


@pytest.fixture
def keys(tmp_path: Path) -> Path:
    return _key_file(tmp_path / "allocation.keys", KEY)


def _running(short_dir: Path, tmp_path: Path, key_file: str) -> Iterator[Lab]:
    lab = make_lab(short_dir, tmp_path, injection="mounts", allocation_key_file=key_file)
    kubelet = Kubelet(lab.directory)
    lab.plugin.start()
    kubelet.next_registration()
    yield lab
    lab.plugin.stop()
    kubelet.stop()


@pytest.fixture
def running(short_dir: Path, tmp_path: Path, keys: Path) -> Iterator[Lab]:
    yield from _running(short_dir, tmp_path, str(keys))


def _refused(lab: Lab, *device_ids: str) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        allocate(lab.client(), *device_ids)
    return caught.value


def _events(lab: Lab, timeout: float = 5.0) -> list[dict[str, str]]:
    deadline = time.monotonic() + timeout
    while not lab.api.events and time.monotonic() < deadline:
        time.sleep(0.02)  # the event is written off the kubelet's call
    return lab.api.events


# -- the proof -----------------------------------------------------------------------------


def test_a_signed_allocation_is_delivered(running: Lab) -> None:
    running.api.put_pod(signed(_pod("train")))
    answer = allocate(running.client(), f"{GPU_A}::0")
    assert answer.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "30720m"
    assert recorded(running, "train") == ["main"]
    assert (
        running.plugin.status()["allocation_proof"]
        == f"ok: 1 key(s) from {running.files}/allocation.keys"
    )


@pytest.mark.parametrize(
    ("tamper", "why"),
    [
        (lambda pod: pod, "no proof"),
        (lambda pod: signed(pod, OTHER_KEY), "proof does not match"),
        (lambda pod: signed(pod, proof.Key("k9", bytes(32))), "unknown key 'k9'"),
        (lambda pod: signed(pod, node="another-node"), "proof does not match"),
    ],
    ids=["missing", "wrong-key", "unknown-key", "other-node"],
)
def test_an_allocation_without_a_valid_proof_is_refused_with_an_event(
    running: Lab, tamper: Any, why: str
) -> None:
    running.api.put_pod(tamper(_pod("forged")))
    error = _refused(running, f"{GPU_A}::0")
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "team-a/forged" in str(error.details())
    assert why in str(error.details())
    assert proof.PROOF in str(error.details())
    assert ann.DELIVERED not in running.api.pod("team-a", "forged")["metadata"]["annotations"]
    [event] = _events(running)
    assert event["pod"] == "forged" and event["uid"] == "uid-forged"
    assert event["reason"] == "AllocationRefused"
    assert why in event["message"]


def test_an_allocation_edited_after_signing_is_refused(running: Lab) -> None:
    pod = signed(_pod("edited", memory=1024))
    bigger = gpu_pod("edited", "2026-01-01T10:00:00Z", {"main": [grant(GPU_B, 1, 81920, 100)]})
    pod["metadata"]["annotations"][ann.ALLOCATION] = bigger["metadata"]["annotations"][
        ann.ALLOCATION
    ]
    running.api.put_pod(pod)
    error = _refused(running, f"{GPU_A}::0")
    assert "proof does not match" in str(error.details())


def test_an_unproven_pod_never_takes_a_proven_pods_slice(running: Lab) -> None:
    # The forged pod came first: without the proof check it would be matched first.
    running.api.put_pod(_pod("forged", "2026-01-01T09:00:00Z", memory=81920))
    running.api.put_pod(signed(_pod("honest", "2026-01-01T10:00:00Z", memory=1024)))
    answer = allocate(running.client(), f"{GPU_A}::0")
    assert answer.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "1024m"
    assert recorded(running, "honest") == ["main"]
    assert running.api.events == []


@pytest.mark.parametrize("content", [None, "", "k1 nothex\n", "k1 00ff\n"])
def test_a_missing_or_bad_key_file_refuses_every_allocation_and_names_the_file(
    short_dir: Path, tmp_path: Path, content: str | None
) -> None:
    path = tmp_path / "allocation.keys"
    if content is not None:
        path.write_text(content)
    for lab in _running(short_dir, tmp_path, str(path)):
        lab.api.put_pod(signed(_pod("train")))
        error = _refused(lab, f"{GPU_A}::0")
        assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert str(path) in str(error.details())
        assert "every allocation on this node is refused" in str(error.details())
        state = str(lab.plugin.status()["allocation_proof"])
        assert state.startswith("refusing every allocation") and str(path) in state
        # Repaired on disk: the next Allocate works, no restart needed.
        _key_file(path, KEY)
        allocate(lab.client(), f"{GPU_A}::0")
        assert recorded(lab, "train") == ["main"]


def test_a_rotated_key_file_is_read_again(running: Lab, keys: Path) -> None:
    new = proof.Key("k2", bytes(range(2, 34)))
    running.api.put_pod(signed(_pod("train"), new))
    assert "unknown key 'k2'" in str(_refused(running, f"{GPU_A}::0").details())
    _key_file(keys, KEY, new)
    os.utime(keys, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))
    running.api.put_pod(signed(_pod("train"), new))
    allocate(running.client(), f"{GPU_A}::0")


def test_without_a_key_file_proofs_are_off_and_status_says_so(
    short_dir: Path, tmp_path: Path
) -> None:
    for lab in _running(short_dir, tmp_path, ""):
        lab.api.put_pod(_pod("train"))
        allocate(lab.client(), f"{GPU_A}::0")
        assert str(lab.plugin.status()["allocation_proof"]).startswith("off")


# -- the limits file -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "path", ["/run/vslice-limits", "/run/vslice-limits/limits", "/etc/ld.so.preload"]
)
def test_a_pod_mounting_a_volume_over_vslices_read_only_files_is_refused(
    short_dir: Path, tmp_path: Path, path: str
) -> None:
    # Checked with or without proofs: a volume there would replace the limits file.
    for lab in _running(short_dir, tmp_path, ""):
        pod = _pod("sneaky")
        pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "mine", "mountPath": path}]
        lab.api.put_pod(pod)
        error = _refused(lab, f"{GPU_A}::0")
        assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert f"main: {path}" in str(error.details())
        [event] = _events(lab)
        assert event["reason"] == "AllocationRefused" and path in event["message"]


def test_a_volume_elsewhere_under_run_is_fine(running: Lab) -> None:
    pod = signed(_pod("train"))
    pod["spec"]["containers"][0]["volumeMounts"] = [
        {"name": "a", "mountPath": "/run/vslice-limits-not"},
        {"name": "b", "mountPath": "/run"},
    ]
    running.api.put_pod(pod)
    allocate(running.client(), f"{GPU_A}::0")


def test_the_limits_file_is_written_read_only_before_the_answer(running: Lab) -> None:
    running.api.put_pod(signed(_pod("train", memory=2048)))
    answer = allocate(running.client(), f"{GPU_A}::0")
    mounts = {m.container_path: m for m in answer.mounts}
    limits_dir = Path(mounts["/run/vslice-limits"].host_path)
    assert mounts["/run/vslice-limits"].read_only
    assert limits_dir == running.files / "limits" / "uid-train" / "main"
    path = limits_dir / "limits"
    assert stat.S_IMODE(path.stat().st_mode) == 0o444
    assert path.read_text().splitlines()[1:] == [
        "VSLICE_LIMITS_VERSION=1",
        "CUDA_DEVICE_MEMORY_SHARED_CACHE=/run/vslice/uid-train/main/vslice.cache",
        "CUDA_DEVICE_MEMORY_LIMIT_0=2048m",
        "CUDA_DEVICE_SM_LIMIT_0=50",
    ]
    assert [p.name for p in limits_dir.iterdir()] == ["limits"]  # no temporary file left
    assert answer.envs["VSLICE_LIMITS_FILE"] == "/run/vslice-limits/limits"


def test_limits_directories_of_pods_that_are_gone_are_swept(running: Lab) -> None:
    running.api.put_pod(signed(_pod("train")))
    allocate(running.client(), f"{GPU_A}::0")
    top = running.files / "limits" / "uid-train"
    assert top.is_dir()
    running.api.delete_pod("team-a", "train")
    old = time.time() - 3600
    os.utime(top, (old, old))
    assert running.plugin.limits_sweeper.sweep() == [top]
    assert not top.exists()
