"""The node agent's ``GET /metrics``: Allocate results, DRA prepares and unprepares, whether
the kubelet has each front door registered, and the GPUs on each path, all on the agent's own
HTTP listener, scraped and parsed as Prometheus would.

The agent runs as in test_dra_node_agent.py (GPU_A on the device-plugin path, GPU_B on the
DRA path); the kubelet's calls arrive over the real gRPC sockets."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import NoReturn

import grpc
import pytest
from dra_fakes import Claims, Slices
from kubelet import Kubelet
from plugin_lab import GPU_A, NODE, Lab, allocate, gpu_pod, grant, make_lab
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from test_dra_node_agent import claim, wait_until
from vslice_core.dra import DRIVER
from vslice_core.errors import ClusterError, InvalidRequest
from vslice_node.agent.main import http_service
from vslice_node.deviceplugin.allocator import NoPendingAllocation
from vslice_node.deviceplugin.api import deviceplugin_pb2 as dp
from vslice_node.deviceplugin.metrics import AllocationMetrics
from vslice_node.deviceplugin.servicer import DevicePluginServicer
from vslice_node.dra.api import dra_pb2 as pb
from vslice_node.dra.api import dra_pb2_grpc as pb_grpc
from vslice_node.dra.api import pluginregistration_pb2 as reg
from vslice_node.dra.api import pluginregistration_pb2_grpc as reg_grpc
from vslice_node.dra.claims import ClaimRef
from vslice_node.dra.metrics import DraMetrics
from vslice_node.dra.servicer import DRAPluginServicer
from vslice_node.handover.container import PRELOAD_PATH
from vslice_serving.httpserve import HttpService

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture
def lab(short_dir: Path, tmp_path: Path) -> Iterator[Lab]:
    lab = make_lab(
        short_dir,
        tmp_path,
        listen="127.0.0.1:0",
        dra=True,
        dra_gpus=[1],
        kubelet_plugins_registry=str(short_dir / "registry"),
        kubelet_plugins_dir=str(short_dir / "plugins"),
    )
    assert lab.plugin.dra is not None
    lab.plugin.dra.publisher.api = Slices()
    lab.plugin.dra.preparer.reader = Claims(claim("u-1", "gpu-1"), claim("u-0", "gpu-0"))
    lab.plugin.start()  # no kubelet yet: neither front door is registered
    yield lab
    lab.plugin.stop()


@pytest.fixture
def http(lab: Lab) -> Iterator[HttpService]:
    service = http_service(lab.plugin.settings, lab.plugin)
    service.start()
    yield service
    service.stop()


def scrape(http: HttpService) -> Samples:
    """Every sample by name and labels; checks the ``node`` label on each and leaves it out."""
    with urllib.request.urlopen(f"http://127.0.0.1:{http.port}/metrics", timeout=5) as answer:
        assert answer.status == 200
        assert answer.headers["Content-Type"].startswith("text/plain")
        text = answer.read().decode()
    samples = [s for family in text_string_to_metric_families(text) for s in family.samples]
    assert {s.labels.get("node") for s in samples} == {NODE}, "every series names the node"
    assert not [s.name for s in samples if s.name.endswith("_created")]
    return {
        (s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k != "node"))): s.value
        for s in samples
    }


def by_label(samples: Samples, name: str, label: str) -> dict[str, float]:
    return {
        dict(labels)[label]: value for (metric, labels), value in samples.items() if metric == name
    }


def test_the_agent_serves_its_metrics_beside_healthz_and_status(
    lab: Lab, http: HttpService
) -> None:
    samples = scrape(http)
    assert by_label(samples, "vslice_nodeagent_registered", "path") == {
        "deviceplugin": 0,
        "dra": 0,
    }
    assert by_label(samples, "vslice_nodeagent_gpus", "path") == {"deviceplugin": 1, "dra": 1}
    assert by_label(samples, "vslice_deviceplugin_allocations_total", "result") == {
        "allocated": 0,
        "refused": 0,
        "no_pending": 0,
        "error": 0,
    }
    assert by_label(samples, "vslice_dra_prepares_total", "result") == {
        "prepared": 0,
        "error": 0,
    }
    assert by_label(samples, "vslice_dra_unprepares_total", "result") == {
        "unprepared": 0,
        "error": 0,
    }
    assert samples[("vslice_deviceplugin_allocate_seconds_count", ())] == 0
    assert samples[("vslice_dra_prepare_seconds_count", ())] == 0
    with urllib.request.urlopen(f"http://127.0.0.1:{http.port}/status", timeout=5) as answer:
        assert json.load(answer)["node"] == NODE  # the other routes stay as they were


def test_without_dra_only_the_device_plugin_path_is_reported(
    short_dir: Path, tmp_path: Path
) -> None:
    lab = make_lab(short_dir, tmp_path, listen="127.0.0.1:0")
    service = http_service(lab.plugin.settings, lab.plugin)
    service.start()
    try:
        samples = scrape(service)
    finally:
        service.stop()
    assert by_label(samples, "vslice_nodeagent_gpus", "path") == {"deviceplugin": 2}
    assert by_label(samples, "vslice_nodeagent_registered", "path") == {"deviceplugin": 0}


def test_registrations_allocations_and_prepares_are_counted(
    lab: Lab, http: HttpService, short_dir: Path
) -> None:
    kubelet = Kubelet(lab.directory)
    try:
        kubelet.next_registration()
        wait_until(lambda: lab.plugin.endpoint.status.is_registered)
        registration = grpc.insecure_channel(
            f"unix://{short_dir / 'registry' / f'{DRIVER}-reg.sock'}"
        )
        reg_grpc.RegistrationStub(registration).NotifyRegistrationStatus(  # type: ignore[no-untyped-call]
            reg.RegistrationStatus(plugin_registered=True), timeout=10
        )
        samples = scrape(http)
        assert by_label(samples, "vslice_nodeagent_registered", "path") == {
            "deviceplugin": 1,
            "dra": 1,
        }

        client = lab.client()
        with pytest.raises(grpc.RpcError):  # no pod waits for a slice
            allocate(client, f"{GPU_A}::0")
        shadow = gpu_pod("shadow", "2026-01-01T10:00:00Z", {"main": [grant(GPU_A, 0)]})
        shadow["spec"]["containers"][0]["volumeMounts"] = [{"name": "x", "mountPath": PRELOAD_PATH}]
        lab.api.put_pod(shadow)
        with pytest.raises(grpc.RpcError):  # the only candidate would hide vslice's files
            allocate(client, f"{GPU_A}::0")
        lab.api.delete_pod("team-a", "shadow")
        with pytest.raises(grpc.RpcError):  # a device this plugin never advertised
            allocate(client, "GPU-elsewhere::0")
        lab.api.put_pod(gpu_pod("train", "2026-01-01T10:00:00Z", {"main": [grant(GPU_A, 0)]}))
        allocate(client, f"{GPU_A}::0")

        dra = pb_grpc.DRAPluginStub(  # type: ignore[no-untyped-call]
            grpc.insecure_channel(f"unix://{short_dir / 'plugins' / DRIVER / 'dra.sock'}")
        )
        good = pb.Claim(namespace="team-a", uid="u-1", name="c-u-1")
        other_path = pb.Claim(namespace="team-a", uid="u-0", name="c-u-0")
        dra.NodePrepareResources(pb.NodePrepareResourcesRequest(claims=[good]), timeout=10)
        answer = dra.NodePrepareResources(
            pb.NodePrepareResourcesRequest(claims=[other_path]), timeout=10
        )
        assert answer.claims["u-0"].error  # GPU_A serves the device-plugin path only
        dra.NodeUnprepareResources(pb.NodeUnprepareResourcesRequest(claims=[good]), timeout=10)

        samples = scrape(http)
    finally:
        kubelet.stop()
    assert by_label(samples, "vslice_deviceplugin_allocations_total", "result") == {
        "allocated": 1,
        "refused": 1,
        "no_pending": 1,
        "error": 1,
    }
    assert samples[("vslice_deviceplugin_allocate_seconds_count", ())] == 4
    assert samples[("vslice_deviceplugin_allocate_seconds_bucket", (("le", "+Inf"),))] == 4
    assert by_label(samples, "vslice_dra_prepares_total", "result") == {"prepared": 1, "error": 1}
    assert by_label(samples, "vslice_dra_unprepares_total", "result") == {
        "unprepared": 1,
        "error": 0,
    }
    assert samples[("vslice_dra_prepare_seconds_count", ())] == 2
    assert samples[("vslice_dra_prepare_seconds_sum", ())] > 0


# -- failures the real lab cannot easily produce --------------------------------------------


class _Aborted(Exception):
    pass


class _Context:
    """The part of grpc.ServicerContext the servicers use on failure."""

    def abort(self, code: grpc.StatusCode, details: str) -> NoReturn:
        raise _Aborted(code, details)


class _Allocator:
    def __init__(self, error: Exception) -> None:
        self.error = error

    def allocate(self, device_ids: Sequence[str]) -> NoReturn:
        raise self.error


@pytest.mark.parametrize(
    ("error", "result"),
    [
        (InvalidRequest("unknown device ID"), "error"),
        (NoPendingAllocation("nobody waits"), "no_pending"),
        (ClusterError("API server unreachable"), "error"),
        (OSError("disk full"), "error"),
        (RuntimeError("a bug"), "error"),
    ],
)
def test_every_failed_allocate_is_counted_once(error: Exception, result: str) -> None:
    registry = CollectorRegistry()
    servicer = DevicePluginServicer(
        None,  # type: ignore[arg-type]  # Allocate never looks at the board
        _Allocator(error),  # type: ignore[arg-type]
        AllocationMetrics(registry),
    )
    request = dp.AllocateRequest(
        container_requests=[dp.ContainerAllocateRequest(devices_ids=[f"{GPU_A}::0"])]
    )
    with pytest.raises((_Aborted, RuntimeError)):
        servicer.Allocate(request, _Context())  # type: ignore[arg-type]
    counts = {
        r: registry.get_sample_value("vslice_deviceplugin_allocations_total", {"result": r})
        for r in ("allocated", "refused", "no_pending", "error")
    }
    assert counts == {r: (1.0 if r == result else 0.0) for r in counts}
    assert registry.get_sample_value("vslice_deviceplugin_allocate_seconds_count") == 1


class _Failing:
    """A preparer whose every call raises: the whole call fails."""

    def prepare(self, claims: Sequence[ClaimRef]) -> NoReturn:
        raise ClusterError("API server unreachable")

    def unprepare(self, claims: Sequence[ClaimRef]) -> NoReturn:
        raise ClusterError("API server unreachable")


def test_a_dra_call_that_fails_as_a_whole_counts_each_claim_as_an_error() -> None:
    registry = CollectorRegistry()
    servicer = DRAPluginServicer(_Failing(), DraMetrics(registry))
    claims = [pb.Claim(namespace="n", uid=f"u-{i}", name=f"c-{i}") for i in range(3)]
    with pytest.raises(_Aborted):
        servicer.NodePrepareResources(
            pb.NodePrepareResourcesRequest(claims=claims),
            _Context(),  # type: ignore[arg-type]
        )
    with pytest.raises(_Aborted):
        servicer.NodeUnprepareResources(
            pb.NodeUnprepareResourcesRequest(claims=claims[:2]),
            _Context(),  # type: ignore[arg-type]
        )

    def value(name: str, result: str) -> float | None:
        return registry.get_sample_value(name, {"result": result})

    assert value("vslice_dra_prepares_total", "error") == 3
    assert value("vslice_dra_prepares_total", "prepared") == 0
    assert value("vslice_dra_unprepares_total", "error") == 2
    assert value("vslice_dra_unprepares_total", "unprepared") == 0
    assert registry.get_sample_value("vslice_dra_prepare_seconds_count") == 1
