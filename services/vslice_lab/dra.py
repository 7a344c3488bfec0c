"""The lab's DRA side: a ResourceSlice for every simulated node, so kube-scheduler's own DRA
allocator can place claim pods on kwok nodes as it does on real ones (a real node's agent
publishes its own slice, with ``dra: true``). The DeviceClass ``gpu.vslice.io`` is one of the
install objects (``vslice_control.install.dra``), applied with the others at ``up``.

Only on Kubernetes 1.36 or newer: consumable capacity (``allowMultipleAllocations``, request
policies, consumed capacity in the results) is beta and on by default from 1.36. On 1.34 the
API server drops those fields (the gate is off), and a slice without them would let one claim
take a whole GPU while claiming to share it: the lab publishes nothing there.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from vslice_kube.dra import DraApi
from vslice_node.dra.publisher import SlicePublisher

from vslice_lab.inventory import LabNode

MIN_VERSION = (1, 36)


def supported(version: str) -> bool:
    """Whether a Kubernetes version (``v1.36.3``) serves consumable capacity by default."""
    found = re.match(r"^v?(\d+)\.(\d+)", version)
    if found is None:
        return False
    return (int(found.group(1)), int(found.group(2))) >= MIN_VERSION


def publish(api: DraApi, simulated: Sequence[LabNode]) -> int:
    """Publish the slices of the simulated nodes given (16 at a time, written only when they
    differ from what is stored); how many nodes have one.

    ``simulated`` is what kwok runs, whatever the inventory's ``kubelet`` says: a ``kubelet:
    true`` node is simulated too under ``lab up --simulated-only`` (or when this machine
    cannot run a real node), and then its ``dra_gpus`` need this slice as much as any."""
    with_dra = [node for node in simulated if node.dra_inventory.gpus]

    def publish_one(node: LabNode) -> None:
        SlicePublisher(api, node.name).publish(node.dra_inventory)

    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(publish_one, with_dra))
    return len(with_dra)
