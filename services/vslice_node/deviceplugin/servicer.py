"""The DevicePlugin gRPC service: thin handlers that translate between protobuf and the
allocator, the device board and the container handover.

Errors reach the kubelet as gRPC status codes with a message naming the problem (it shows the
message in the pod's events): unknown device IDs are INVALID_ARGUMENT, no matching pending
allocation is FAILED_PRECONDITION, an unreachable API server is UNAVAILABLE. Nothing raised by
a handler stops the server.

Every container Allocate answers is counted and timed (:mod:`vslice_node.deviceplugin.metrics`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from typing import NoReturn

import grpc
from vslice_core.errors import ClusterError, InvalidRequest

from vslice_node.deviceplugin.allocator import AllocationRefused, Allocator, NoPendingAllocation
from vslice_node.deviceplugin.api import deviceplugin_pb2 as pb
from vslice_node.deviceplugin.api import deviceplugin_pb2_grpc as pb_grpc
from vslice_node.deviceplugin.board import DeviceBoard
from vslice_node.deviceplugin.devices import VirtualDevice
from vslice_node.deviceplugin.metrics import AllocationMetrics, AllocationResult
from vslice_node.handover.container import ContainerHandover

log = logging.getLogger("vslice.deviceplugin.grpc")

STREAM_WAKE_S = 1.0  # how often an idle ListAndWatch stream checks that its client is still there


def device_message(device: VirtualDevice) -> pb.Device:
    topology = pb.TopologyInfo(nodes=[pb.NUMANode(ID=device.numa)])
    return pb.Device(ID=device.id, health=device.health, topology=topology)


def list_response(devices: Sequence[VirtualDevice]) -> pb.ListAndWatchResponse:
    return pb.ListAndWatchResponse(devices=[device_message(d) for d in devices])


def container_response(found: ContainerHandover) -> pb.ContainerAllocateResponse:
    return pb.ContainerAllocateResponse(
        envs=found.envs,
        mounts=[
            pb.Mount(container_path=m.container_path, host_path=m.host_path, read_only=m.read_only)
            for m in found.mounts
        ],
        devices=[
            pb.DeviceSpec(
                container_path=d.container_path, host_path=d.host_path, permissions=d.permissions
            )
            for d in found.devices
        ],
        cdi_devices=[pb.CDIDevice(name=name) for name in found.cdi_devices],
    )


def allocate_failure(exc: Exception) -> tuple[grpc.StatusCode, AllocationResult, str]:
    """The status code, the counted result and the message of a failed Allocate."""
    if isinstance(exc, InvalidRequest):
        return grpc.StatusCode.INVALID_ARGUMENT, "error", str(exc)
    if isinstance(exc, AllocationRefused):  # before its base class: a refusal is no miss
        return grpc.StatusCode.FAILED_PRECONDITION, "refused", str(exc)
    if isinstance(exc, NoPendingAllocation):
        return grpc.StatusCode.FAILED_PRECONDITION, "no_pending", str(exc)
    if isinstance(exc, ClusterError):
        return grpc.StatusCode.UNAVAILABLE, "error", str(exc)
    return grpc.StatusCode.INTERNAL, "error", f"cannot prepare the node: {exc}"


class DevicePluginServicer(pb_grpc.DevicePluginServicer):
    def __init__(
        self,
        board: DeviceBoard,
        allocator: Allocator,
        metrics: AllocationMetrics | None = None,
    ) -> None:
        self.board = board
        self.allocator = allocator
        self.metrics = metrics if metrics is not None else AllocationMetrics()

    def GetDevicePluginOptions(
        self, request: pb.Empty, context: grpc.ServicerContext
    ) -> pb.DevicePluginOptions:
        return pb.DevicePluginOptions(
            pre_start_required=False, get_preferred_allocation_available=True
        )

    def ListAndWatch(
        self, request: pb.Empty, context: grpc.ServicerContext
    ) -> Iterator[pb.ListAndWatchResponse]:
        version, devices = self.board.snapshot()
        log.info("ListAndWatch opened", extra={"devices": len(devices)})
        yield list_response(devices)
        while context.is_active() and not self.board.closed:
            newer = self.board.wait_newer(version, STREAM_WAKE_S)
            if newer is not None:
                version, devices = newer
                unhealthy = sum(1 for d in devices if not d.healthy)
                log.info(
                    "device list changed", extra={"devices": len(devices), "unhealthy": unhealthy}
                )
                yield list_response(devices)

    def GetPreferredAllocation(
        self, request: pb.PreferredAllocationRequest, context: grpc.ServicerContext
    ) -> pb.PreferredAllocationResponse:
        responses = []
        for item in request.container_requests:
            try:
                chosen = self.allocator.preferred(
                    list(item.available_deviceIDs),
                    list(item.must_include_deviceIDs),
                    item.allocation_size,
                )
            except InvalidRequest as exc:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            responses.append(pb.ContainerPreferredAllocationResponse(deviceIDs=chosen))
        return pb.PreferredAllocationResponse(container_responses=responses)

    def Allocate(
        self, request: pb.AllocateRequest, context: grpc.ServicerContext
    ) -> pb.AllocateResponse:
        responses = []
        for item in request.container_requests:
            responses.append(container_response(self._allocate(list(item.devices_ids), context)))
        return pb.AllocateResponse(container_responses=responses)

    def _allocate(self, device_ids: list[str], context: grpc.ServicerContext) -> ContainerHandover:
        """One container's handover, counted and timed; a failure aborts the call."""
        started = time.monotonic()
        try:
            found = self.allocator.allocate(device_ids)
        except (InvalidRequest, NoPendingAllocation, ClusterError, OSError) as exc:
            code, result, message = allocate_failure(exc)
            self._count(result, started)
            self._fail(context, code, message)
        except Exception:
            # gRPC answers UNKNOWN and logs it; the metric must still see the failure.
            self._count("error", started)
            raise
        self._count("allocated", started)
        return found

    def _count(self, result: AllocationResult, started: float) -> None:
        self.metrics.allocate_seconds.observe(time.monotonic() - started)
        self.metrics.counted(result)

    def PreStartContainer(
        self, request: pb.PreStartContainerRequest, context: grpc.ServicerContext
    ) -> pb.PreStartContainerResponse:
        return pb.PreStartContainerResponse()

    @staticmethod
    def _fail(context: grpc.ServicerContext, code: grpc.StatusCode, message: str) -> NoReturn:
        log.error("Allocate refused", extra={"code": code.name, "error": message})
        context.abort(code, message)
