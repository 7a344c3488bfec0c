"""The lab's GPU nodes, simulated or real: from an inventory file (DESIGN.md's CLUSTER
format) to Node objects.

Each GPU is advertised as ``slots`` devices of ``nvidia.com/gpu`` (the most slices it can hold
at once), so kube-scheduler's own fit check never lets more slices onto a node than it has
slots; memory and cores are vslice's business and are not advertised. The node carries the
``vslice.io/node-gpus`` annotation, written with the same core codec the device plugin uses,
and kwok's annotation so kwok keeps it Ready and runs its pods.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vslice_core.annotations import NODE_GPUS, encode_node_gpus
from vslice_core.cluster import load_cluster
from vslice_core.dra.devices import split
from vslice_core.errors import InvalidRequest
from vslice_core.model import NodeInventory
from vslice_core.resources import DEFAULT_RESOURCE_NAMES

from vslice_lab.components import KWOK_NODE_SELECTOR

SIMULATED_LABEL = "vslice.io/simulated"
NODE_CPU = "64"
NODE_MEMORY = "512Gi"
NODE_PODS = "250"


@dataclass(frozen=True)
class LabNode:
    """One node of the lab to create, simulated by kwok or run by a real kubelet: its GPU
    inventory plus any extra extended resources."""

    inventory: NodeInventory
    extra_resources: dict[str, str] = field(default_factory=dict)
    kubelet: bool = False
    """``kubelet: true`` in the inventory: a real kubelet node on this machine (see
    ``realnode``); otherwise kwok simulates the node."""
    dra_gpus: tuple[int, ...] = ()
    """GPU indices on the DRA path (``dra_gpus`` in the inventory); the others are on the
    extender path. A GPU serves one path only (docs/dra.md "Mixing paths")."""

    @property
    def extender_inventory(self) -> NodeInventory:
        """The GPUs the node annotation lists and the node advertises as nvidia.com/gpu."""
        return split(self.inventory, self.dra_gpus)[0]

    @property
    def dra_inventory(self) -> NodeInventory:
        """The GPUs of the node's ResourceSlice."""
        return split(self.inventory, self.dra_gpus)[1]

    @property
    def name(self) -> str:
        return self.inventory.name

    @property
    def gpu_devices(self) -> int:
        return sum(gpu.slots for gpu in self.extender_inventory.gpus)

    def manifest(self) -> dict[str, Any]:
        """The Node object (metadata and status) for the API."""
        resources = {
            "cpu": NODE_CPU,
            "memory": NODE_MEMORY,
            "pods": NODE_PODS,
            DEFAULT_RESOURCE_NAMES.gpu: str(self.gpu_devices),
            **self.extra_resources,
        }
        key, value = KWOK_NODE_SELECTOR.split("=", 1)
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": {
                    "kubernetes.io/hostname": self.name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "type": "kwok",
                    SIMULATED_LABEL: "true",
                },
                "annotations": {key: value, NODE_GPUS: encode_node_gpus(self.extender_inventory)},
            },
            "status": {"capacity": resources, "allocatable": resources},
        }


def load_inventory(path: Path) -> list[LabNode]:
    """The simulated nodes of an inventory file; InvalidRequest names what is wrong.

    Parsed by the core's CLUSTER parser; per-GPU ``used`` values are ignored (a new lab
    starts empty). Nodes marked ``kubelet: true`` come back with ``real`` set.
    """
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise InvalidRequest(
            f"inventory file {str(path)!r} does not exist", field="inventory", value=str(path)
        ) from None
    cluster = load_cluster(text)
    if not cluster.nodes:
        raise InvalidRequest(
            f"inventory {path} must list at least one node in `nodes`",
            field="nodes",
            value=str(path),
        )
    for node in cluster.nodes:
        indices = {gpu.index for gpu in node.gpus}
        unknown = sorted(set(node.dra_gpus) - indices)
        if unknown:
            raise InvalidRequest(
                f"inventory {path}: node {node.name}: dra_gpus names GPU index {unknown[0]}, "
                f"which the node does not have (it has {sorted(indices)})",
                field="dra_gpus",
                value=unknown[0],
            )
    return [
        LabNode(node.inventory(), kubelet=node.kubelet, dra_gpus=tuple(node.dra_gpus))
        for node in cluster.nodes
    ]
