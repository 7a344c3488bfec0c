"""A small cluster as the API would send it: Node and Pod objects carrying real annotations.

The annotations are written with the core's own encoders, so the SDK reads exactly what the
device plugin and the extender write.
"""

from __future__ import annotations

from typing import Any

from vslice_core.annotations import ALLOCATION, NODE_GPUS, encode_allocation, encode_node_gpus
from vslice_core.model import Allocation, ContainerAllocation, GpuGrant, NodeInventory

A100 = "NVIDIA-A100-SXM4-80GB"
T4 = "Tesla-T4"


def node(name: str, model: str, memory_mib: int, count: int, *, slots: int = 4) -> dict[str, Any]:
    gpus = [
        {"uuid": f"GPU-{name}-{i}", "model": model, "memory_mib": memory_mib, "slots": slots}
        for i in range(count)
    ]
    inventory = NodeInventory.model_validate({"name": name, "gpus": gpus})
    return {"metadata": {"name": name, "annotations": {NODE_GPUS: encode_node_gpus(inventory)}}}


def pod(
    namespace: str,
    name: str,
    node_name: str,
    grants: list[tuple[str, int, int, int]],
    *,
    phase: str = "Running",
) -> dict[str, Any]:
    """A bound pod whose one container holds ``(uuid, index, memory_mib, cores)`` grants."""
    allocation = Allocation(
        node=node_name,
        containers=[
            ContainerAllocation(
                name="main",
                gpus=[GpuGrant(uuid=u, index=i, memory_mib=m, cores=c) for u, i, m, c in grants],
            )
        ],
    )
    return {
        "metadata": {
            "namespace": namespace,
            "name": name,
            "uid": f"uid-{namespace}-{name}",
            "annotations": {ALLOCATION: encode_allocation(allocation)},
        },
        "spec": {"nodeName": node_name},
        "status": {"phase": phase},
    }


def cluster_objects() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    nodes = [node("node-a", A100, 81920, 2), node("node-b", T4, 15360, 1, slots=2)]
    pods = [
        pod("team-a", "train", "node-a", [("GPU-node-a-0", 0, 40960, 50)]),
        pod("team-b", "infer", "node-a", [("GPU-node-a-0", 0, 20480, 30)]),
        pod("team-b", "small", "node-b", [("GPU-node-b-0", 0, 10240, 20)]),
        pod("team-b", "done", "node-b", [("GPU-node-b-0", 0, 5120, 80)], phase="Succeeded"),
    ]
    return nodes, pods


class NoKueue:
    """Kueue's reads (``Workloads.kueue``) on a cluster without Kueue: no queues, no
    workloads, and the reason the real calls give."""

    unavailable = "Kueue is not installed in this cluster (kueue.x-k8s.io/v1beta2 is not served)"
    forbidden = False

    def local_queues(self, namespace: str | None = None) -> list[dict[str, Any]]:
        return []

    def workloads(self, namespace: str | None = None) -> list[dict[str, Any]]:
        return []


class NoDraObjects:
    """The DRA reads of a fake SDK API for a cluster without DRA (no slices, claims or
    templates) and without Kueue (mixed into the tests' fakes)."""

    kueue = NoKueue()

    def list_resource_slices(self, driver: str) -> list[dict[str, Any]]:
        return []

    def list_resource_claims(self, namespace: str | None = None) -> list[dict[str, Any]]:
        return []

    def get_resource_claim_template(self, namespace: str, name: str) -> None:
        return None


class ClusterCalls(NoDraObjects):
    """The reads ``Client`` makes of the small cluster above, in memory; tests add the calls
    their workloads need."""

    def __init__(self, pods: list[dict[str, Any]] | None = None) -> None:
        self.nodes, base = cluster_objects()
        self.pods = base if pods is None else pods
        self.created: list[dict[str, Any]] = []
        self.dra_unavailable: str | None = None

    def close(self) -> None:
        pass

    def list_nodes(self) -> list[dict[str, Any]]:
        return self.nodes

    def list_pods(self, namespace: str | None = None, **_: Any) -> list[dict[str, Any]]:
        return self.pods
