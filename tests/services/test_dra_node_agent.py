"""The node agent with ``dra: true``: one GPU on each path, the kubelet's DRA calls over the
real gRPC sockets, the node's ResourceSlice, and the device-plugin side left unchanged for
the other GPU (a GPU serves one path only, so neither allocator can promise it twice)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from dra_fakes import Claims, Slices, allocated_claim
from plugin_lab import GPU_A, GPU_B, NODE, Lab, make_lab
from vslice_core import annotations as ann
from vslice_core.dra import DRIVER
from vslice_node.deviceplugin.api import deviceplugin_pb2 as dp
from vslice_node.dra.api import dra_pb2 as pb
from vslice_node.dra.api import dra_pb2_grpc as pb_grpc
from vslice_node.dra.claims import ClaimRef


def wait_until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.05)


def claim(uid: str, device: str) -> dict[str, Any]:
    ref = ClaimRef(namespace="team-a", uid=uid, name=f"c-{uid}")
    return allocated_claim(ref, device, NODE, memory="10Gi", cores="20", slots="1")


@pytest.fixture
def agent(short_dir: Path, tmp_path: Path) -> Iterator[tuple[Lab, Slices, Claims]]:
    lab = make_lab(
        short_dir,
        tmp_path,
        dra=True,
        dra_gpus=[1],
        kubelet_plugins_registry=str(short_dir / "registry"),
        kubelet_plugins_dir=str(short_dir / "plugins"),
    )
    assert lab.plugin.dra is not None
    slices, claims = Slices(), Claims(claim("u-1", "gpu-1"), claim("u-0", "gpu-0"))
    lab.plugin.dra.publisher.api = slices
    lab.plugin.dra.preparer.reader = claims
    lab.plugin.start()
    yield lab, slices, claims
    lab.plugin.stop()


def dra_stub(short_dir: Path) -> pb_grpc.DRAPluginStub:
    channel = grpc.insecure_channel(f"unix://{short_dir / 'plugins' / DRIVER / 'dra.sock'}")
    return pb_grpc.DRAPluginStub(channel)  # type: ignore[no-untyped-call]


def test_each_gpu_serves_one_path(agent: tuple[Lab, Slices, Claims]) -> None:
    lab, slices, _ = agent
    wait_until(lambda: bool(slices.stored))
    (published,) = slices.stored.values()
    assert [d["name"] for d in published["spec"]["devices"]] == ["gpu-1"]
    stream = lab.client().ListAndWatch(dp.Empty(), timeout=10)
    devices = next(iter(stream)).devices
    assert devices and {d.ID.split("::")[0] for d in devices} == {GPU_A}
    stream.cancel()
    wait_until(lambda: ann.NODE_GPUS in lab.api.node(NODE)["metadata"].get("annotations", {}))
    node_gpus = ann.decode_node_gpus(
        lab.api.node(NODE)["metadata"]["annotations"][ann.NODE_GPUS], NODE
    )
    assert [g.uuid for g in node_gpus.gpus] == [GPU_A]
    assert lab.plugin.status()["dra"]["resource_slice"] == "published"


def test_the_kubelet_prepares_and_unprepares_over_grpc(
    agent: tuple[Lab, Slices, Claims], short_dir: Path
) -> None:
    lab, _, _ = agent
    stub = dra_stub(short_dir)
    asked = [pb.Claim(namespace="team-a", uid="u-1", name="c-u-1")]
    answer = stub.NodePrepareResources(pb.NodePrepareResourcesRequest(claims=asked), timeout=10)
    result = answer.claims["u-1"]
    assert result.error == ""
    (device,) = result.devices
    assert (device.pool_name, device.device_name) == (NODE, "gpu-1")
    assert list(device.cdi_device_ids) == [f"vslice.io/gpu={GPU_B}", "vslice.io/claim=u-1-main"]
    limits = lab.files / "limits" / "u-1" / "main" / "limits"
    assert "CUDA_DEVICE_MEMORY_LIMIT_0=10240m" in limits.read_text()
    done = stub.NodeUnprepareResources(pb.NodeUnprepareResourcesRequest(claims=asked), timeout=10)
    assert done.claims["u-1"].error == ""
    assert not limits.exists()


def test_a_claim_on_a_gpu_of_the_other_path_is_refused(
    agent: tuple[Lab, Slices, Claims], short_dir: Path
) -> None:
    asked = [pb.Claim(namespace="team-a", uid="u-0", name="c-u-0")]
    answer = dra_stub(short_dir).NodePrepareResources(
        pb.NodePrepareResourcesRequest(claims=asked), timeout=10
    )
    error = answer.claims["u-0"].error
    assert "team-a/c-u-0" in error and "status.allocation.devices.results[0].device" in error
    assert "'gpu-0'" in error


def test_region_and_limits_of_prepared_claims_outlive_the_sweep(
    agent: tuple[Lab, Slices, Claims], short_dir: Path
) -> None:
    lab, _, _ = agent
    asked = [pb.Claim(namespace="team-a", uid="u-1", name="c-u-1")]
    dra_stub(short_dir).NodePrepareResources(
        pb.NodePrepareResourcesRequest(claims=asked), timeout=10
    )
    lab.plugin.sweeper.grace_s = lab.plugin.limits_sweeper.grace_s = 0
    assert lab.plugin.sweeper.sweep() == [] and lab.plugin.limits_sweeper.sweep() == []
    assert (lab.files / "containers" / "u-1" / "main").is_dir()
