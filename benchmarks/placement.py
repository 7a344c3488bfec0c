"""Placement benchmark: N nodes x 8 GPUs of mixed models, half full, 10,000 decisions per size.

A decision is what the extender does per pod: filter + score + pick over the candidate nodes
the scheduler sends (all N names, ``Ledger.decide``) and record the result
(``Ledger.try_commit``). Half of the decisions are followed by the release of an earlier pod,
so the cluster stays about half full. The candidate names are passed as the extender has them:
a list of strings decoded from the scheduler's JSON (``json.loads``), laid out together in
memory, not the ledger's own key objects scattered over its heap (which makes the one pass over
the names several times slower and would measure the benchmark, not the extender).

Run: ``.venv/bin/python benchmarks/placement.py`` (options: ``--nodes 5000 20000`` one or more
cluster sizes, each built and measured in turn; --decisions, --seed, --all-nodes).
Per size it prints a few detail lines (``cpu p50_ms= p99_ms=``: the thread's CPU time per
decision, which other processes' load inflates much less than the wall time) and then
``placement nodes=<n> p50_ms=<x> p99_ms=<y> rss_mb=<z>`` (rss_mb: the process's peak so far,
so it grows with each size). The last line is ``placement p50_ms=<x> p99_ms=<y> rss_mb=<z>``
for the first size given (5,000 nodes by default), the figure the targets name.
Targets: p99 <= 1 ms at 5,000 nodes and p99 <= 5 ms at 20,000 on a quiet machine; RSS <= 300 MB
at 5,000 nodes (DESIGN.md). docs/performance.md has the figures and what limits them.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import resource
import statistics
import time

from vslice_core.errors import NoFit
from vslice_core.ledger import Ledger
from vslice_core.model import ContainerRequest, Gpu, GpuUsage, NodeInventory, PodRequest

MODELS = (  # (model, MiB, slots)
    ("NVIDIA-A100-SXM4-80GB", 81920, 10),
    ("NVIDIA-A100-PCIE-40GB", 40960, 8),
    ("NVIDIA-H100-80GB-HBM3", 81920, 10),
    ("NVIDIA-L40S", 46068, 8),
    ("Tesla-T4", 15360, 4),
)


def _inventory(index: int, rng: random.Random) -> NodeInventory:
    model, memory, slots = MODELS[index % len(MODELS)]
    gpus = [
        Gpu(
            uuid=f"GPU-{index}-{i}",
            model=model,
            memory_mib=memory,
            slots=slots,
            index=i,
            numa=i // 4,
        )
        for i in range(8)
    ]
    topology = {
        f"GPU-{index}-{a},GPU-{index}-{b}": 100 if a // 4 == b // 4 else 20
        for a in range(8)
        for b in range(a + 1, 8)
        if rng.random() < 0.5
    }
    return NodeInventory(name=f"node-{index:05d}", gpus=gpus, topology=topology)


def _usage(gpu: Gpu, rng: random.Random) -> GpuUsage | None:
    """About half of all capacity in use: a quarter idle, a quarter full, half partly used."""
    roll = rng.random()
    if roll < 0.25:
        return None
    if roll < 0.5:
        return GpuUsage(slots=1, memory_mib=gpu.memory_mib, cores=100)
    share = rng.uniform(0.2, 0.8)
    return GpuUsage(
        slots=rng.randint(1, gpu.slots // 2),
        memory_mib=int(gpu.memory_mib * share),
        cores=rng.choice((0, 20, 30, 50)),
    )


def build(nodes: int, seed: int) -> Ledger:
    rng = random.Random(seed)
    ledger = Ledger()
    for index in range(nodes):
        inventory = _inventory(index, rng)
        used = {gpu.uuid: u for gpu in inventory.gpus if (u := _usage(gpu, rng)) is not None}
        ledger.set_node(inventory, used)
    return ledger


def _container(gpus: int, **share: int) -> ContainerRequest:
    return ContainerRequest(name="main", gpus=gpus, **share)


SHAPES: tuple[tuple[float, PodRequest], ...] = (
    (0.35, PodRequest(containers=[_container(1, memory_mib=10240, cores=20)])),
    (0.15, PodRequest(containers=[_container(1, memory_percent=50, cores=30)])),
    (0.10, PodRequest(containers=[_container(2, memory_mib=20480, cores=30)])),
    (0.10, PodRequest(containers=[_container(1, memory_percent=100, cores=100)])),
    (
        0.05,
        PodRequest(
            containers=[_container(4, memory_percent=100, cores=100)], gpu_policy="topology"
        ),
    ),
    (0.10, PodRequest(containers=[_container(1, memory_mib=8192, cores=10)], gpu_types=["a100"])),
    (0.05, PodRequest(containers=[_container(1, memory_mib=4096, cores=0)], node_policy="spread")),
    (
        0.10,
        PodRequest(
            containers=[
                ContainerRequest(name="init", init=True, gpus=1, memory_mib=2048, cores=0),
                _container(1, memory_mib=6144, cores=10),
            ],
            numa_bind=True,
        ),
    ),
)


def run(
    ledger: Ledger,
    decisions: int,
    seed: int,
    candidates: list[str] | None,
    cpu: list[float] | None = None,
) -> tuple[list[float], int]:
    """Wall milliseconds per decision (and, into ``cpu``, the thread's CPU milliseconds: what
    a loaded machine's preemptions do not inflate); returns (timings, pods that fit nowhere)."""
    rng = random.Random(seed + 1)
    weights = [w for w, _ in SHAPES]
    placed: list[str] = []
    timings: list[float] = []
    misses = 0
    for number in range(decisions):
        shape = rng.choices(SHAPES, weights)[0][1]
        request = shape.model_copy(update={"uid": f"pod-{number}", "name": f"pod-{number}"})
        used = time.thread_time()
        start = time.perf_counter()
        decision = ledger.decide(request, candidates)
        if decision.allocation is not None:
            try:
                ledger.try_commit(request.uid, decision.allocation, request.namespace)
                placed.append(request.uid)
            except NoFit:
                misses += 1
        else:
            misses += 1
        timings.append((time.perf_counter() - start) * 1000)
        if cpu is not None:
            cpu.append((time.thread_time() - used) * 1000)
        if placed and rng.random() < 0.5:
            ledger.release(placed.pop(rng.randrange(len(placed))))
    return timings, misses


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def measure(nodes: int, args: argparse.Namespace) -> tuple[float, float, float]:
    """Build a cluster of that size, run the decisions, print its lines; (p50, p99, RSS MB)."""
    started = time.perf_counter()
    ledger = build(nodes, args.seed)
    print(f"built {nodes} nodes x 8 GPUs in {time.perf_counter() - started:.1f} s")
    names = None if args.all_nodes else json.loads(json.dumps(ledger.node_names()))
    cpu: list[float] = []
    timings, misses = run(ledger, args.decisions, args.seed, names, cpu)
    explain = []
    for shape in (SHAPES[0][1], SHAPES[4][1]):
        start = time.perf_counter()
        ledger.decide(shape, explain=True)
        explain.append((time.perf_counter() - start) * 1000)
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    p50, p99 = statistics.median(timings), _percentile(timings, 0.99)
    print(f"decisions={len(timings)} no_fit={misses} mean_ms={statistics.fmean(timings):.3f}")
    print(f"max_ms={max(timings):.3f} explain_all_nodes_ms={'/'.join(f'{t:.0f}' for t in explain)}")
    print(f"cpu p50_ms={statistics.median(cpu):.3f} p99_ms={_percentile(cpu, 0.99):.3f}")
    print(f"placement nodes={nodes} p50_ms={p50:.3f} p99_ms={p99:.3f} rss_mb={rss_mb:.0f}")
    return p50, p99, rss_mb


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[5000, 20_000])
    parser.add_argument("--decisions", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--all-nodes",
        action="store_true",
        help="decide over every node without passing the names (the default passes all names "
        "as candidates, as the extender does with the scheduler's NodeNames)",
    )
    args = parser.parse_args()
    results = []
    for nodes in args.nodes:
        results.append(measure(nodes, args))
        gc.collect()  # the previous cluster's objects are garbage now; do not time their sweep
    p50, p99, rss_mb = results[0]
    print(f"placement p50_ms={p50:.3f} p99_ms={p99:.3f} rss_mb={rss_mb:.0f}")


if __name__ == "__main__":
    main()
