"""Pod start-up on a real lab node: plain pods beside sliced pods, create to Running.

Starts its own lab (state dir ``.lab-bench-startup`` unless ``--state-dir``) with one real node
(2 fake GPUs x 32 slots, so 50 slices fit at once) and no simulated node, then runs two rounds
on that node: ``--pods`` plain pods (no GPU; pinned to the node by a node selector, so they go
through kube-scheduler as sliced pods do) and ``--pods`` sliced pods (512 MiB of one GPU and no
compute limit, so 50 fit on two GPUs; through the webhook, the extender and the device plugin,
with the shim injected by CDI). Within a round all pods are created at once from a thread pool; each
pod's start-up time is from just before its create call to the first watch event that shows it
Running with its container started. Both rounds run the same image and command (busybox
``sleep`` from the lab's smoke image), so the ratio shows what vslice adds.

Needs what a real lab node needs (root, cgroups; see docs/lab.md) and no other lab with a real
node on this machine. Prints one line per round and, last::

    startup pods=50 plain_p99_s=<x> sliced_p99_s=<y> ratio=<y/x>

Targets (issue notes, docs/performance.md): ratio <= 1.2 and sliced p99 <= 5 s.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s
from kubernetes import watch
from vslice_build.images import SMOKE_IMAGE
from vslice_kube.client import api_client
from vslice_lab import lab as lab_module
from vslice_lab.layout import Layout

NODE = "bench-real"
GPUS = [f"GPU-be000000-0000-4000-8000-00000000000{i}" for i in range(2)]


def inventory(path: Path) -> Path:
    gpus = [
        {"uuid": uuid_, "model": "NVIDIA-L4", "memory_mib": 23034, "slots": 32} for uuid_ in GPUS
    ]
    path.write_text(yaml.safe_dump({"nodes": [{"name": NODE, "kubelet": True, "gpus": gpus}]}))
    return path


def pod(name: str, sliced: bool) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "main",
        "image": SMOKE_IMAGE,
        "command": ["sleep", "3600"],
        "imagePullPolicy": "Never",
    }
    metadata: dict[str, Any] = {"name": name}
    spec: dict[str, Any] = {"containers": [container], "terminationGracePeriodSeconds": 0}
    if sliced:
        container["resources"] = {
            "limits": {
                "nvidia.com/gpu": "1",
                "nvidia.com/gpumem": "512",
            }
        }
    else:
        spec["nodeSelector"] = {"kubernetes.io/hostname": NODE}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def _running(item: Any) -> bool:
    status = item.status
    if status is None or status.phase != "Running":
        return False
    return any(c.state and c.state.running for c in status.container_statuses or [])


def round_trip(core: k8s.CoreV1Api, namespace: str, count: int, sliced: bool) -> list[float]:
    """Create ``count`` pods at once; seconds from each create call to Running."""
    prefix = "sliced" if sliced else "plain"
    started: dict[str, float] = {}
    seen: dict[str, float] = {}
    done = threading.Event()
    ready = threading.Event()

    def observe() -> None:
        stream = watch.Watch()
        ready.set()
        for event in stream.stream(core.list_namespaced_pod, namespace, timeout_seconds=300):
            item = event["object"]
            name = item.metadata.name
            if name.startswith(prefix) and name not in seen and _running(item):
                seen[name] = time.monotonic()
                if len(seen) == count:
                    stream.stop()
        done.set()

    watcher = threading.Thread(target=observe, daemon=True)
    watcher.start()
    ready.wait(10)
    time.sleep(0.5)  # the watch is open before the first create

    def create(index: int) -> None:
        name = f"{prefix}-{index}"
        started[name] = time.monotonic()
        core.create_namespaced_pod(namespace, pod(name, sliced), _preload_content=False)

    with ThreadPoolExecutor(max_workers=10) as pool:
        list(pool.map(create, range(count)))
    done.wait(300)
    missing = sorted(set(started) - set(seen))
    if missing:
        stuck = core.read_namespaced_pod(missing[0], namespace).status
        sys.exit(f"{len(missing)} {prefix} pod(s) never ran, e.g. {missing[0]}: {stuck}")
    return [seen[name] - started[name] for name in started]


def _delete_all(core: k8s.CoreV1Api, namespace: str) -> None:
    core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
    deadline = time.monotonic() + 120
    while core.list_namespaced_pod(namespace).items and time.monotonic() < deadline:
        time.sleep(0.5)


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--pods", type=int, default=50)
    parser.add_argument("--state-dir", type=Path, default=Path(".lab-bench-startup"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        options = lab_module.LabOptions(
            state_dir=args.state_dir,
            inventory=inventory(Path(tmp) / "inventory.yaml"),
            progress=lambda message: print(f"lab: {message}", file=sys.stderr),
            timeout=180,
        )
        record = lab_module.up(options)
        try:
            if NODE not in record.real_nodes:
                sys.exit(f"no real node: {record.real_node_note}")
            api = api_client(Layout.at(args.state_dir).kubeconfig, pool_size=16)
            core = k8s.CoreV1Api(api)
            namespace = f"bench-{uuid.uuid4().hex[:6]}"
            core.create_namespace({"metadata": {"name": namespace}})
            while True:
                try:
                    core.read_namespaced_service_account("default", namespace)
                    break
                except k8s.exceptions.ApiException:
                    time.sleep(0.2)
            results = {}
            for sliced in (False, True):
                times = round_trip(core, namespace, args.pods, sliced)
                label = "sliced" if sliced else "plain"
                results[label] = times
                print(
                    f"{label}: pods={len(times)} p50_s={statistics.median(times):.2f} "
                    f"p99_s={_p(times, 0.99):.2f} max_s={max(times):.2f}"
                )
                _delete_all(core, namespace)
        finally:
            lab_module.down(args.state_dir)
    plain, sliced_p99 = _p(results["plain"], 0.99), _p(results["sliced"], 0.99)
    print(
        f"startup pods={args.pods} plain_p99_s={plain:.2f} sliced_p99_s={sliced_p99:.2f} "
        f"ratio={sliced_p99 / plain:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
