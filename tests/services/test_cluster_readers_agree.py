"""The extender, the SDK's snapshot and ``vslice plan --from-dump`` read one set of cluster
objects the same way (one reader, ``vslice_core.clusterobjects``): the same nodes, HAMi's
register annotation included, and the same pods counted as holding GPU room."""

from __future__ import annotations

import json
from typing import Any

import pytest
from vslice.snapshot import ClusterSnapshot
from vslice_control.extender.feed import NodeFeed, PodFeed
from vslice_control.extender.holds import Holds
from vslice_core.annotations import (
    ALLOCATION,
    HAMI_NODE_REGISTER,
    NODE_GPUS,
    encode_allocation,
    encode_node_gpus,
)
from vslice_core.cluster import build_ledger, cluster_from_dump
from vslice_core.clusterobjects import pod_deleting, pod_finished
from vslice_core.errors import InvalidRequest
from vslice_core.ledger import Ledger
from vslice_core.model import (
    Allocation,
    ContainerAllocation,
    Gpu,
    GpuGrant,
    GpuUsage,
    NodeInventory,
)

GIB = 1024


def vslice_node(name: str, uuid: str) -> dict[str, Any]:
    inventory = NodeInventory(
        name=name, gpus=[Gpu(uuid=uuid, index=0, model="NVIDIA-L4", memory_mib=24 * GIB, slots=4)]
    )
    return {
        "kind": "Node",
        "metadata": {"name": name, "annotations": {NODE_GPUS: encode_node_gpus(inventory)}},
    }


def hami_node(name: str, uuid: str) -> dict[str, Any]:
    register = [
        {"id": uuid, "index": 0, "count": 10, "devmem": 40 * GIB, "devcore": 100,
         "type": "NVIDIA-A100-SXM4-40GB", "numa": 0, "mode": "hami-core", "health": True}
    ]  # fmt: skip
    return {
        "kind": "Node",
        "metadata": {"name": name, "annotations": {HAMI_NODE_REGISTER: json.dumps(register)}},
    }


def pod(name: str, node: str, uuid: str, mib: int, phase: str = "Running", **meta: Any) -> Any:
    grant = GpuGrant(uuid=uuid, index=0, memory_mib=mib, cores=10)
    allocation = Allocation(node=node, containers=[ContainerAllocation(name="main", gpus=[grant])])
    return {
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "team",
            "uid": f"uid-{name}",
            "annotations": {ALLOCATION: encode_allocation(allocation)},
            **meta,
        },
        "spec": {"nodeName": node, "containers": [{"name": "main"}]},
        "status": {"phase": phase},
    }


NODES = [vslice_node("node-v", "GPU-V"), hami_node("node-h", "GPU-H")]
PODS = [
    pod("running", "node-v", "GPU-V", 4 * GIB),
    pod("on-hami", "node-h", "GPU-H", 8 * GIB),
    pod("going", "node-h", "GPU-H", 2 * GIB, deletionTimestamp="2026-12-01T00:00:00Z"),
    pod("done", "node-v", "GPU-V", 16 * GIB, phase="Succeeded"),
    pod("failed", "node-h", "GPU-H", 16 * GIB, phase="Failed"),
]
EXPECTED = {
    "node-v": {"GPU-V": GpuUsage(slots=1, memory_mib=4 * GIB, cores=10)},
    "node-h": {"GPU-H": GpuUsage(slots=2, memory_mib=10 * GIB, cores=20)},
}


def usage(ledger: Ledger) -> dict[str, dict[str, GpuUsage]]:
    return {
        name: {uuid: used for uuid, used in ledger.gpu_usage(name).items() if used != GpuUsage()}
        for name in ledger.node_names()
    }


def test_the_extender_reads_the_nodes_and_pods_as_expected() -> None:
    ledger = Ledger()
    NodeFeed(ledger).replace(NODES)
    PodFeed(ledger, Holds()).replace(PODS)
    assert usage(ledger) == EXPECTED


def test_plan_from_a_dump_reads_them_as_the_extender_does() -> None:
    cluster = cluster_from_dump({"kind": "List", "items": [*NODES, *PODS]})
    assert usage(build_ledger(cluster)) == EXPECTED


def test_the_sdk_snapshot_reads_them_as_the_extender_does() -> None:
    snapshot = ClusterSnapshot.read(NODES, PODS)
    assert snapshot.problems == []
    assert usage(snapshot.ledger()) == EXPECTED


@pytest.mark.parametrize(
    ("phase", "deleting", "finished"),
    [("Running", False, False), ("Pending", True, False), ("Succeeded", False, True),
     ("Failed", True, True), ("", False, False)],
)  # fmt: skip
def test_finished_means_the_pod_ended_and_deletion_is_apart(
    phase: str, deleting: bool, finished: bool
) -> None:
    meta = {"deletionTimestamp": "2026-12-01T00:00:00Z"} if deleting else {}
    item = pod("p", "node-v", "GPU-V", 1, phase=phase, **meta)
    assert (pod_finished(item), pod_deleting(item)) == (finished, deleting)


def test_an_unreadable_hami_register_is_named_in_every_reader() -> None:
    broken = {
        "kind": "Node",
        "metadata": {"name": "node-x", "annotations": {HAMI_NODE_REGISTER: "[{"}},
    }
    with pytest.raises(InvalidRequest, match=r"^node node-x: hami.io/node-nvidia-register must"):
        cluster_from_dump({"kind": "List", "items": [broken]})
    snapshot = ClusterSnapshot.read([broken], [])
    assert [p for p in snapshot.problems if "hami.io/node-nvidia-register" in p] != []
    ledger = Ledger()
    NodeFeed(ledger).replace([broken])
    assert ledger.node_names() == []
