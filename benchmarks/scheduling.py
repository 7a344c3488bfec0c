"""Pods per second through the real kube-scheduler, without and with the vslice extender.

For each cluster size a fresh lab is started (``vslice_lab``, the code of ``vslice lab up``)
with N simulated nodes of 8 GPUs x 10 slots each. Every node also advertises a plain extended
resource, ``example.com/plain-gpu: 80``, which the extender does not manage.

Each measurement: kube-scheduler is paused (SIGSTOP), P pods are created (through the webhook
when it runs), the scheduler is resumed (SIGCONT) and the clock runs until the last pod is
bound, as seen on a watch. So creation speed of this script does not count, only scheduling:

- plain:    pods asking ``example.com/plain-gpu: 1``, scheduled by kube-scheduler alone;
- extender: pods asking ``nvidia.com/gpu: 1, nvidia.com/gpumem: 1024, nvidia.com/gpucores: 5``,
            sent to the vslice extender (filter, then bind with the allocation annotation).

Run: ``.venv/bin/python benchmarks/scheduling.py [--sizes 100 1000] [--pods 500]``.
The last lines read
``scheduling nodes=<n> plain_pods_per_s=<x> extender_pods_per_s=<y> ratio=<y/x>``.
"""

from __future__ import annotations

import argparse
import os
import signal
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s
from kubernetes import watch
from vslice_kube.client import api_client
from vslice_lab import lab as lab_module
from vslice_lab.layout import Layout

PLAIN = "example.com/plain-gpu"
GPUS_PER_NODE = 8
SLOTS_PER_GPU = 10


def inventory(nodes: int) -> dict[str, Any]:
    return {
        "nodes": [
            {
                "name": f"bench-{n:04d}",
                "gpus": [
                    {
                        "uuid": f"GPU-bench-{n:04d}-{g}",
                        "model": "NVIDIA-A100-SXM4-80GB",
                        "memory_mib": 81920,
                        "slots": SLOTS_PER_GPU,
                        "numa": g // 4,
                    }
                    for g in range(GPUS_PER_NODE)
                ],
            }
            for n in range(nodes)
        ]
    }


def pod(name: str, limits: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/sleep:1",
                    "resources": {"limits": limits},
                }
            ],
            "terminationGracePeriodSeconds": 0,
        },
    }


class BindWatch:
    """Counts pods of a namespace that got a node, from a watch started before the pods exist."""

    def __init__(self, core: k8s.CoreV1Api, namespace: str, expected: int) -> None:
        self.expected = expected
        self.bound: set[str] = set()
        self.done = threading.Event()
        self.last_bind = 0.0
        self._core = core
        self._namespace = namespace
        self._watch = watch.Watch()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        resource_version = ""
        while not self.done.is_set():
            try:
                resource_version = self._stream(resource_version)
            except Exception as error:  # a dropped watch: start again from a fresh list
                print(f"  (watch restarted: {error})", flush=True)
                resource_version = ""

    def _stream(self, resource_version: str) -> str:
        if not resource_version:
            listed = self._core.list_namespaced_pod(self._namespace)
            for item in listed.items:
                self._saw(item.metadata.name, item.spec.node_name)
            resource_version = listed.metadata.resource_version
        stream = self._watch.stream(
            self._core.list_namespaced_pod,
            self._namespace,
            resource_version=resource_version,
            timeout_seconds=60,
        )
        for event in stream:
            obj = event["object"]
            if event["type"] == "ERROR" or isinstance(obj, dict):
                return ""
            resource_version = obj.metadata.resource_version
            self._saw(obj.metadata.name, obj.spec.node_name)
            if self.done.is_set():
                self._watch.stop()
        return resource_version

    def _saw(self, name: str, node: str | None) -> None:
        if node and name not in self.bound:
            self.bound.add(name)
            self.last_bind = time.monotonic()
            if len(self.bound) >= self.expected:
                self.done.set()


def measure(
    core: k8s.CoreV1Api, scheduler_pid: int, namespace: str, limits: dict[str, str], count: int
) -> float:
    """Pods/s from resuming the paused scheduler to the last bind."""
    core.create_namespace({"metadata": {"name": namespace}})
    while True:
        try:
            core.read_namespaced_service_account("default", namespace)
            break
        except k8s.ApiException:
            time.sleep(0.1)
    binds = BindWatch(core, namespace, count)
    time.sleep(0.5)  # let the watch start
    os.kill(scheduler_pid, signal.SIGSTOP)
    try:
        with ThreadPoolExecutor(max_workers=16) as pool:
            list(
                pool.map(
                    lambda i: core.create_namespaced_pod(
                        namespace, pod(f"p{i:05d}", limits), _preload_content=False
                    ),
                    range(count),
                )
            )
    finally:
        started = time.monotonic()
        os.kill(scheduler_pid, signal.SIGCONT)
    if not binds.done.wait(timeout=600):
        raise SystemExit(f"only {len(binds.bound)} of {count} pods were bound within 600 s")
    return count / (binds.last_bind - started)


def run_size(nodes: int, pods: int) -> tuple[float, float | None]:
    with tempfile.TemporaryDirectory(prefix="vslice-bench-") as tmp:
        inv = Path(tmp) / "inventory.yaml"
        inv.write_text(yaml.safe_dump(inventory(nodes)))
        services = all(lab_module.services_installed().values())
        options = lab_module.LabOptions(
            state_dir=Path(tmp) / "lab",
            inventory=inv,
            services=services,
            extra_node_resources={PLAIN: str(GPUS_PER_NODE * SLOTS_PER_GPU)},
            timeout=300,
        )
        began = time.monotonic()
        record = lab_module.up(options)
        print(f"  lab with {nodes} nodes up in {time.monotonic() - began:.1f} s", flush=True)
        try:
            core = k8s.CoreV1Api(api_client(Layout.at(options.state_dir).kubeconfig, pool_size=32))
            scheduler = next(p.pid for p in record.processes if p.name == "kube-scheduler")
            plain = measure(core, scheduler, "bench-plain", {PLAIN: "1"}, pods)
            print(f"  plain:    {plain:8.1f} pods/s", flush=True)
            if not services:
                return plain, None
            gpu = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1024", "nvidia.com/gpucores": "5"}
            extender = measure(core, scheduler, "bench-extender", gpu, pods)
            print(f"  extender: {extender:8.1f} pods/s", flush=True)
            return plain, extender
        finally:
            lab_module.down(options.state_dir)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--pods", type=int, default=500, help="pods per measurement")
    args = parser.parse_args()
    results = {}
    for size in args.sizes:
        print(f"nodes={size}, {args.pods} pods per measurement", flush=True)
        results[size] = run_size(size, args.pods)
    print(f"\n{'nodes':>6} {'plain pods/s':>13} {'extender pods/s':>16} {'ratio':>6}")
    for size, (plain, extender) in results.items():
        ext = f"{extender:16.1f}" if extender is not None else f"{'n/a':>16}"
        ratio = f"{extender / plain:6.2f}" if extender is not None else f"{'n/a':>6}"
        print(f"{size:>6} {plain:13.1f} {ext} {ratio}")
    for size, (plain, extender) in results.items():
        ext = f"{extender:.1f}" if extender is not None else "nan"
        ratio = f"{extender / plain:.3f}" if extender is not None else "nan"
        print(
            f"scheduling nodes={size} plain_pods_per_s={plain:.1f} "
            f"extender_pods_per_s={ext} ratio={ratio}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
