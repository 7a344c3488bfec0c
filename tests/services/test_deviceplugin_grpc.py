"""The device plugin over its real protocol: a gRPC client plays the kubelet.

The kubelet side is real gRPC on unix sockets: a Registration server on ``kubelet.sock`` that
records every RegisterRequest, and a DevicePlugin client on the plugin's socket. The plugin
runs with the static backend (an inventory YAML) and an in-memory API server that the tests
feed with pods; nothing on the gRPC path is replaced.
"""

from __future__ import annotations

import logging
import socket
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc
from kubelet import Kubelet, PodResources
from plugin_lab import (
    GPU_A,
    GPU_B,
    NODE,
    SLOTS,
    Lab,
    allocate,
    delivered,
    gpu_pod,
    grant,
    inventory,
    make_lab,
)
from vslice_core import annotations as ann
from vslice_node.deviceplugin.api import deviceplugin_pb2 as pb
from vslice_node.handover.files import LIMITS_MODE


def recorded(lab: Lab, name: str) -> list[str]:
    """The pod's delivered record once the writer has written what it was given: the record
    is written after Allocate answers, in the background."""
    assert lab.plugin.allocator.deliveries.flush(5), "delivered records still waiting"
    return delivered(lab.api, name)


@pytest.fixture
def lab(short_dir: Path, tmp_path: Path) -> Iterator[Lab]:
    # Everything in the Allocate response, as before CDI; test_deviceplugin_cdi.py covers CDI.
    lab = make_lab(short_dir, tmp_path, injection="mounts")
    yield lab
    lab.plugin.stop()


@pytest.fixture
def kubelet(lab: Lab) -> Iterator[Kubelet]:
    kubelet = Kubelet(lab.directory)
    yield kubelet
    kubelet.stop()


@pytest.fixture
def pod_resources(lab: Lab) -> Iterator[PodResources]:
    server = PodResources(lab.directory.parent / "pod-resources.sock")
    yield server
    server.stop()


@pytest.fixture
def running(lab: Lab, kubelet: Kubelet) -> Lab:
    lab.plugin.start()
    kubelet.next_registration()
    return lab


# -- registration and the device list ----------------------------------------------------------


def test_plugin_registers_its_socket_and_resource_with_the_kubelet(
    lab: Lab, kubelet: Kubelet
) -> None:
    lab.plugin.start()
    _, request = kubelet.next_registration()
    assert request.version == "v1beta1"
    assert request.endpoint == "vslice.sock"
    assert request.resource_name == "nvidia.com/gpu"
    assert request.options.get_preferred_allocation_available is True
    assert (lab.directory / "vslice.sock").exists()
    options = lab.client().GetDevicePluginOptions(pb.Empty(), timeout=5)
    assert options.get_preferred_allocation_available is True
    assert options.pre_start_required is False


def test_the_plugin_socket_answers_the_standard_grpc_health_check(running: Lab) -> None:
    channel = grpc.insecure_channel(f"unix://{running.directory / 'vslice.sock'}")
    health = health_pb2_grpc.HealthStub(channel)
    for service in ("", "v1beta1.DevicePlugin"):
        answer = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
    channel.close()


def test_list_and_watch_advertises_every_slot_of_every_gpu_with_its_numa_node(
    running: Lab,
) -> None:
    stream = running.client().ListAndWatch(pb.Empty(), timeout=10)
    first = next(stream)
    stream.cancel()
    ids = [device.ID for device in first.devices]
    assert ids == [f"{GPU_A}::{s}" for s in range(SLOTS)] + [f"{GPU_B}::{s}" for s in range(SLOTS)]
    assert {device.health for device in first.devices} == {"Healthy"}
    numa = {device.ID: device.topology.nodes[0].ID for device in first.devices}
    assert numa[f"{GPU_A}::0"] == 0
    assert numa[f"{GPU_B}::3"] == 1


def test_a_gpu_turning_unhealthy_reaches_an_open_list_and_watch_stream(running: Lab) -> None:
    stream = running.client().ListAndWatch(pb.Empty(), timeout=20)
    next(stream)
    running.inventory_file.write_text(yaml.safe_dump(inventory(healthy_b=False)))
    update = next(stream)
    stream.cancel()
    health = {device.ID: device.health for device in update.devices}
    assert health[f"{GPU_A}::0"] == "Healthy"
    assert {health[f"{GPU_B}::{s}"] for s in range(SLOTS)} == {"Unhealthy"}


def test_the_node_inventory_annotation_is_written_at_start_and_follows_health(
    running: Lab,
) -> None:
    node = running.api.node(NODE)
    written = ann.decode_node_gpus(node["metadata"]["annotations"][ann.NODE_GPUS], NODE)
    assert [gpu.uuid for gpu in written.gpus] == [GPU_A, GPU_B]
    assert [gpu.slots for gpu in written.gpus] == [SLOTS, SLOTS]
    running.inventory_file.write_text(yaml.safe_dump(inventory(healthy_b=False)))
    deadline = time.monotonic() + 5
    healthy = True
    while healthy and time.monotonic() < deadline:
        value = running.api.node(NODE)["metadata"]["annotations"][ann.NODE_GPUS]
        healthy = ann.decode_node_gpus(value, NODE).gpus[1].healthy
        time.sleep(0.05)
    assert healthy is False


# -- GetPreferredAllocation and Allocate ---------------------------------------------------------


def test_preferred_allocation_steers_the_kubelet_to_the_granted_gpu(running: Lab) -> None:
    running.api.put_pod(gpu_pod("train", "2026-01-01T10:00:00Z", {"main": [grant(GPU_B, 1)]}))
    available = [f"{GPU_A}::{s}" for s in range(SLOTS)] + [f"{GPU_B}::{s}" for s in range(SLOTS)]
    request = pb.PreferredAllocationRequest(
        container_requests=[
            pb.ContainerPreferredAllocationRequest(available_deviceIDs=available, allocation_size=1)
        ]
    )
    response = running.client().GetPreferredAllocation(request, timeout=5)
    assert list(response.container_responses[0].deviceIDs) == [f"{GPU_B}::0"]


def test_allocate_hands_over_the_pods_slice_and_marks_it_delivered(running: Lab) -> None:
    running.api.put_pod(
        gpu_pod("train", "2026-01-01T10:00:00Z", {"main": [grant(GPU_B, 1, 30720, 50)]})
    )
    answer = allocate(running.client(), f"{GPU_A}::2")
    cache = "/run/vslice/uid-train/main"
    assert dict(answer.envs) == {
        "NVIDIA_VISIBLE_DEVICES": GPU_B,
        "CUDA_DEVICE_MEMORY_LIMIT_0": "30720m",
        "CUDA_DEVICE_SM_LIMIT": "50",
        "CUDA_DEVICE_SM_LIMIT_0": "50",
        "CUDA_DEVICE_MEMORY_SHARED_CACHE": f"{cache}/vslice.cache",
        "VSLICE_LIMITS_FILE": "/run/vslice-limits/limits",
    }
    mounts = {m.container_path: (m.host_path, m.read_only) for m in answer.mounts}
    shim = str(running.files / "libvslice.so")
    assert mounts == {
        shim: (shim, True),
        "/etc/ld.so.preload": (str(running.files / "ld.so.preload"), True),
        cache: (str(running.cache_root / "uid-train" / "main"), False),
        "/run/vslice-limits": (str(running.files / "limits" / "uid-train" / "main"), True),
    }
    assert (running.files / "ld.so.preload").read_text() == shim + "\n"
    assert running.plugin.status()["shim"] == "ok"
    assert [d.host_path for d in answer.devices] == [
        "/dev/nvidia1",
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
    ]
    host_dir = running.cache_root / "uid-train" / "main"
    assert stat.S_IMODE(host_dir.stat().st_mode) == 0o777
    limits = running.files / "limits" / "uid-train" / "main" / "limits"
    assert stat.S_IMODE(limits.stat().st_mode) == LIMITS_MODE == 0o444
    assert stat.S_IMODE(limits.parent.stat().st_mode) == 0o755
    assert recorded(running, "train") == ["main"]


def test_containers_of_one_pod_are_matched_in_order_and_recorded_together(running: Lab) -> None:
    pod = gpu_pod(
        "pair",
        "2026-01-01T10:00:00Z",
        {"first": [grant(GPU_A, 0, 1000)], "second": [grant(GPU_A, 0, 2000), grant(GPU_B, 1)]},
    )
    running.api.put_pod(pod)
    client = running.client()
    one = allocate(client, f"{GPU_A}::0")
    two = allocate(client, f"{GPU_A}::1", f"{GPU_B}::1")
    assert one.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "1000m"
    assert two.envs["NVIDIA_VISIBLE_DEVICES"] == f"{GPU_A},{GPU_B}"
    assert two.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "2000m"
    assert recorded(running, "pair") == ["first", "second"]


def test_two_pods_starting_at_once_each_get_their_own_allocation(running: Lab) -> None:
    for n in range(2):
        running.api.put_pod(
            gpu_pod(f"job-{n}", f"2026-01-01T10:00:0{n}Z", {"main": [grant(GPU_A, 0, 1000 + n)]})
        )
    client = running.client()
    barrier = threading.Barrier(2)
    answers: list[pb.ContainerAllocateResponse] = []

    def start(slot: int) -> None:
        barrier.wait()
        answers.append(allocate(client, f"{GPU_A}::{slot}"))

    threads = [threading.Thread(target=start, args=(slot,)) for slot in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=15)
    limits = sorted(answer.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] for answer in answers)
    assert limits == ["1000m", "1001m"]
    assert recorded(running, "job-0") == ["main"]
    assert recorded(running, "job-1") == ["main"]


def test_a_delivered_allocation_is_never_handed_out_twice(running: Lab) -> None:
    running.api.put_pod(gpu_pod("once", "2026-01-01T10:00:00Z", {"main": [grant(GPU_A, 0)]}))
    client = running.client()
    allocate(client, f"{GPU_A}::0")
    with pytest.raises(grpc.RpcError) as raised:
        allocate(client, f"{GPU_A}::1")
    assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "no pod on node gpu-node-1 waits for 1 GPU(s)" in raised.value.details()


def test_unknown_device_ids_are_refused_naming_the_id(running: Lab) -> None:
    running.api.put_pod(gpu_pod("train", "2026-01-01T10:00:00Z", {"main": [grant(GPU_A, 0)]}))
    client = running.client()
    with pytest.raises(grpc.RpcError) as raised:
        allocate(client, "nvidia0")
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "'nvidia0' is not a vslice device" in raised.value.details()
    with pytest.raises(grpc.RpcError) as raised:
        allocate(client, "GPU-elsewhere::0")
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "which this node does not have" in raised.value.details()
    # Refusals take nothing: the pod's allocation is still there for the real call.
    assert allocate(client, f"{GPU_A}::0").envs["NVIDIA_VISIBLE_DEVICES"] == GPU_A


def test_a_size_mismatch_fails_the_call_and_lists_what_is_pending(running: Lab) -> None:
    running.api.put_pod(gpu_pod("train", "2026-01-01T10:00:00Z", {"main": [grant(GPU_A, 0)]}))
    with pytest.raises(grpc.RpcError) as raised:
        allocate(running.client(), f"{GPU_A}::0", f"{GPU_B}::0")
    assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "pending: team-a/train[main]=1 GPUs" in raised.value.details()


def test_a_malformed_allocation_written_by_someone_else_is_skipped_and_logged(
    running: Lab, caplog: pytest.LogCaptureFixture
) -> None:
    broken = gpu_pod("broken", "2026-01-01T09:00:00Z", {"main": [grant(GPU_A, 0)]})
    broken["metadata"]["annotations"][ann.ALLOCATION] = '{"version": 7, "node": "x"}'
    running.api.put_pod(broken)
    running.api.put_pod(gpu_pod("good", "2026-01-01T10:00:00Z", {"main": [grant(GPU_A, 0)]}))
    with caplog.at_level(logging.ERROR, logger="vslice.deviceplugin.allocate"):
        answer = allocate(running.client(), f"{GPU_A}::0")
    assert answer.envs["CUDA_DEVICE_MEMORY_SHARED_CACHE"].startswith("/run/vslice/uid-good/")
    bad = [r for r in caplog.records if "malformed" in r.getMessage()]
    assert len(bad) == 1
    assert "vslice.io/allocation version must be 1, got 7" in bad[0].__dict__["error"]


def test_a_short_api_outage_delays_allocate_instead_of_failing_it(running: Lab) -> None:
    running.api.put_pod(gpu_pod("train", "2026-01-01T10:00:00Z", {"main": [grant(GPU_A, 0)]}))
    running.api.reachable = False
    threading.Timer(0.5, lambda: setattr(running.api, "reachable", True)).start()
    answer = allocate(running.client(), f"{GPU_A}::0")
    assert answer.envs["NVIDIA_VISIBLE_DEVICES"] == GPU_A
    assert recorded(running, "train") == ["main"]


def test_an_api_server_that_stays_away_gives_unavailable_with_the_reason(running: Lab) -> None:
    running.api.reachable = False
    with pytest.raises(grpc.RpcError) as raised:
        allocate(running.client(), f"{GPU_A}::0")
    assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "cannot reach the API server" in raised.value.details()


def test_a_delivery_record_that_cannot_be_written_is_retried_and_not_lost(running: Lab) -> None:
    running.api.put_pod(gpu_pod("train", "2026-01-01T10:00:00Z", {"main": [grant(GPU_A, 0)]}))
    running.api.failing_writes = True
    answer = allocate(running.client(), f"{GPU_A}::0")
    assert answer.envs["NVIDIA_VISIBLE_DEVICES"] == GPU_A
    assert ann.DELIVERED not in running.api.pod("team-a", "train")["metadata"]["annotations"]
    # Meanwhile the claim holds: the same allocation is not handed out again.
    with pytest.raises(grpc.RpcError):
        allocate(running.client(), f"{GPU_A}::1")
    running.api.failing_writes = False
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if ann.DELIVERED in running.api.pod("team-a", "train")["metadata"]["annotations"]:
            break
        time.sleep(0.05)
    assert recorded(running, "train") == ["main"]


# -- the kubelet's own record (PodResources) ------------------------------------------------------


def test_the_pod_the_kubelet_is_admitting_gets_its_slice_whatever_the_bind_order(
    running: Lab, pod_resources: PodResources
) -> None:
    same = "2026-01-01T10:00:00Z"
    first = gpu_pod("first", same, {"main": [grant(GPU_A, 0, 1000)]}, "2026-01-01T10:00:00.1Z")
    second = gpu_pod("second", same, {"main": [grant(GPU_A, 0, 2000)]}, "2026-01-01T10:00:00.2Z")
    running.api.put_pod(first)
    running.api.put_pod(second)
    # The kubelet admits "second" first (say both reached it in one batch after a restart).
    pod_resources.admit("team-a", "second", "main")
    client = running.client()
    assert allocate(client, f"{GPU_A}::0").envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "2000m"
    pod_resources.serve("team-a", "second", "main", "nvidia.com/gpu", f"{GPU_A}::0")
    pod_resources.admit("team-a", "first", "main")
    assert allocate(client, f"{GPU_A}::1").envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "1000m"
    assert pod_resources.calls >= 2
    assert running.plugin.status()["pod_resources"] == "ok"


def test_a_container_the_kubelet_already_served_is_never_handed_out_again(
    running: Lab, pod_resources: PodResources
) -> None:
    # "old" got its devices before a plugin restart, and its delivered record was never
    # written: only the kubelet remembers. Without that record it would look pending.
    running.api.put_pod(gpu_pod("old", "2026-01-01T09:00:00Z", {"main": [grant(GPU_A, 0, 1000)]}))
    pod_resources.serve("team-a", "old", "main", "nvidia.com/gpu", f"{GPU_A}::0")
    pod_resources.serve("team-a", "old", "main", "example.com/other", "x")
    with pytest.raises(grpc.RpcError) as raised:
        allocate(running.client(), f"{GPU_A}::1")
    assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    running.api.put_pod(gpu_pod("new", "2026-01-01T10:00:00Z", {"main": [grant(GPU_A, 0, 3000)]}))
    assert allocate(running.client(), f"{GPU_A}::1").envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "3000m"


def test_without_the_pod_resources_api_matching_uses_the_binding_order(running: Lab) -> None:
    same = "2026-01-01T10:00:00Z"
    running.api.put_pod(
        gpu_pod("later", same, {"main": [grant(GPU_A, 0, 1000)]}, "2026-01-01T10:00:00.9Z")
    )
    running.api.put_pod(
        gpu_pod("sooner", same, {"main": [grant(GPU_A, 0, 2000)]}, "2026-01-01T10:00:00.3Z")
    )
    assert allocate(running.client(), f"{GPU_A}::0").envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "2000m"
    assert str(running.plugin.status()["pod_resources"]).startswith("unavailable: no socket")


# -- the kubelet going away and coming back -----------------------------------------------------


def test_without_a_kubelet_the_plugin_serves_and_waits(lab: Lab) -> None:
    lab.plugin.start()
    deadline = time.monotonic() + 5
    while lab.plugin.endpoint.status.state != "waiting for kubelet" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert lab.plugin.endpoint.status.state == "waiting for kubelet"
    assert lab.plugin.endpoint.serving
    assert lab.plugin.status()["kubelet"]["registrations"] == 0  # type: ignore[index]
    kubelet = Kubelet(lab.directory)
    try:
        _, request = kubelet.next_registration(timeout_s=5)
        assert request.resource_name == "nvidia.com/gpu"
    finally:
        kubelet.stop()


def test_plugin_reregisters_within_5_s_after_the_kubelet_wipes_its_directory(
    running: Lab, kubelet: Kubelet
) -> None:
    stream = running.client().ListAndWatch(pb.Empty(), timeout=30)
    next(stream)
    # The kubelet restarts: its server goes, the directory is emptied, a new server comes up.
    kubelet.stop()
    for entry in running.directory.iterdir():
        entry.unlink()
    wiped = time.monotonic()
    restarted = Kubelet(running.directory)
    try:
        registered_at, request = restarted.next_registration(timeout_s=10)
        elapsed = registered_at - wiped
        print(f"re-registration after wipe: {elapsed:.3f} s")
        assert elapsed < 5.0
        assert request.endpoint == "vslice.sock"
        # The old stream ended with the old server; the new socket serves the same devices.
        with pytest.raises(grpc.RpcError):
            for _ in stream:
                pass
        fresh = running.client().ListAndWatch(pb.Empty(), timeout=10)
        assert len(next(fresh).devices) == 2 * SLOTS
        fresh.cancel()
    finally:
        restarted.stop()


def test_a_kubelet_dead_for_long_does_not_slow_down_reregistration(lab: Lab) -> None:
    # A dead kubelet leaves its socket file behind: connections are refused, and the plugin's
    # registration backoff grows to its maximum.
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(lab.directory / "kubelet.sock"))
    stale.close()
    lab.plugin.start()
    # Attempts (1 s each) and backoffs 0.2, 0.4, 0.8, 1.6 s: at 8.5 s it sleeps a 3.2 s backoff.
    time.sleep(8.5)
    assert lab.plugin.endpoint.status.state == "waiting for kubelet"
    assert "does not accept connections" in lab.plugin.endpoint.status.last_error
    for entry in lab.directory.iterdir():
        entry.unlink()
    wiped = time.monotonic()
    kubelet = Kubelet(lab.directory)
    try:
        registered_at, _ = kubelet.next_registration(timeout_s=10)
        # The backoff is 3.2 s by now; waking on the wipe keeps us near one poll interval.
        assert registered_at - wiped < 2.0
    finally:
        kubelet.stop()


def test_a_region_directory_that_cannot_be_made_fails_the_call_and_claims_nothing(
    running: Lab,
) -> None:
    running.api.put_pod(gpu_pod("train", "2026-01-01T10:00:00Z", {"main": [grant(GPU_A, 0)]}))
    running.cache_root.write_text("a file where the directory should be")
    with pytest.raises(grpc.RpcError) as raised:
        allocate(running.client(), f"{GPU_A}::0")
    assert raised.value.code() == grpc.StatusCode.INTERNAL
    assert "cannot prepare the node" in raised.value.details()
    assert ann.DELIVERED not in running.api.pod("team-a", "train")["metadata"]["annotations"]
    running.cache_root.unlink()
    assert allocate(running.client(), f"{GPU_A}::0").envs["NVIDIA_VISIBLE_DEVICES"] == GPU_A
