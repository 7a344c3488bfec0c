"""Annotation keys and the codecs of the values vslice writes (versioned JSON).

Every value vslice writes is a JSON object with ``"version": 1`` next to its fields (see
docs/annotations.md). Decoders accept exactly that: malformed JSON, a wrong shape, an unknown
field or another version raise :class:`DecodeError` naming the annotation, so a reader (the
extender rebuilding its ledger, the device plugin, ``vslice top``) can skip or report one bad
value instead of crashing. HAMi's node and pod annotations decode too, for users migrating.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from vslice_core.errors import DecodeError
from vslice_core.model import (
    Allocation,
    ContainerAllocation,
    Gpu,
    GpuGrant,
    NodeInventory,
    validation_message,
)
from vslice_core.proof import PROOF

VERSION = 1

# Values vslice writes.
NODE_GPUS = "vslice.io/node-gpus"
# "driver" or "shim": what holds a container's GPU memory at its slice on the node (docs/shim.md).
MEMORY_BACKEND = "vslice.io/memory-backend"
ALLOCATION = "vslice.io/allocation"
DELIVERED = "vslice.io/delivered"
NODE_LOCK = "vslice.io/node-lock"
BIND_TIME = "vslice.io/bind-time"
IDLE_SINCE = "vslice.io/idle-since"  # RFC 3339: the pod's last kernel launch, once it is idle
IDLE_RECLAIM_AT = "vslice.io/idle-reclaim-at"  # RFC 3339: when an idle pod will be evicted
ALLOCATION_PROOF = PROOF  # written beside the allocation, see vslice_core.proof

# Pod annotations only vslice may write: the webhook removes them when a pod is created and
# the ValidatingAdmissionPolicy refuses changes to them by anyone but vslice's identities.
# Add any future pod state annotation here; every check reads this one tuple.
POD_STATE = (ALLOCATION, ALLOCATION_PROOF, DELIVERED, BIND_TIME, IDLE_SINCE, IDLE_RECLAIM_AT)

# Pod annotations a user may set, and HAMi's spelling of each.
GPU_TYPE = "vslice.io/gpu-type"
GPU_TYPE_EXCLUDE = "vslice.io/gpu-type-exclude"
GPU_UUID = "vslice.io/gpu-uuid"
GPU_UUID_EXCLUDE = "vslice.io/gpu-uuid-exclude"
NUMA_BIND = "vslice.io/numa-bind"
NODE_POLICY = "vslice.io/node-policy"
GPU_POLICY = "vslice.io/gpu-policy"
HAMI_ALIASES: dict[str, str] = {
    GPU_TYPE: "nvidia.com/use-gputype",
    GPU_TYPE_EXCLUDE: "nvidia.com/nouse-gputype",
    GPU_UUID: "nvidia.com/use-gpuuuid",
    GPU_UUID_EXCLUDE: "nvidia.com/nouse-gpuuuid",
    NUMA_BIND: "nvidia.com/numa-bind",
    NODE_POLICY: "hami.io/node-scheduler-policy",
    GPU_POLICY: "hami.io/gpu-scheduler-policy",
}

# HAMi's own values, read for migration only.
HAMI_NODE_REGISTER = "hami.io/node-nvidia-register"
HAMI_DEVICES_ALLOCATED = "hami.io/vgpu-devices-allocated"

_SHOWN = 120  # characters of a bad value quoted in an error message


def _utc(value: datetime) -> datetime:
    return value if value.tzinfo else value.replace(tzinfo=UTC)


# A time without a zone is read as UTC: a hand-written value must not fail or shift.
UtcDatetime = Annotated[datetime, AfterValidator(_utc)]


class Delivery(BaseModel):
    """The device plugin's record that Allocate handed a pod's slices to the kubelet."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    node: str = Field(min_length=1)
    containers: list[str] = Field(default_factory=list, description="containers delivered")
    time: UtcDatetime


class NodeLock(BaseModel):
    """The extender's bind lock on a node: who holds it and until when."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    holder: str = Field(min_length=1)
    expires: UtcDatetime

    def expired(self, now: datetime) -> bool:
        return now >= self.expires


class BindTime(BaseModel):
    """When the extender bound a pod (microseconds): the order the kubelet receives pods in."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    time: UtcDatetime


class _NodeGpus(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    gpus: list[Gpu]
    topology: dict[str, int] = Field(default_factory=dict)


_M = TypeVar("_M", bound=BaseModel)


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "..."


def _load_versioned(key: str, value: str) -> dict[str, Any]:
    try:
        data = json.loads(value)
    except (TypeError, ValueError, RecursionError):
        raise DecodeError(
            f"{key} must be a JSON object, got {_shown(value)}", field=key, value=value
        ) from None
    if not isinstance(data, dict):
        raise DecodeError(
            f"{key} must be a JSON object, got {_shown(value)}", field=key, value=value
        )
    version = data.pop("version", None)
    if version != VERSION or isinstance(version, bool):
        raise DecodeError(
            f"{key} version must be {VERSION}, got {_shown(version)}", field=key, value=value
        )
    return data


def _validated(model: type[_M], key: str, data: Any, value: str) -> _M:
    try:
        return model.model_validate(data)
    except ValidationError as error:
        _, message = validation_message(error)
        raise DecodeError(f"{key}: {message}", field=key, value=value) from None


def _dump(model: BaseModel) -> str:
    body = model.model_dump(mode="json")
    return json.dumps({"version": VERSION, **body}, separators=(",", ":"), sort_keys=True)


def encode_node_gpus(inventory: NodeInventory) -> str:
    """The ``vslice.io/node-gpus`` value of a node (its name is the node's own)."""
    return _dump(_NodeGpus(gpus=inventory.gpus, topology=inventory.topology))


def decode_node_gpus(value: str, node: str) -> NodeInventory:
    data = _load_versioned(NODE_GPUS, value)
    wire = _validated(_NodeGpus, NODE_GPUS, data, value)
    return _validated(NodeInventory, NODE_GPUS, {"name": node, **wire.model_dump()}, value)


def encode_allocation(allocation: Allocation) -> str:
    return _dump(allocation)


def decode_allocation(value: str) -> Allocation:
    return _validated(Allocation, ALLOCATION, _load_versioned(ALLOCATION, value), value)


def encode_delivered(delivery: Delivery) -> str:
    return _dump(delivery)


def decode_delivered(value: str) -> Delivery:
    return _validated(Delivery, DELIVERED, _load_versioned(DELIVERED, value), value)


def encode_bind_time(moment: datetime) -> str:
    return _dump(BindTime(time=moment))


def decode_bind_time(value: str) -> datetime:
    return _validated(BindTime, BIND_TIME, _load_versioned(BIND_TIME, value), value).time


def encode_moment(moment: datetime) -> str:
    """A moment as the idle annotations hold it (the shape of ``vslice.io/bind-time``)."""
    return _dump(BindTime(time=moment.replace(microsecond=0)))


def decode_moment(key: str, value: str) -> datetime:
    """The moment of ``vslice.io/idle-since`` or ``vslice.io/idle-reclaim-at``."""
    return _validated(BindTime, key, _load_versioned(key, value), value).time


def encode_node_lock(lock: NodeLock) -> str:
    return _dump(lock)


def decode_node_lock(value: str) -> NodeLock:
    return _validated(NodeLock, NODE_LOCK, _load_versioned(NODE_LOCK, value), value)


def _hami_gpu(entry: Any, position: int) -> dict[str, Any]:
    if not isinstance(entry, dict):
        raise DecodeError(
            f"{HAMI_NODE_REGISTER}[{position}] must be an object, got {_shown(entry)}",
            field=HAMI_NODE_REGISTER,
            value=entry,
        )
    return {
        "uuid": entry.get("id"),
        "model": entry.get("type"),
        "memory_mib": entry.get("devmem"),
        "cores": entry.get("devcore", 100),
        "slots": entry.get("count"),
        "index": entry.get("index", position),
        "numa": entry.get("numa", 0),
        "healthy": entry.get("health", True),
    }


def decode_hami_node_register(value: str, node: str) -> NodeInventory:
    """HAMi's ``hami.io/node-nvidia-register`` (a JSON array of devices) as an inventory."""
    try:
        data = json.loads(value)
    except (TypeError, ValueError, RecursionError):
        data = None
    if not isinstance(data, list):
        raise DecodeError(
            f"{HAMI_NODE_REGISTER} must be a JSON array, got {_shown(value)}",
            field=HAMI_NODE_REGISTER,
            value=value,
        )
    gpus = [_hami_gpu(entry, position) for position, entry in enumerate(data)]
    return _validated(NodeInventory, HAMI_NODE_REGISTER, {"name": node, "gpus": gpus}, value)


def _hami_grant(text: str, indices: dict[str, int], value: str) -> GpuGrant:
    parts = text.split(",")
    if len(parts) != 4:
        raise DecodeError(
            f"{HAMI_DEVICES_ALLOCATED} device must be 'UUID,TYPE,MEMORY,CORES', got {text!r}",
            field=HAMI_DEVICES_ALLOCATED,
            value=value,
        )
    uuid, _kind, memory, cores = (part.strip() for part in parts)
    data = {"uuid": uuid, "index": indices.get(uuid, 0), "memory_mib": memory, "cores": cores}
    return _validated(GpuGrant, HAMI_DEVICES_ALLOCATED, data, value)


def decode_hami_allocation(
    value: str, node: str, containers: Sequence[str], inventory: NodeInventory | None = None
) -> Allocation:
    """HAMi's ``hami.io/vgpu-devices-allocated`` as an allocation.

    Devices end with ``:``, containers with ``;`` in the order of ``containers`` (the pod's
    container names). HAMi does not record device indices; ``inventory`` supplies them.
    """
    segments = value.split(";")
    if segments and segments[-1].strip() == "":
        segments.pop()
    if len(segments) > len(containers):
        raise DecodeError(
            f"{HAMI_DEVICES_ALLOCATED} lists {len(segments)} containers, the pod has "
            f"{len(containers)}, got {_shown(value)}",
            field=HAMI_DEVICES_ALLOCATED,
            value=value,
        )
    indices = {gpu.uuid: gpu.index for gpu in inventory.gpus} if inventory else {}
    allocated = []
    for name, segment in zip(containers, segments, strict=False):
        devices = [d for d in segment.split(":") if d.strip()]
        if devices:
            grants = [_hami_grant(device, indices, value) for device in devices]
            allocated.append(ContainerAllocation(name=name, gpus=grants))
    return _validated(
        Allocation, HAMI_DEVICES_ALLOCATED, {"node": node, "containers": allocated}, value
    )
