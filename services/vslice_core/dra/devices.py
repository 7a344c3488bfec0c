"""What a node publishes: one ResourceSlice per node with one device per GPU.

Every device allows multiple allocations (consumable capacity, KEP-5075, beta from
Kubernetes 1.36) and carries three capacities whose request policies encode vslice's rules,
so kube-scheduler's own allocator enforces them without vslice in the scheduling path:

- ``memory`` (bytes): any whole number of MiB from 1 MiB to the card's size; a claim that
  asks none gets the whole card (the default), which is how a whole-card claim stays
  exclusive: every other claim consumes at least 1 MiB;
- ``cores`` (percent of SMs, 0..100, default 0 = no promise, as on the device-plugin path);
- ``slots``: the GPU's slice limit; every claim consumes exactly one (the only valid value).

Attributes: ``model``, ``uuid``, ``index``, ``numaNode``, ``healthy``, ``cordoned`` and
``allocatable`` (healthy and not cordoned); the DeviceClass selects allocatable devices, so
an unhealthy GPU stays visible (``vslice top`` shows it) but takes no new claim. A failed or
cordoned GPU's device also carries a taint (:mod:`vslice_core.dra.taints`): NoExecute ends
the pods on a failed GPU, NoSchedule keeps new claims off a cordoned one.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from vslice_core.dra import CORES, DRIVER, MEMORY, MIB, SLOTS, taints
from vslice_core.errors import InvalidRequest
from vslice_core.model import Gpu, NodeInventory
from vslice_core.quantities import parse_quantity

RESOURCE_API = "resource.k8s.io/v1"


def device_name(gpu: Gpu) -> str:
    """A device's name in the node's pool: ``gpu-<index>`` (DNS label, stable per card slot)."""
    return f"gpu-{gpu.index}"


def _mi(mib: int) -> str:
    return f"{mib}Mi"


def device(gpu: Gpu) -> dict[str, Any]:
    """One GPU as a ResourceSlice device (with taints when it failed or is cordoned)."""
    found: dict[str, Any] = {
        "name": device_name(gpu),
        "allowMultipleAllocations": True,
        "attributes": {
            "model": {"string": gpu.model},
            "uuid": {"string": gpu.uuid},
            "index": {"int": gpu.index},
            "numaNode": {"int": gpu.numa},
            "healthy": {"bool": gpu.healthy},
            "cordoned": {"bool": gpu.cordoned},
            # What the DeviceClass tests: one attribute, not two (each CEL term is evaluated
            # for every device of every node a pod is tried on; benchmarks/scheduling.py).
            "allocatable": {"bool": gpu.healthy and not gpu.cordoned},
        },
        "capacity": {
            MEMORY: {
                "value": _mi(gpu.memory_mib),
                "requestPolicy": {
                    "default": _mi(gpu.memory_mib),
                    "validRange": {"min": _mi(1), "max": _mi(gpu.memory_mib), "step": _mi(1)},
                },
            },
            CORES: {
                "value": str(gpu.cores),
                "requestPolicy": {
                    "default": "0",
                    "validRange": {"min": "0", "max": str(gpu.cores), "step": "1"},
                },
            },
            SLOTS: {
                "value": str(gpu.slots),
                "requestPolicy": {"default": "1", "validValues": ["1"]},
            },
        },
    }
    marked = taints.device_taints(gpu)
    if marked:
        found["taints"] = marked
    return found


def slice_name(node: str) -> str:
    """The node's ResourceSlice: one per node, named after it and the driver."""
    return f"{node}-{DRIVER}"


def resource_slice(
    inventory: NodeInventory, generation: int, node_uid: str | None = None
) -> dict[str, Any]:
    """The node's ResourceSlice: pool = node name, one slice in the pool.

    ``generation`` must grow whenever the devices change (a GPU added, gone or unhealthy),
    so the scheduler drops slices of an older generation. With ``node_uid`` the slice is
    owned by the Node and goes away with it.
    """
    metadata: dict[str, Any] = {"name": slice_name(inventory.name)}
    if node_uid:
        metadata["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Node", "name": inventory.name, "uid": node_uid}
        ]
    return {
        "apiVersion": RESOURCE_API,
        "kind": "ResourceSlice",
        "metadata": metadata,
        "spec": {
            "driver": DRIVER,
            "nodeName": inventory.name,
            "pool": {"name": inventory.name, "generation": generation, "resourceSliceCount": 1},
            "devices": [device(gpu) for gpu in sorted(inventory.gpus, key=lambda g: g.index)],
        },
    }


def same_devices(
    published: Mapping[str, Any], wanted: Mapping[str, Any], *, with_taints: bool = True
) -> bool:
    """Whether a published slice already says what ``wanted`` says (generation aside):
    the publisher then writes nothing, so restarts and resyncs cost no scheduler work.
    ``with_taints=False`` leaves the devices' taints out of the comparison."""
    spec = published.get("spec") or {}
    want = wanted.get("spec") or {}
    return bool(
        spec.get("driver") == want.get("driver")
        and spec.get("nodeName") == want.get("nodeName")
        and (spec.get("pool") or {}).get("name") == want["pool"]["name"]
        and _normal(spec.get("devices"), with_taints) == _normal(want.get("devices"), with_taints)
    )


def _normal(devices: object, with_taints: bool) -> object:
    # The API server may add defaulted fields and stores quantities in canonical form
    # ("81920Mi" comes back as "80Gi"): compare only what vslice sets, quantities as numbers.
    if not isinstance(devices, list):
        return devices
    keys = ("name", "allowMultipleAllocations", "attributes")
    return [
        {
            **{key: item.get(key) for key in keys},
            "capacity": _numbers(item.get("capacity")),
            "taints": taints.normal(item) if with_taints else None,
        }
        if isinstance(item, dict)
        else item
        for item in devices
    ]


def _numbers(value: object) -> object:
    if isinstance(value, dict):
        return {key: _numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_numbers(item) for item in value]
    if isinstance(value, str):
        try:
            return parse_quantity(value, "capacity")
        except InvalidRequest:
            return value
    return value


SELECTOR = f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].allocatable'
"""The DeviceClass' CEL: vslice's devices that are healthy and not cordoned (the DeviceClass
itself is an install object: ``vslice_control.install.dra``)."""


def memory_bytes(mib: int) -> int:
    return mib * MIB


def _attribute(device: Mapping[str, Any], name: str, kind: str) -> Any:
    value = (device.get("attributes") or {}).get(name) or {}
    return value.get(kind) if isinstance(value, Mapping) else None


def _capacity_value(device: Mapping[str, Any], name: str) -> Any:
    value = (device.get("capacity") or {}).get(name) or {}
    return value.get("value") if isinstance(value, Mapping) else None


def inventory_from_slice(published: Mapping[str, Any]) -> NodeInventory:
    """The GPUs a vslice ResourceSlice describes, as the node inventory it was made from.

    The views read DRA-only nodes (no device plugin, so no node annotation) this way. A
    device that does not read back is an :class:`InvalidRequest` naming the slice, the
    device and the field (someone else may have written the slice).
    """
    spec = published.get("spec") or {}
    name = str((published.get("metadata") or {}).get("name", "?"))
    node = spec.get("nodeName")
    if not isinstance(node, str) or not node:
        raise InvalidRequest(
            f"ResourceSlice {name}: spec.nodeName must name a node, got {node!r}",
            field="spec.nodeName",
            value=node,
        )
    gpus = []
    for i, item in enumerate(spec.get("devices") or []):
        where = f"ResourceSlice {name}: spec.devices[{i}]"
        try:
            memory = _capacity_value(item, MEMORY)
            gpus.append(
                Gpu(
                    uuid=_attribute(item, "uuid", "string"),
                    model=_attribute(item, "model", "string"),
                    memory_mib=int(parse_quantity(memory, "memory") // MIB),
                    cores=int(parse_quantity(_capacity_value(item, CORES), "cores")),
                    slots=int(parse_quantity(_capacity_value(item, SLOTS), "slots")),
                    index=_attribute(item, "index", "int"),
                    numa=_attribute(item, "numaNode", "int") or 0,
                    healthy=_attribute(item, "healthy", "bool") is not False,
                    cordoned=_attribute(item, "cordoned", "bool") is True,
                )
            )
        except (InvalidRequest, ValueError, TypeError) as error:
            text = str(error).splitlines()[0] if str(error) else type(error).__name__
            raise InvalidRequest(f"{where}: {text}", field=f"spec.devices[{i}]") from None
    return NodeInventory(name=node, gpus=gpus)


def split(
    inventory: NodeInventory, dra_gpus: Collection[int] | None
) -> tuple[NodeInventory, NodeInventory]:
    """The node's GPUs for the extender path and for the DRA path (``dra_gpus``: indices;
    None: all of them). A GPU serves one path only: neither allocator sees the other's
    slices, so a GPU on both could be promised twice."""
    on_dra = [g for g in inventory.gpus if dra_gpus is None or g.index in dra_gpus]
    rest = [g for g in inventory.gpus if g not in on_dra]
    return (
        inventory.model_copy(update={"gpus": rest}),
        inventory.model_copy(update={"gpus": on_dra}),
    )
