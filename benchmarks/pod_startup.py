"""Pod start-up on a real lab node: plain pods beside sliced pods, create to Running.

Starts its own lab (state dir ``.lab-bench-startup`` unless ``--state-dir``) with one real node
(2 fake GPUs x 32 slots on the extender path, so 50 slices fit at once, and a third GPU on the
DRA path with 64 slots) and no simulated node, then runs up to three rounds on that node:

- ``plain``: ``--pods`` pods without a GPU (pinned to the node by a node selector, so they go
  through kube-scheduler as sliced pods do);
- ``sliced``: ``--pods`` pods asking 512 MiB of one GPU and no compute limit (50 fit on two
  GPUs), through the webhook, the extender and the device plugin (Allocate), with the shim
  injected by CDI;
- ``dra``: ``--pods`` pods each with a ResourceClaimTemplate for 256 MiB of a GPU (50 fit on
  the third GPU), allocated by kube-scheduler's DRA allocator and prepared by the node
  agent's DRA driver (NodePrepareResources). Only where the lab's Kubernetes serves
  consumable capacity (1.36 and newer, the default); ``--no-dra`` leaves it out.

Before each round the node settles: the benchmark waits until the kubelet and containerd are
idle (under 5 % of a core for 3 s), so that no round pays for the previous round's teardown
(stopping 50 sandboxes, unmounting, removing containers), which otherwise overlaps the next
round and was most of what once read as containerd's cost of a sliced pod. ``--profile DIR``
writes containerd's CPU profile of each round (its debug socket, ``go tool pprof -top``).

Within a round all pods are created at once from a thread pool; each pod's start-up time is
from just before its create call to the first watch event that shows it Running with its
container started. Every round runs the same image and command (busybox ``sleep`` from the
lab's smoke image), so the ratios show what each vslice path adds.

Needs what a real lab node needs (root, cgroups; see docs/lab.md) and no other lab with a real
node on this machine. Prints one line per round and, last::

    startup pods=50 plain_p99_s=<x> sliced_p99_s=<y> ratio=<y/x> dra_p99_s=<z> dra_ratio=<z/x>

(the ``dra_`` fields only when the DRA round ran). Targets (issue notes,
docs/performance.md): ratio <= 1.2 and sliced p99 <= 5 s, the same for the DRA path.
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s
from kubernetes import watch
from scheduling import CpuMeter, cpu_seconds  # benchmarks/ is on the path as a script
from vslice_build.images import SMOKE_IMAGE
from vslice_core.dra import DEVICE_CLASS
from vslice_kube.client import api_client
from vslice_lab import dra as lab_dra
from vslice_lab import lab as lab_module
from vslice_lab import realnode
from vslice_lab.layout import Layout
from vslice_lab.realnode import node_reader_context

NODE = "bench-real"
GPUS = [f"GPU-be000000-0000-4000-8000-00000000000{i}" for i in range(3)]
DRA_GPU = 2  # the third GPU serves the DRA path; the first two the extender path
TEMPLATE = "bench-slice"
CLAIM = "gpu"
ROUNDS = ("plain", "sliced", "dra")


def inventory(path: Path) -> Path:
    gpus = [
        {
            "uuid": uuid_,
            "model": "NVIDIA-L4",
            "memory_mib": 23034,
            # Each DRA claim consumes one slot: 64 hold the round's 50 claims at once.
            "slots": 64 if index == DRA_GPU else 32,
        }
        for index, uuid_ in enumerate(GPUS)
    ]
    node = {"name": NODE, "kubelet": True, "dra_gpus": [DRA_GPU], "gpus": gpus}
    path.write_text(yaml.safe_dump({"nodes": [node]}))
    return path


def claim_template() -> dict[str, Any]:
    """256 MiB of one GPU of vslice's DRA class, no compute promise (as the sliced round)."""
    exactly = {
        "deviceClassName": DEVICE_CLASS,
        "count": 1,
        "capacity": {"requests": {"memory": "256Mi"}},
    }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": TEMPLATE},
        "spec": {"spec": {"devices": {"requests": [{"name": "main", "exactly": exactly}]}}},
    }


def pod(name: str, kind: str) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "main",
        "image": SMOKE_IMAGE,
        "command": ["sleep", "3600"],
        "imagePullPolicy": "Never",
    }
    metadata: dict[str, Any] = {"name": name}
    spec: dict[str, Any] = {"containers": [container], "terminationGracePeriodSeconds": 0}
    if kind == "sliced":
        container["resources"] = {
            "limits": {
                "nvidia.com/gpu": "1",
                "nvidia.com/gpumem": "512",
            }
        }
    elif kind == "dra":
        # As tests/e2e/test_dra_realnode.py writes a claim pod; only this node publishes DRA
        # devices, so kube-scheduler's allocator places it there without a selector.
        spec["resourceClaims"] = [{"name": CLAIM, "resourceClaimTemplateName": TEMPLATE}]
        container["resources"] = {"claims": [{"name": CLAIM}]}
    else:
        spec["nodeSelector"] = {"kubernetes.io/hostname": NODE}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def _running(item: Any) -> bool:
    status = item.status
    if status is None or status.phase != "Running":
        return False
    return any(c.state and c.state.running for c in status.container_statuses or [])


BOUND: dict[str, dict[str, float]] = {}
"""Per round, when the watch first showed each pod bound (``spec.nodeName`` set): splits the
start-up into scheduling (webhook, scheduler, extender, bind) and the node's part (kubelet
admission with Allocate or the DRA prepare, sandbox, container start)."""


def round_trip(core: k8s.CoreV1Api, namespace: str, count: int, kind: str) -> list[float]:
    """Create ``count`` pods of ``kind`` at once; seconds from each create call to Running."""
    prefix = kind
    started: dict[str, float] = {}
    seen: dict[str, float] = {}
    bound = BOUND.setdefault(kind, {})
    done = threading.Event()
    ready = threading.Event()

    def observe() -> None:
        stream = watch.Watch()
        ready.set()
        for event in stream.stream(core.list_namespaced_pod, namespace, timeout_seconds=300):
            item = event["object"]
            name = item.metadata.name
            if name.startswith(prefix) and name not in bound and item.spec.node_name:
                bound[name] = time.monotonic()
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
        core.create_namespaced_pod(namespace, pod(name, kind), _preload_content=False)

    with ThreadPoolExecutor(max_workers=10) as pool:
        list(pool.map(create, range(count)))
    done.wait(300)
    missing = sorted(set(started) - set(seen))
    if missing:
        stuck = core.read_namespaced_pod(missing[0], namespace).status
        sys.exit(f"{len(missing)} {prefix} pod(s) never ran, e.g. {missing[0]}: {stuck}")
    to_bind = [bound[name] - started[name] for name in started]
    on_node = [seen[name] - bound[name] for name in started]
    print(
        f"  {kind}: create to bound p50 {statistics.median(to_bind):.2f} s, p99 "
        f"{_p(to_bind, 0.99):.2f} s; bound to running p50 {statistics.median(on_node):.2f} s, "
        f"p99 {_p(on_node, 0.99):.2f} s",
        flush=True,
    )
    return [seen[name] - started[name] for name in started]


def node_agent_report(record: Any, layout: Layout) -> str:
    """What the node agent did meanwhile: its Allocate time and how often it had to list."""
    port = record.ports[f"device-plugin-{NODE}"]
    context = node_reader_context(layout)  # the node answers only the lab's client certificates
    url = f"https://127.0.0.1:{port}"
    with urllib.request.urlopen(f"{url}/metrics", timeout=10, context=context) as response:
        text = response.read().decode()
    with urllib.request.urlopen(f"{url}/status", timeout=10, context=context) as response:
        status = json.loads(response.read())
    sums = {}
    for line in text.splitlines():
        for part in ("sum", "count"):
            if line.startswith(f"vslice_deviceplugin_allocate_seconds_{part}"):
                sums[part] = float(line.rsplit(" ", 1)[1])
    mean = 1000 * sums["sum"] / sums["count"] if sums.get("count") else float("nan")
    view, lists = status.get("pod_view"), status.get("pod_lists_on_allocate")
    return (
        f"allocate calls {sums.get('count', 0):.0f}, mean {mean:.1f} ms; "
        f"pod view: {view}; pod lists on allocate: {lists}"
    )


def _delete_all(core: k8s.CoreV1Api, namespace: str) -> None:
    core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
    deadline = time.monotonic() + 120
    while core.list_namespaced_pod(namespace).items and time.monotonic() < deadline:
        time.sleep(0.5)


def settle(processes: dict[str, int], limit_s: float = 90.0) -> float:
    """Wait until the node's own processes (kubelet, containerd) are idle: under 5 % of a core
    for 3 s in a row, so that a round does not pay for the previous round's teardown (container
    removal, unmounts, the kubelet's garbage collection); the seconds waited."""
    node = {name: pid for name, pid in processes.items() if name.endswith(f"-{NODE}")}
    started = time.monotonic()
    quiet = 0
    while quiet < 3 and time.monotonic() - started < limit_s:
        before = sum(cpu_seconds(pid) for pid in node.values())
        time.sleep(1.0)
        quiet = quiet + 1 if sum(cpu_seconds(pid) for pid in node.values()) - before < 0.05 else 0
    return time.monotonic() - started


class _UnixHTTP(http.client.HTTPConnection):
    """HTTP over a unix socket (containerd's debug server listens on one)."""

    def __init__(self, path: Path, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(str(self.path))


def profile_containerd(sock: Path, seconds: int, out: Path) -> threading.Thread:
    """Fetch containerd's CPU profile over ``seconds`` into ``out`` (in a thread started now;
    a round shorter than that only adds idle time, which takes no samples)."""

    def fetch() -> None:
        connection = _UnixHTTP(sock, timeout=seconds + 30)
        try:
            connection.request("GET", f"/debug/pprof/profile?seconds={seconds}")
            out.write_bytes(connection.getresponse().read())
        except OSError as error:
            print(f"  no containerd profile ({sock}): {error}", file=sys.stderr)
        finally:
            connection.close()

    thread = threading.Thread(target=fetch, daemon=True)
    thread.start()
    return thread


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--pods", type=int, default=50)
    parser.add_argument("--state-dir", type=Path, default=Path(".lab-bench-startup"))
    parser.add_argument("--no-dra", action="store_true", help="leave out the DRA round")
    parser.add_argument(
        "--profile",
        type=Path,
        default=None,
        metavar="DIR",
        help="write containerd's CPU profile of each round to DIR/containerd-<round>.pprof "
        "(read with `go tool pprof -top`)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        options = lab_module.LabOptions(
            state_dir=args.state_dir,
            inventory=inventory(Path(tmp) / "inventory.yaml"),
            progress=lambda message: print(f"lab: {message}", file=sys.stderr),
            timeout=180,
            prometheus=False,  # its scrapes would be part of what is measured
        )
        record = lab_module.up(options)
        rounds = [
            r
            for r in ROUNDS
            if r != "dra" or (lab_dra.supported(options.version) and not args.no_dra)
        ]
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
            if "dra" in rounds:
                template: Any = claim_template()  # the client takes dicts as they are
                k8s.ResourceV1Api(api).create_namespaced_resource_claim_template(
                    namespace, template, _preload_content=False
                )
            results = {}
            processes = {p.name: p.pid for p in record.processes}
            for kind in rounds:
                print(f"  {kind}: the node settled in {settle(processes):.0f} s", flush=True)
                meter = CpuMeter(processes)
                profiling = None
                if args.profile is not None:
                    args.profile.mkdir(parents=True, exist_ok=True)
                    sock = realnode.node_layout(Layout.at(args.state_dir), NODE)
                    profiling = profile_containerd(
                        sock.containerd_debug_socket, 40, args.profile / f"containerd-{kind}.pprof"
                    )
                times = round_trip(core, namespace, args.pods, kind)
                if profiling is not None:
                    profiling.join()
                print(f"  {kind}: CPU ms per pod: {meter.per_pod(len(times))}", flush=True)
                results[kind] = times
                print(
                    f"{kind}: pods={len(times)} p50_s={statistics.median(times):.2f} "
                    f"p99_s={_p(times, 0.99):.2f} max_s={max(times):.2f}"
                )
                _delete_all(core, namespace)
            print(f"node agent: {node_agent_report(record, Layout.at(args.state_dir))}", flush=True)
        finally:
            lab_module.down(args.state_dir)
    plain, sliced_p99 = _p(results["plain"], 0.99), _p(results["sliced"], 0.99)
    line = (
        f"startup pods={args.pods} plain_p99_s={plain:.2f} sliced_p99_s={sliced_p99:.2f} "
        f"ratio={sliced_p99 / plain:.2f}"
    )
    if "dra" in results:
        dra_p99 = _p(results["dra"], 0.99)
        line += f" dra_p99_s={dra_p99:.2f} dra_ratio={dra_p99 / plain:.2f}"
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
