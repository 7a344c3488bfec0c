"""The extender's memory and start-up from annotations at scale (no cluster needed).

Builds what the API server would list for a big cluster: N nodes (8 x A100-80GB, 10 slots,
with their ``vslice.io/node-gpus`` annotation) and P bound pods with signed
``vslice.io/allocation`` annotations (a 1-GPU slice each, spread over the nodes), as the JSON
text of a list. Then does exactly what a starting extender does with it: decode the JSON
(as :class:`vslice_kube.watch.ListWatch` does) and hand the items to the same node and pod
handlers the watches feed (``NodeFeed.replace``, ``PodFeed.replace``: inventories decoded,
proofs checked, allocations recorded in the ledger). It then makes one filter decision, to
show the ledger answers.

Measured: start-up time (decode + feed), the resident memory the process holds afterwards
(``VmRSS``; the JSON text is dropped first, as after a real list), and the ledger's size.
What is not in here: the API server's own time to answer the list (the lab measures whole
start-ups; the list of 20,000 pods is one request).

Run: ``.venv/bin/python benchmarks/extender_state.py [--nodes 5000] [--pods 20000]``.
The last line is ``extender_state nodes=<n> pods=<p> startup_s=<x> rss_mb=<y>``.
Targets (the scaling issue): start-up <= 10 s and RSS <= 300 MB at 5,000 nodes / 20,000 pods.
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from vslice_control.extender.feed import NodeFeed, PodFeed
from vslice_control.extender.holds import Holds
from vslice_control.extender.trust import Proofs
from vslice_core.annotations import ALLOCATION, NODE_GPUS, encode_allocation, encode_node_gpus
from vslice_core.ledger import Ledger
from vslice_core.model import (
    Allocation,
    ContainerAllocation,
    ContainerRequest,
    Gpu,
    GpuGrant,
    NodeInventory,
    PodRequest,
)
from vslice_core.proof import PROOF, Key, sign

GPUS = 8
KEY = Key("bench", bytes(range(32)))


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def node_item(index: int) -> dict[str, Any]:
    name = f"node-{index:05d}"
    inventory = NodeInventory(
        name=name,
        gpus=[
            Gpu(
                uuid=f"GPU-{index:05d}-{g}",
                model="NVIDIA-A100-SXM4-80GB",
                memory_mib=81920,
                slots=10,
                index=g,
                numa=g // 4,
            )
            for g in range(GPUS)
        ],
    )
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": str(uuid.uuid4()),
            "resourceVersion": str(index + 1),
            "labels": {"kubernetes.io/hostname": name, "type": "kwok"},
            "annotations": {NODE_GPUS: encode_node_gpus(inventory)},
        },
        "status": {"capacity": {"nvidia.com/gpu": str(GPUS * 10)}},
    }


def pod_item(index: int, nodes: int) -> dict[str, Any]:
    node = index % nodes
    name = f"node-{node:05d}"
    uid = str(uuid.uuid4())
    gpu = (index // nodes) % GPUS
    allocation = Allocation(
        node=name,
        containers=[
            ContainerAllocation(
                name="main",
                gpus=[GpuGrant(uuid=f"GPU-{node:05d}-{gpu}", index=gpu, memory_mib=4096, cores=10)],
            )
        ],
    )
    text = encode_allocation(allocation)
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4096", "nvidia.com/gpucores": "10"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"job-{index:06d}",
            "namespace": f"team-{index % 20}",
            "uid": uid,
            "resourceVersion": str(100000 + index),
            "annotations": {ALLOCATION: text, PROOF: sign(KEY, uid, name, text)},
        },
        "spec": {
            "nodeName": name,
            "schedulerName": "vslice-scheduler",
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example/train:1",
                    "resources": {"limits": limits, "requests": limits},
                }
            ],
        },
        "status": {"phase": "Running"},
    }


def listed(items: list[dict[str, Any]]) -> bytes:
    return json.dumps({"kind": "List", "items": items}).encode()


def start_up(directory: Path) -> int:
    """The measured part, in a fresh process: what a starting extender does with the lists."""
    baseline = rss_mb()
    node_text = (directory / "nodes.json").read_bytes()
    pod_text = (directory / "pods.json").read_bytes()
    started = time.perf_counter()
    ledger = Ledger()
    node_feed = NodeFeed(ledger)
    pod_feed = PodFeed(ledger, Holds(), Proofs({KEY.id: KEY}))
    node_feed.replace(json.loads(node_text)["items"])
    pod_feed.replace(json.loads(pod_text)["items"])
    startup = time.perf_counter() - started
    del node_text, pod_text
    gc.collect()
    after = rss_mb()
    unproven = sum(1 for uid in ledger.pod_uids() if ledger.unproven(uid) is not None)
    request = PodRequest(
        name="probe",
        namespace="team-0",
        uid="probe",
        containers=[ContainerRequest(name="main", gpus=1, memory_mib=8192, cores=20)],
    )
    decided = time.perf_counter()
    decision = ledger.decide(request)
    decide_ms = (time.perf_counter() - decided) * 1000
    print(
        f"start-up {startup:.2f} s; ledger: {len(ledger.node_names())} nodes, "
        f"{len(ledger.pod_uids())} pods ({unproven} unproven); RSS {after:.0f} MB "
        f"({baseline:.0f} MB before the lists were read); one decision {decide_ms:.2f} ms "
        f"-> {decision.node}",
        flush=True,
    )
    print(f"STARTUP {startup:.3f} {after:.1f}")
    return 0 if decision.fits and not unproven else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=20000)
    parser.add_argument("--from-dir", type=Path, help=argparse.SUPPRESS)  # the child's half
    args = parser.parse_args()
    if args.from_dir is not None:
        return start_up(args.from_dir)
    with tempfile.TemporaryDirectory(prefix="vslice-state-") as tmp:
        directory = Path(tmp)
        (directory / "nodes.json").write_bytes(listed([node_item(i) for i in range(args.nodes)]))
        pods = listed([pod_item(i, args.nodes) for i in range(args.pods)])
        (directory / "pods.json").write_bytes(pods)
        print(f"pod list: {len(pods) / 1e6:.1f} MB of JSON", flush=True)
        child = subprocess.run(
            [sys.executable, __file__, "--from-dir", str(directory)],
            capture_output=True,
            text=True,
            check=False,
        )
    print(child.stdout.rsplit("STARTUP", 1)[0].rstrip(), child.stderr[-2000:], flush=True)
    if child.returncode != 0 or "STARTUP" not in child.stdout:
        raise SystemExit(f"start-up failed (exit {child.returncode})")
    startup, rss = (float(x) for x in child.stdout.rsplit("STARTUP", 1)[1].split())
    print(
        f"extender_state nodes={args.nodes} pods={args.pods} startup_s={startup:.2f} "
        f"rss_mb={rss:.0f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
