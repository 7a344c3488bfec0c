"""Virtual devices: how one physical GPU becomes ``slots`` devices the kubelet can count.

The kubelet only counts opaque device IDs. vslice advertises each GPU as ``slots`` IDs of the
form ``<gpu uuid>::<slot>`` (slot 0..slots-1), so the node's ``nvidia.com/gpu`` capacity is the
number of slices the node can hold at once. Which physical GPU a container really gets is the
extender's decision (the pod's allocation annotation), not the IDs the kubelet picked; the IDs
only keep the kubelet's count right.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from vslice_core.errors import InvalidRequest

SEPARATOR = "::"
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"


class GpuLike(Protocol):
    """What the device plugin needs to know about one physical GPU."""

    @property
    def uuid(self) -> str: ...
    @property
    def index(self) -> int: ...
    @property
    def numa(self) -> int: ...
    @property
    def slots(self) -> int: ...
    @property
    def healthy(self) -> bool: ...


@dataclass(frozen=True, order=True)
class VirtualDevice:
    """One advertised device: slot ``slot`` of the GPU ``uuid``."""

    uuid: str
    slot: int
    numa: int = 0
    healthy: bool = True

    @property
    def id(self) -> str:
        return f"{self.uuid}{SEPARATOR}{self.slot}"

    @property
    def health(self) -> str:
        return HEALTHY if self.healthy else UNHEALTHY


def virtual_devices(gpus: Iterable[GpuLike]) -> list[VirtualDevice]:
    """Every GPU's slots, ordered by GPU index then slot, so the list is stable across calls."""
    ordered = sorted(gpus, key=lambda gpu: (gpu.index, gpu.uuid))
    return [
        VirtualDevice(gpu.uuid, slot, gpu.numa, gpu.healthy)
        for gpu in ordered
        for slot in range(gpu.slots)
    ]


def parse_device_id(device_id: str) -> tuple[str, int]:
    """``"GPU-1::3"`` -> ``("GPU-1", 3)``; anything else is an error naming the ID."""
    uuid, sep, slot = device_id.rpartition(SEPARATOR)
    if not sep or not uuid or not slot.isdigit():
        raise InvalidRequest(
            f"device ID {device_id!r} is not a vslice device (expected '<gpu uuid>::<slot>')",
            field="devices_ids",
            value=device_id,
        )
    return uuid, int(slot)


def gpus_of(device_ids: Sequence[str], known: Iterable[str]) -> list[str]:
    """The GPU UUIDs behind ``device_ids`` (in first-seen order); unknown GPUs are an error."""
    known_set = set(known)
    uuids: list[str] = []
    for device_id in device_ids:
        uuid, _ = parse_device_id(device_id)
        if uuid not in known_set:
            raise InvalidRequest(
                f"device ID {device_id!r} names GPU {uuid!r}, which this node does not have; "
                f"known GPUs: {', '.join(sorted(known_set)) or 'none'}",
                field="devices_ids",
                value=device_id,
            )
        if uuid not in uuids:
            uuids.append(uuid)
    return uuids
