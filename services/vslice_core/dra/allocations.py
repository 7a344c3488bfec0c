"""What an allocated ResourceClaim grants on one node: per vslice device, how much of it.

kube-scheduler's allocator writes ``status.allocation.devices.results``: one entry per device
given to a request, with the pool (the node, for vslice), the device (``gpu-<index>``) and,
for devices that allow multiple allocations, ``consumedCapacity`` (what the claim takes of
``memory``, ``cores`` and ``slots``, after the request policy's defaults and rounding). The
kubelet plugin turns that into the same :class:`~vslice_core.model.GpuGrant` the device
plugin hands the shim, and the views count it like an annotation-path allocation.

Everything read here was written by someone else (the scheduler, or a user editing the
claim's status): every problem is an :class:`InvalidRequest` naming the claim, the field and
the value, never a KeyError.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vslice_core.dra import CORES, DRIVER, MEMORY, MIB, claim_label
from vslice_core.dra.devices import device_name
from vslice_core.errors import InvalidRequest
from vslice_core.model import (
    EXCLUSIVE_CORES,
    Allocation,
    ContainerAllocation,
    GpuGrant,
    NodeInventory,
)
from vslice_core.quantities import parse_quantity


@dataclass(frozen=True)
class DeviceShare:
    """One allocation result of vslice's driver: a request's share of one device."""

    request: str
    pool: str
    device: str
    memory_bytes: int | None
    """``None`` when the result carries no consumed memory (the whole device)."""
    cores: int | None
    share_id: str | None

    @property
    def container_request(self) -> str:
        """The claim request's name (a ``firstAvailable`` subrequest's parent)."""
        return self.request.split("/", 1)[0]


def _problem(
    claim: Mapping[str, Any], field: str, expectation: str, value: object
) -> InvalidRequest:
    return InvalidRequest(
        f"ResourceClaim {claim_label(claim)}: {field} must be {expectation}, got {value!r}",
        field=field,
        value=value,
    )


def _whole(claim: Mapping[str, Any], field: str, value: object, unit: int = 1) -> int:
    try:
        number = parse_quantity(value, field)
    except InvalidRequest:
        raise _problem(claim, field, "a quantity", value) from None
    if number < 0 or (number / unit).denominator != 1:
        what = "a whole number of MiB" if unit == MIB else "a whole, non-negative number"
        raise _problem(claim, field, what, value)
    return int(number)


def shares(claim: Mapping[str, Any], driver: str = DRIVER) -> list[DeviceShare]:
    """The claim's allocation results of ``driver`` (other drivers' results are theirs)."""
    status = claim.get("status")
    allocation = status.get("allocation") if isinstance(status, Mapping) else None
    if allocation is None:
        return []
    if not isinstance(allocation, Mapping):
        raise _problem(claim, "status.allocation", "an object", allocation)
    results = (allocation.get("devices") or {}).get("results") or []
    if not isinstance(results, list):
        raise _problem(claim, "status.allocation.devices.results", "a list", results)
    found = []
    for i, result in enumerate(results):
        field = f"status.allocation.devices.results[{i}]"
        if not isinstance(result, Mapping):
            raise _problem(claim, field, "an object", result)
        if result.get("driver") != driver:
            continue
        for key in ("request", "pool", "device"):
            if not isinstance(result.get(key), str) or not result.get(key):
                raise _problem(claim, f"{field}.{key}", "a non-empty string", result.get(key))
        consumed = result.get("consumedCapacity") or {}
        if not isinstance(consumed, Mapping):
            raise _problem(claim, f"{field}.consumedCapacity", "an object", consumed)
        memory = consumed.get(MEMORY)
        cores = consumed.get(CORES)
        found.append(
            DeviceShare(
                request=result["request"],
                pool=result["pool"],
                device=result["device"],
                memory_bytes=None
                if memory is None
                else _whole(claim, f"{field}.consumedCapacity.{MEMORY}", memory, MIB),
                cores=None
                if cores is None
                else _whole(claim, f"{field}.consumedCapacity.{CORES}", cores),
                share_id=result.get("shareID") if isinstance(result.get("shareID"), str) else None,
            )
        )
    return found


def grants(
    claim: Mapping[str, Any], inventory: NodeInventory, driver: str = DRIVER
) -> dict[str, list[GpuGrant]]:
    """Per claim request, the GPUs of this node it was given and how much of each.

    A result without consumed capacity (an allocator that does not share devices) takes the
    whole GPU. A result for another node's pool, or for a device this node does not have
    (the GPUs changed under an allocated claim), is an error naming the result.
    """
    gpus = {device_name(gpu): gpu for gpu in inventory.gpus}
    granted: dict[str, list[GpuGrant]] = {}
    for i, share in enumerate(shares(claim, driver)):
        field = f"status.allocation.devices.results[{i}]"
        if share.pool != inventory.name:
            raise _problem(claim, f"{field}.pool", f"this node ({inventory.name!r})", share.pool)
        gpu = gpus.get(share.device)
        if gpu is None:
            have = ", ".join(sorted(gpus)) or "none"
            raise _problem(
                claim, f"{field}.device", f"one of this node's GPUs ({have})", share.device
            )
        memory = gpu.memory_mib if share.memory_bytes is None else share.memory_bytes // MIB
        cores = (
            EXCLUSIVE_CORES
            if share.memory_bytes is None and share.cores is None
            else (share.cores or 0)
        )
        if memory > gpu.memory_mib:
            raise _problem(
                claim,
                f"{field}.consumedCapacity.{MEMORY}",
                f"at most {gpu.memory_mib}Mi",
                f"{memory}Mi",
            )
        if cores > 100:
            raise _problem(claim, f"{field}.consumedCapacity.{CORES}", "at most 100", cores)
        granted.setdefault(share.container_request, []).append(
            GpuGrant(uuid=gpu.uuid, index=gpu.index, memory_mib=memory, cores=cores)
        )
    return granted


def allocation_of(
    claim: Mapping[str, Any], inventories: Mapping[str, NodeInventory], driver: str = DRIVER
) -> Allocation | None:
    """The claim's vslice allocation in the engine's terms (node = the results' pool, one
    "container" per claim request), or None when it holds nothing of ``driver``. Results on
    several pools (a claim is per node for vslice) or on a node without an inventory are an
    InvalidRequest naming the claim."""
    found = shares(claim, driver)
    if not found:
        return None
    pools = sorted({share.pool for share in found})
    if len(pools) > 1:
        raise _problem(claim, "status.allocation.devices.results", "on one node", pools)
    inventory = inventories.get(pools[0])
    if inventory is None:
        raise _problem(
            claim, "status.allocation.devices.results[0].pool", "a node with vslice GPUs", pools[0]
        )
    granted = grants(claim, inventory, driver)
    return Allocation(
        node=inventory.name,
        containers=[ContainerAllocation(name=request, gpus=g) for request, g in granted.items()],
    )


def reserved_for(claim: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(name, uid) of the pods the claim is reserved for."""
    status = claim.get("status") or {}
    users = status.get("reservedFor") if isinstance(status, Mapping) else None
    return [
        (str(user.get("name", "")), str(user.get("uid", "")))
        for user in users or []
        if isinstance(user, Mapping) and user.get("resource") == "pods"
    ]
