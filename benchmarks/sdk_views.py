"""SDK views at scale: how long a notebook waits for ``client.gpus()`` and ``client.plan()``.

Builds the objects a cluster of N nodes x 8 GPUs returns (Node objects with
``vslice.io/node-gpus``, one running Pod per two GPUs with ``vslice.io/allocation``, written by
the core's encoders), then times, per repetition: reading them into a ClusterSnapshot, the GPU
table, a plan with every node's verdict, and the HTML and text renderings of both. The API
calls themselves are not included (they depend on the cluster, not on vslice).

Run: ``.venv/bin/python benchmarks/sdk_views.py`` (options: --nodes, --repeat).
The last line is ``sdk_views nodes=<n> read_ms=.. gpus_ms=.. plan_cold_ms=.. plan_warm_ms=..
html_ms=.. text_ms=.. html_kb=..`` (medians; a cold plan builds the snapshot's ledger, later
plans on the same snapshot, as the slice picker makes them, reuse it).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any, TypeVar

from vslice.plans import Plan, plan_manifest, slice_manifest
from vslice.slices import Slice
from vslice.snapshot import ClusterSnapshot
from vslice_core.annotations import ALLOCATION, NODE_GPUS, encode_allocation, encode_node_gpus
from vslice_core.model import Allocation, ContainerAllocation, GpuGrant, NodeInventory

GPUS_PER_NODE = 8


def objects(nodes: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    node_objects, pod_objects = [], []
    for n in range(nodes):
        name = f"node-{n:05d}"
        gpus = [
            {
                "uuid": f"GPU-{n}-{i}",
                "model": "NVIDIA-A100-SXM4-80GB",
                "memory_mib": 81920,
                "slots": 10,
                "index": i,
            }
            for i in range(GPUS_PER_NODE)
        ]
        inventory = NodeInventory.model_validate({"name": name, "gpus": gpus})
        annotations = {NODE_GPUS: encode_node_gpus(inventory)}
        node_objects.append({"metadata": {"name": name, "annotations": annotations}})
        for i in range(0, GPUS_PER_NODE, 2):
            grant = GpuGrant(uuid=f"GPU-{n}-{i}", index=i, memory_mib=40960, cores=50)
            allocation = Allocation(
                node=name, containers=[ContainerAllocation(name="main", gpus=[grant])]
            )
            pod_objects.append(
                {
                    "metadata": {
                        "namespace": "bench",
                        "name": f"p-{n}-{i}",
                        "uid": f"u-{n}-{i}",
                        "annotations": {ALLOCATION: encode_allocation(allocation)},
                    },
                    "status": {"phase": "Running"},
                }
            )
    return node_objects, pod_objects


T = TypeVar("T")


def median_ms(action: Callable[[], T], repeat: int) -> tuple[float, T]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        result = action()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    nodes, pods = objects(args.nodes)
    read_ms, snapshot = median_ms(lambda: ClusterSnapshot.read(nodes, pods), args.repeat)
    gpus_ms, gpus = median_ms(snapshot.gpus, args.repeat)
    wanted = Slice("60Gi", cores=60)

    def plan_cold() -> Plan:  # a fresh reading: the ledger is built, then the engine runs
        fresh = ClusterSnapshot(snapshot.inventories, snapshot.pods)
        return plan_manifest(fresh, slice_manifest(wanted), slice=wanted)

    cold_ms, _ = median_ms(plan_cold, args.repeat)
    plan_ms, plan = median_ms(
        lambda: plan_manifest(snapshot, slice_manifest(wanted), slice=wanted), args.repeat
    )
    html_ms, html = median_ms(lambda: gpus._repr_html_() + plan._repr_html_(), args.repeat)
    text_ms, _ = median_ms(lambda: str(gpus) + str(plan), args.repeat)
    print(f"{args.nodes} nodes x {GPUS_PER_NODE} GPUs, {len(pods)} pods holding slices")
    print(
        f"sdk_views nodes={args.nodes} read_ms={read_ms:.0f} gpus_ms={gpus_ms:.0f} "
        f"plan_cold_ms={cold_ms:.0f} plan_warm_ms={plan_ms:.0f} html_ms={html_ms:.0f} "
        f"text_ms={text_ms:.0f} "
        f"html_kb={len(str(html)) // 1024}"
    )


if __name__ == "__main__":
    main()
