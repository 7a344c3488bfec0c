"""Packing benchmark: a day of notebooks and training jobs through the real placement engine.

No cluster is needed: every admission is a ``Ledger.decide`` + ``Ledger.try_commit`` and
every departure a ``Ledger.release``, exactly the calls the extender makes, in simulated time.

Fleet (default): 50 nodes x 8 GPUs, 25 nodes of NVIDIA-A100-SXM4-80GB (81,920 MiB, 10 slices
per GPU) and 25 of NVIDIA-L4 (23,034 MiB, 4 slices per GPU); 20.5 TiB of GPU memory in all.
``--fleet split`` has the same GPUs in 50 nodes of 4 A100s and 4 L4s each (the only fleet here
where GPUs of one node differ, so the only one where the GPU order's choice between them shows).

Workload (synthetic, seeded with ``--seed``): arrivals are a Poisson process of ``--rate``
workloads per hour (default 200) over ``--hours`` (default 24). Each is

- a notebook session with probability 0.7: 1 GPU; memory per GPU 2 / 4 / 8 / 12 / 16 GiB with
  weights 0.15 / 0.3 / 0.3 / 0.15 / 0.1; cores 10 / 20 / 30 % with weights 0.5 / 0.3 / 0.2;
  duration log-normal with a median of 45 minutes (sigma 0.8), at most 8 hours;
- else a training job: 1 / 2 / 4 GPUs with weights 0.6 / 0.25 / 0.15; memory per GPU
  20 / 40 / 80 GiB with weights 0.4 / 0.35 / 0.25 (80 GiB = a whole A100, with every core:
  exclusive), cores 50 % below 80 GiB; duration log-normal with a median of 3 hours
  (sigma 0.7), at most 24 hours.

A *large* slice is 40 GiB per GPU or more: only an A100 holds one, and only one with that much
left. 200 arrivals an hour offer about 70 % of the fleet's memory-time over a day (the bound
below). ``--fleet a100`` runs the same trace on 50 nodes of 8 A100s instead (about 45 %).

Policies: ``default`` (the slice asked for, no policy annotation: the engine's defaults, node
policy binpack and GPU policy spread), ``whole-gpu`` (each workload takes whole GPUs:
``memory_percent=100``, every core, so exclusive; restricted to models big enough for its
demand; node policy binpack), ``binpack`` (the slice asked for; node and GPU policy binpack)
and ``spread`` (node and GPU policy spread).

Queue: one FIFO queue of the workloads that did not fit when they arrived, with skip-ahead
(backfill without reservation): whenever room appears (a departure), the queue is scanned in
arrival order and every workload that fits now starts, also past an older one that still
does not fit. No workload waits for room that is free; the price is that a large request can
be passed by a stream of small ones (which the wait figures and ``large`` count show). The
scan after a departure only asks the engine about the node that was freed: every other node
only lost room since the queue was last found not to fit anywhere, so this is exact.

Figures per policy (time-weighted over the horizon, simulated time):

- ``admitted``: workloads started within the horizon (``large``: those of them with a large
  slice);
- ``mem_util``: GPU memory the running workloads asked for, over the fleet's memory (for
  whole-gpu the rest of each GPU is idle, and ``alloc_util`` shows what was handed out);
- ``wait_mean_s``, ``wait_p95_s``: from arrival to start, over every arrival; a workload still
  queued at the horizon counts its wait so far;
- ``stranded``: free memory that the head of the queue cannot use (on GPUs that cannot take
  one GPU's share of it), over the fleet's memory; 0 while the queue is empty;
- ``node_var``: variance across nodes of each node's share of its memory handed out;
- ``of_bound``: ``mem_util`` over an offline bound, the memory-time the trace offers within
  the horizon (each workload from its arrival, cut at the horizon) over the fleet's
  memory-time, at most 1. It ignores time order, GPU sizes and slots, so it is not tight.

Run: ``.venv/bin/python benchmarks/packing.py`` (options: --seed, --hours, --rate,
--policies, --fleet mixed|a100|split). One line per policy:
``packing policy=<p> admitted=<n> large=<n> mem_util=<x> alloc_util=<x> wait_mean_s=<x>
wait_p95_s=<x> stranded=<x> node_var=<x> of_bound=<x>`` (on one line). The functions are
importable (tests/core/test_packing_benchmark.py runs small traces through them).
"""

from __future__ import annotations

import argparse
import heapq
import math
import random
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from vslice_core.errors import NoFit
from vslice_core.ledger import Ledger
from vslice_core.model import Allocation, ContainerRequest, Gpu, NodeInventory, PodRequest

GIB = 1024
LARGE_MIB = 40 * GIB
POLICIES = ("default", "whole-gpu", "binpack", "spread")


@dataclass(frozen=True, slots=True)
class NodeType:
    """``count`` nodes of ``gpus`` GPUs of one model (with ``also``: half of them of that
    other model, the higher indices)."""

    model: str
    memory_mib: int
    slots: int
    count: int
    gpus: int = 8
    also: tuple[str, int, int] | None = None  # (model, MiB, slots)


DEFAULT_FLEET = (
    NodeType("NVIDIA-A100-SXM4-80GB", 81920, 10, 25),
    NodeType("NVIDIA-L4", 23034, 4, 25),
)
FLEETS = {
    "mixed": DEFAULT_FLEET,
    "a100": (NodeType("NVIDIA-A100-SXM4-80GB", 81920, 10, 50),),
    "split": (NodeType("NVIDIA-A100-SXM4-80GB", 81920, 10, 50, also=("NVIDIA-L4", 23034, 4)),),
}


@dataclass(frozen=True, slots=True)
class Workload:
    """One notebook session or training job: ``gpus`` GPUs with this much of each."""

    uid: str
    kind: str  # "notebook" or "training"
    arrival_s: float
    duration_s: float
    gpus: int
    memory_mib: int  # per GPU
    cores: int  # per GPU, percent

    @property
    def large(self) -> bool:
        return self.memory_mib >= LARGE_MIB

    @property
    def exclusive(self) -> bool:
        return self.cores >= 100


def fleet(types: Sequence[NodeType] = DEFAULT_FLEET) -> list[NodeInventory]:
    """The node inventories: names ``<short model>-<n>``, GPUs indexed 0..gpus-1."""
    nodes = []
    for kind in types:
        models = [(kind.model, kind.memory_mib, kind.slots)] * kind.gpus
        if kind.also is not None:
            models[kind.gpus // 2 :] = [kind.also] * (kind.gpus - kind.gpus // 2)
        short = "".join(dict.fromkeys(model.split("-")[1].lower() for model, _, _ in models))
        for n in range(kind.count):
            name = f"{short}-{n:03d}"
            gpus = [
                Gpu(uuid=f"GPU-{name}-{i}", model=model, memory_mib=memory, slots=slots, index=i)
                for i, (model, memory, slots) in enumerate(models)
            ]
            nodes.append(NodeInventory(name=name, gpus=gpus))
    return nodes


def _lognormal_s(rng: random.Random, median_s: float, sigma: float, cap_s: float) -> float:
    return min(cap_s, rng.lognormvariate(math.log(median_s), sigma))


def _notebook(rng: random.Random, uid: str, at: float) -> Workload:
    memory = rng.choices((2, 4, 8, 12, 16), (0.15, 0.3, 0.3, 0.15, 0.1))[0] * GIB
    cores = rng.choices((10, 20, 30), (0.5, 0.3, 0.2))[0]
    duration = _lognormal_s(rng, 45 * 60, 0.8, 8 * 3600)
    return Workload(uid, "notebook", at, duration, 1, memory, cores)


def _training(rng: random.Random, uid: str, at: float) -> Workload:
    gpus = rng.choices((1, 2, 4), (0.6, 0.25, 0.15))[0]
    memory = rng.choices((20, 40, 80), (0.4, 0.35, 0.25))[0] * GIB
    cores = 100 if memory >= 80 * GIB else 50
    duration = _lognormal_s(rng, 3 * 3600, 0.7, 24 * 3600)
    return Workload(uid, "training", at, duration, gpus, memory, cores)


def synthetic_trace(
    seed: int, hours: float = 24, rate_per_hour: float = 200, notebook_share: float = 0.7
) -> list[Workload]:
    """Poisson arrivals over ``hours``; the mix of the module docstring."""
    rng = random.Random(seed)
    trace: list[Workload] = []
    at = rng.expovariate(rate_per_hour / 3600)
    while at < hours * 3600:
        uid = f"w-{len(trace):05d}"
        make = _notebook if rng.random() < notebook_share else _training
        trace.append(make(rng, uid, at))
        at += rng.expovariate(rate_per_hour / 3600)
    return trace


def request_for(workload: Workload, policy: str, nodes: Sequence[NodeInventory]) -> PodRequest:
    """The pod each policy asks the engine for."""
    meta = {"uid": workload.uid, "name": workload.uid}
    if policy == "whole-gpu":
        models = {gpu.model: gpu.memory_mib for node in nodes for gpu in node.gpus}
        big_enough = sorted(m.lower() for m, mib in models.items() if mib >= workload.memory_mib)
        whole = ContainerRequest(name="main", gpus=workload.gpus, memory_percent=100, cores=100)
        types = big_enough if len(big_enough) < len(models) else []
        return PodRequest(**meta, containers=[whole], gpu_types=types, gpu_policy="binpack")
    if policy not in ("default", "binpack", "spread"):
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    share = ContainerRequest(
        name="main", gpus=workload.gpus, memory_mib=workload.memory_mib, cores=workload.cores
    )
    if policy == "default":
        return PodRequest(**meta, containers=[share])
    return PodRequest(**meta, containers=[share], node_policy=policy, gpu_policy=policy)


@dataclass(slots=True)
class _GpuView:
    """What the simulation tracks of one GPU (the ledger holds the truth; tests compare)."""

    node: str
    model: str
    memory: int
    slots: int
    used_memory: int = 0
    used_cores: int = 0
    used_slots: int = 0

    def takes(self, workload: Workload, policy: str) -> bool:
        """Could this GPU hold one GPU's share of the workload now (a necessary condition)."""
        if self.used_slots >= self.slots:
            return False
        if policy == "whole-gpu" or workload.exclusive:
            idle = self.used_slots == 0 and self.used_memory == 0 and self.used_cores == 0
            return idle and self.memory >= workload.memory_mib
        return (
            self.memory - self.used_memory >= workload.memory_mib
            and 100 - self.used_cores >= workload.cores
        )


@dataclass(slots=True)
class Result:
    """The figures of one policy on one trace (see the module docstring)."""

    policy: str
    arrivals: int
    admitted: int
    large_admitted: int
    mem_util: float
    alloc_util: float
    wait_mean_s: float
    wait_p95_s: float
    stranded: float
    node_var: float
    bound: float
    started: dict[str, str] = field(default_factory=dict)  # uid -> node

    @property
    def of_bound(self) -> float:
        return self.mem_util / self.bound if self.bound else 0.0

    def line(self) -> str:
        return (
            f"packing policy={self.policy} admitted={self.admitted} large={self.large_admitted}"
            f" mem_util={self.mem_util:.3f} alloc_util={self.alloc_util:.3f}"
            f" wait_mean_s={self.wait_mean_s:.0f} wait_p95_s={self.wait_p95_s:.0f}"
            f" stranded={self.stranded:.3f} node_var={self.node_var:.4f}"
            f" of_bound={self.of_bound:.3f}"
        )


def offline_bound(
    trace: Sequence[Workload], nodes: Sequence[NodeInventory], horizon_s: float
) -> float:
    """Memory-time offered within the horizon over the fleet's memory-time, at most 1."""
    capacity = sum(gpu.memory_mib for node in nodes for gpu in node.gpus) * horizon_s
    offered = sum(
        w.memory_mib * w.gpus * max(0.0, min(w.duration_s, horizon_s - w.arrival_s))
        for w in trace
        if w.arrival_s < horizon_s
    )
    return min(1.0, offered / capacity) if capacity else 0.0


class Simulation:
    """One policy over one trace: an event queue of arrivals and departures, in simulated time."""

    def __init__(self, nodes: Sequence[NodeInventory], policy: str, horizon_s: float) -> None:
        self.nodes = list(nodes)
        self.policy = policy
        self.horizon_s = horizon_s
        self.ledger = Ledger()
        for inventory in self.nodes:
            self.ledger.set_node(inventory)
        self.gpus = {
            gpu.uuid: _GpuView(inventory.name, gpu.model, gpu.memory_mib, gpu.slots)
            for inventory in self.nodes
            for gpu in inventory.gpus
        }
        self.node_gpus = {inv.name: [self.gpus[g.uuid] for g in inv.gpus] for inv in self.nodes}
        self.node_memory = {inv.name: sum(g.memory_mib for g in inv.gpus) for inv in self.nodes}
        self.capacity = sum(self.node_memory.values())
        self.queue: list[Workload] = []
        self.running: dict[str, tuple[Workload, Allocation]] = {}
        self.started: dict[str, str] = {}
        self.waits: list[float] = []
        # (time, 0 = departure / 1 = arrival, sequence number, uid): departures first at a tie
        self.events: list[tuple[float, int, int, str]] = []
        self.sequence = 0
        self.now = 0.0
        self.demand = 0  # MiB asked for by the running workloads
        self.handed_out = 0  # MiB the engine gave them
        self.integrals = [0.0, 0.0, 0.0, 0.0]  # demand, handed out, stranded, node variance

    # ----- engine calls ------------------------------------------------------------------
    def try_start(self, workload: Workload, candidates: list[str] | None) -> bool:
        request = request_for(workload, self.policy, self.nodes)
        decision = self.ledger.decide(request, candidates)
        if decision.allocation is None:
            return False
        try:
            self.ledger.try_commit(workload.uid, decision.allocation)
        except NoFit:
            return False
        self._charge(decision.allocation, 1)
        self.running[workload.uid] = (workload, decision.allocation)
        self.started[workload.uid] = decision.allocation.node
        self.waits.append(self.now - workload.arrival_s)
        self.demand += workload.memory_mib * workload.gpus
        self.sequence += 1
        end = self.now + workload.duration_s
        heapq.heappush(self.events, (end, 0, self.sequence, workload.uid))
        return True

    def depart(self, uid: str) -> str:
        workload, allocation = self.running.pop(uid)
        self.ledger.release(uid)
        self._charge(allocation, -1)
        self.demand -= workload.memory_mib * workload.gpus
        return allocation.node

    def _charge(self, allocation: Allocation, sign: int) -> None:
        for container in allocation.containers:
            for grant in container.gpus:
                view = self.gpus[grant.uuid]
                view.used_slots += sign
                view.used_memory += sign * grant.memory_mib
                view.used_cores += sign * grant.cores
                self.handed_out += sign * grant.memory_mib

    # ----- the queue ---------------------------------------------------------------------
    def rescan(self, node: str) -> None:
        """Skip-ahead FIFO: start every queued workload that now fits on the freed node."""
        views = self.node_gpus[node]
        waiting: list[Workload] = []
        for workload in self.queue:
            room = sum(view.takes(workload, self.policy) for view in views)
            if room < workload.gpus or not self.try_start(workload, [node]):
                waiting.append(workload)
        self.queue = waiting

    # ----- time-weighted figures -----------------------------------------------------------
    def _stranded(self) -> int:
        if not self.queue:
            return 0
        head = self.queue[0]
        return sum(
            view.memory - view.used_memory
            for view in self.gpus.values()
            if view.used_slots < view.slots and not view.takes(head, self.policy)
        )

    def _node_variance(self) -> float:
        loads = [
            sum(view.used_memory for view in views) / self.node_memory[name]
            for name, views in self.node_gpus.items()
        ]
        return statistics.pvariance(loads) if len(loads) > 1 else 0.0

    def advance(self, to: float) -> None:
        span = to - self.now
        if span > 0:
            current = (self.demand, self.handed_out, self._stranded(), self._node_variance())
            for i, value in enumerate(current):
                self.integrals[i] += value * span
        self.now = to

    # ----- the run -----------------------------------------------------------------------
    def run(self, trace: Sequence[Workload]) -> Result:
        by_uid = {w.uid: w for w in trace}
        for workload in trace:
            if workload.arrival_s < self.horizon_s:
                self.sequence += 1
                self.events.append((workload.arrival_s, 1, self.sequence, workload.uid))
        heapq.heapify(self.events)
        while self.events and self.events[0][0] < self.horizon_s:
            at, kind, _, uid = heapq.heappop(self.events)
            self.advance(at)
            if kind == 0:
                self.rescan(self.depart(uid))
            elif not self.try_start(by_uid[uid], None):
                self.queue.append(by_uid[uid])
        self.advance(self.horizon_s)
        return self._result(trace)

    def _result(self, trace: Sequence[Workload]) -> Result:
        waits = self.waits + [self.horizon_s - w.arrival_s for w in self.queue]
        ordered = sorted(waits)
        fleet_time = self.capacity * self.horizon_s
        demand, handed_out, stranded, variance = self.integrals
        return Result(
            policy=self.policy,
            arrivals=sum(1 for w in trace if w.arrival_s < self.horizon_s),
            admitted=len(self.started),
            large_admitted=sum(1 for uid in self.started if uid in self._large(trace)),
            mem_util=demand / fleet_time,
            alloc_util=handed_out / fleet_time,
            wait_mean_s=statistics.fmean(waits) if waits else 0.0,
            wait_p95_s=ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))] if waits else 0.0,
            stranded=stranded / fleet_time,
            node_var=variance / self.horizon_s,
            bound=offline_bound(trace, self.nodes, self.horizon_s),
            started=dict(self.started),
        )

    @staticmethod
    def _large(trace: Sequence[Workload]) -> set[str]:
        return {w.uid for w in trace if w.large}


def simulate(
    trace: Sequence[Workload],
    nodes: Sequence[NodeInventory],
    policy: str,
    horizon_s: float | None = None,
) -> Result:
    """Run one policy over the trace (horizon: the last arrival, when not given)."""
    end = horizon_s if horizon_s is not None else max((w.arrival_s for w in trace), default=0.0)
    return Simulation(nodes, policy, end).run(trace)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--hours", type=float, default=24)
    parser.add_argument("--rate", type=float, default=200, help="arrivals per hour")
    parser.add_argument("--policies", nargs="+", choices=POLICIES, default=list(POLICIES))
    parser.add_argument("--fleet", choices=sorted(FLEETS), default="mixed")
    args = parser.parse_args()
    nodes = fleet(FLEETS[args.fleet])
    trace = synthetic_trace(args.seed, args.hours, args.rate)
    large = sum(1 for w in trace if w.large)
    bound = offline_bound(trace, nodes, args.hours * 3600)
    print(
        f"fleet: {len(nodes)} nodes, {sum(len(n.gpus) for n in nodes)} GPUs; trace: {len(trace)}"
        f" workloads ({large} large) over {args.hours:g} h, seed {args.seed}; bound {bound:.3f}"
    )
    for policy in args.policies:
        started = time.perf_counter()
        result = simulate(trace, nodes, policy, args.hours * 3600)
        print(f"{result.line()}  ({time.perf_counter() - started:.1f} s)")


if __name__ == "__main__":
    main()
