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

Priorities and idle time (drawn from a second generator seeded from ``--seed``, so the trace
above and the policy lines are the same with or without them): a training job has priority
100, a notebook 0; a notebook goes idle for good after a uniform 30-90 % of its life (its
user walked away and the kernel lives on), a training job never does. Two more runs of the
node policy ``--priority-policy`` (default ``default``) on the same fleet and trace report:

- ``preemption``: the high-priority jobs' wait (mean, p95, and how many waited at all)
  without preemption (the policy's own run) and with it. With preemption, a workload that
  fits nowhere on arrival asks :func:`vslice_core.preemption.plan_preemption` for the node
  and the pods of lower priority to evict there (every pod evictable, no disruption budgets);
  the victims go back to the end of the queue with the rest of their run, and their extra
  wait counts to theirs (``low_wait_mean_s`` shows what the notebooks pay). After a departure,
  queued workloads that still do not fit try preemption on the freed node only (nodes where
  skip-ahead started new low-priority pods since are not asked again: a lower bound on what
  preemption gives). The queue stays FIFO with skip-ahead in both runs, so only preemption
  differs.
- ``idle``: with slices reclaimed once idle longer than ``--idle-hours`` (default 1): the
  GPU memory-time returned in GiB-hours (from the reclaim to the end the notebook would have
  had, cut at the horizon), beside all the memory-time notebooks sat idle on in the run
  without reclaim, and the mean wait with reclaim.

Run: ``.venv/bin/python benchmarks/packing.py`` (options: --seed, --hours, --rate,
--policies, --fleet mixed|a100|split, --priority-policy, --idle-hours, --no-priorities).
One line per policy:
``packing policy=<p> admitted=<n> large=<n> mem_util=<x> alloc_util=<x> wait_mean_s=<x>
wait_p95_s=<x> stranded=<x> node_var=<x> of_bound=<x>`` (on one line), then
``preemption policy=<p> high_jobs=<n> wait_mean_s=<x> -> <x> wait_p95_s=<x> -> <x>
high_waited=<n> -> <n> evicted=<n> low_wait_mean_s=<x> -> <x>`` and ``idle policy=<p>
after_h=<x> returned_gib_h=<x> idle_gib_h=<x> wait_mean_s=<x> -> <x>`` (each on one line;
``a -> b``: without, then with). The functions are importable
(tests/core/test_packing_benchmark.py runs small traces through them).
"""

from __future__ import annotations

import argparse
import dataclasses
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
from vslice_core.preemption import NodeView, RunningPod, plan_preemption

GIB = 1024
LARGE_MIB = 40 * GIB
HIGH_PRIORITY = 100  # training jobs; notebooks have 0
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
    priority: int = 0
    idle_from_s: float | None = None  # into its run, when it goes idle for good (None: never)

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
    seed: int,
    hours: float = 24,
    rate_per_hour: float = 200,
    notebook_share: float = 0.7,
    priorities: bool = True,
) -> list[Workload]:
    """Poisson arrivals over ``hours``; the mix of the module docstring (``priorities``: with
    the priorities and idle times, which leave everything else as it is)."""
    rng = random.Random(seed)
    trace: list[Workload] = []
    at = rng.expovariate(rate_per_hour / 3600)
    while at < hours * 3600:
        uid = f"w-{len(trace):05d}"
        make = _notebook if rng.random() < notebook_share else _training
        trace.append(make(rng, uid, at))
        at += rng.expovariate(rate_per_hour / 3600)
    return with_priorities(trace, seed) if priorities else trace


def with_priorities(trace: Sequence[Workload], seed: int) -> list[Workload]:
    """Training jobs get the high priority; notebooks go idle after 30-90 % of their life.
    A generator of its own keeps the rest of the trace as the seed made it."""
    rng = random.Random(f"priorities-{seed}")
    marked = []
    for w in trace:
        if w.kind == "training":
            marked.append(dataclasses.replace(w, priority=HIGH_PRIORITY))
        else:
            idle_from = w.duration_s * rng.uniform(0.3, 0.9)
            marked.append(dataclasses.replace(w, idle_from_s=idle_from))
    return marked


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
    waits: dict[str, float] = field(default_factory=dict)  # uid -> time queued, to horizon
    evicted: int = 0  # evictions made by preemption
    reclaimed_gib_h: float = 0.0  # memory-time returned by the idle reclaim
    idle_gib_h: float = 0.0  # memory-time held by idle workloads (not reclaimed)

    def wait_of(self, uids: set[str]) -> tuple[float, float, int]:
        """Mean and p95 wait of these workloads (seconds), and how many waited at all."""
        waits = sorted(wait for uid, wait in self.waits.items() if uid in uids)
        if not waits:
            return 0.0, 0.0, 0
        p95 = waits[min(len(waits) - 1, int(0.95 * len(waits)))]
        return statistics.fmean(waits), p95, sum(1 for wait in waits if wait > 0)

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

    def __init__(
        self,
        nodes: Sequence[NodeInventory],
        policy: str,
        horizon_s: float,
        *,
        preempt: bool = False,
        reclaim_idle_s: float | None = None,
    ) -> None:
        self.nodes = list(nodes)
        self.policy = policy
        self.horizon_s = horizon_s
        self.preempt = preempt
        self.reclaim_idle_s = reclaim_idle_s
        self.inventories = {inventory.name: inventory for inventory in self.nodes}
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
        self.waits: dict[str, float] = {}  # uid -> time queued so far, over every start
        self.queued_at: dict[str, float] = {}  # uid -> when it last joined the queue
        self.began: dict[str, float] = {}  # uid -> when its current run began
        self.on_node: dict[str, dict[str, None]] = {name: {} for name in self.inventories}
        self.departure: dict[str, int] = {}  # uid -> sequence number of its live departure
        self.evicted = 0
        self.reclaimed = 0.0  # MiB-seconds returned by the idle reclaim
        self.idle = 0.0  # MiB-seconds held by idle workloads
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
        self._begin(workload, decision.allocation)
        return True

    def _begin(self, workload: Workload, allocation: Allocation) -> None:
        uid = workload.uid
        self._charge(allocation, 1)
        self.running[uid] = (workload, allocation)
        self.on_node[allocation.node][uid] = None
        self.started[uid] = allocation.node
        queued = self.queued_at.pop(uid, workload.arrival_s)
        self.waits[uid] = self.waits.get(uid, 0.0) + self.now - queued
        self.began[uid] = self.now
        self.demand += workload.memory_mib * workload.gpus
        self.sequence += 1
        self.departure[uid] = self.sequence
        end = self.now + workload.duration_s
        heapq.heappush(self.events, (min(end, self._reclaim_at(workload)), 0, self.sequence, uid))

    def _reclaim_at(self, workload: Workload) -> float:
        """When the idle reclaim takes the workload's slices back (infinity: never)."""
        if self.reclaim_idle_s is None or workload.idle_from_s is None:
            return math.inf
        return self.now + workload.idle_from_s + self.reclaim_idle_s

    def depart(self, uid: str, *, evicted: bool = False) -> str:
        workload, allocation = self.running.pop(uid)
        del self.on_node[allocation.node][uid]
        self.ledger.release(uid)
        self._charge(allocation, -1)
        memory = workload.memory_mib * workload.gpus
        self.demand -= memory
        del self.departure[uid]
        self.idle += memory * self._idle_s(uid, workload, self.now)
        end = min(self.began[uid] + workload.duration_s, self.horizon_s)
        if not evicted and end > self.now:  # reclaimed: what it would have held from now on
            self.reclaimed += memory * (end - self.now)
        return allocation.node

    def _idle_s(self, uid: str, workload: Workload, until: float) -> float:
        """How long the workload's current run has sat idle by ``until``."""
        if workload.idle_from_s is None:
            return 0.0
        return max(0.0, until - self.began[uid] - workload.idle_from_s)

    # ----- preemption --------------------------------------------------------------------
    def try_preempt(self, workload: Workload, nodes: Sequence[str] | None) -> bool:
        """Evict lower-priority workloads on the node preemption chooses and start this one
        there; the victims go back to the queue with the rest of their run."""
        if not self.preempt or workload.priority <= 0:
            return False
        request = request_for(workload, self.policy, self.nodes)
        views = [self._view(name) for name in (nodes or self.inventories)]
        plan = plan_preemption(views, request, workload.priority)
        if plan.node is None or not plan.victims:
            return False
        for victim in plan.victims:
            self._evict(victim.uid)
        return self.try_start(workload, [plan.node])

    def _view(self, node: str) -> NodeView:
        pods = [
            RunningPod(
                uid=uid,
                namespace="default",
                name=uid,
                priority=workload.priority,
                started_s=self.began[uid],
                evictable=True,
                allocation=allocation,
            )
            for uid in self.on_node[node]
            for workload, allocation in (self.running[uid],)
        ]
        return NodeView(self.inventories[node], self.ledger.gpu_usage(node), pods)

    def _evict(self, uid: str) -> None:
        workload = self.running[uid][0]
        ran = self.now - self.began[uid]
        self.depart(uid, evicted=True)
        self.evicted += 1
        idle_from = None if workload.idle_from_s is None else max(0.0, workload.idle_from_s - ran)
        rest = dataclasses.replace(
            workload, duration_s=workload.duration_s - ran, idle_from_s=idle_from
        )
        self.queued_at[uid] = self.now
        self.queue.append(rest)

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
        """Skip-ahead FIFO: start every queued workload that now fits on the freed node (with
        preemption: or that fits there once pods of lower priority are evicted)."""
        views = self.node_gpus[node]
        waiting: list[Workload] = []
        scanned, self.queue = self.queue, []  # victims evicted during the scan land here
        for workload in scanned:
            room = sum(view.takes(workload, self.policy) for view in views)
            if room >= workload.gpus and self.try_start(workload, [node]):
                continue
            if not self.try_preempt(workload, [node]):
                waiting.append(workload)
        self.queue = waiting + self.queue

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
            at, kind, sequence, uid = heapq.heappop(self.events)
            self.advance(at)
            if kind == 0:
                if self.departure.get(uid) == sequence:  # else evicted since: stale
                    self.rescan(self.depart(uid))
            elif not self.try_start(by_uid[uid], None) and not self.try_preempt(by_uid[uid], None):
                self.queue.append(by_uid[uid])
        self.advance(self.horizon_s)
        return self._result(trace)

    def _result(self, trace: Sequence[Workload]) -> Result:
        for uid, (workload, _) in self.running.items():  # idle time of the runs still going
            idle = self._idle_s(uid, workload, self.horizon_s)
            self.idle += workload.memory_mib * workload.gpus * idle
        per_uid = dict(self.waits)
        for w in self.queue:  # still queued at the horizon: the wait so far
            queued = self.queued_at.get(w.uid, w.arrival_s)
            per_uid[w.uid] = per_uid.get(w.uid, 0.0) + self.horizon_s - queued
        waits = list(per_uid.values())
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
            waits=per_uid,
            evicted=self.evicted,
            reclaimed_gib_h=self.reclaimed / GIB / 3600,
            idle_gib_h=self.idle / GIB / 3600,
        )

    @staticmethod
    def _large(trace: Sequence[Workload]) -> set[str]:
        return {w.uid for w in trace if w.large}


def simulate(
    trace: Sequence[Workload],
    nodes: Sequence[NodeInventory],
    policy: str,
    horizon_s: float | None = None,
    *,
    preempt: bool = False,
    reclaim_idle_s: float | None = None,
) -> Result:
    """Run one policy over the trace (horizon: the last arrival, when not given); with
    preemption, or with slices idle longer than ``reclaim_idle_s`` taken back."""
    end = horizon_s if horizon_s is not None else max((w.arrival_s for w in trace), default=0.0)
    simulation = Simulation(nodes, policy, end, preempt=preempt, reclaim_idle_s=reclaim_idle_s)
    return simulation.run(trace)


def preemption_line(trace: Sequence[Workload], without: Result, with_preemption: Result) -> str:
    """The high-priority jobs' wait without and with preemption, and what the rest pays."""
    high = {w.uid for w in trace if w.priority > 0 and w.uid in without.waits}
    low = {w.uid for w in trace if w.priority <= 0 and w.uid in without.waits}
    before, after = without.wait_of(high), with_preemption.wait_of(high)
    low_before, low_after = without.wait_of(low)[0], with_preemption.wait_of(low)[0]
    return (
        f"preemption policy={without.policy} high_jobs={len(high)}"
        f" wait_mean_s={before[0]:.0f} -> {after[0]:.0f}"
        f" wait_p95_s={before[1]:.0f} -> {after[1]:.0f}"
        f" high_waited={before[2]} -> {after[2]} evicted={with_preemption.evicted}"
        f" low_wait_mean_s={low_before:.0f} -> {low_after:.0f}"
    )


def idle_line(without: Result, reclaimed: Result, after_h: float) -> str:
    """The memory-time an idle reclaim returns, beside all the idle memory-time."""
    return (
        f"idle policy={without.policy} after_h={after_h:g}"
        f" returned_gib_h={reclaimed.reclaimed_gib_h:.0f} idle_gib_h={without.idle_gib_h:.0f}"
        f" wait_mean_s={without.wait_mean_s:.0f} -> {reclaimed.wait_mean_s:.0f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--hours", type=float, default=24)
    parser.add_argument("--rate", type=float, default=200, help="arrivals per hour")
    parser.add_argument("--policies", nargs="+", choices=POLICIES, default=list(POLICIES))
    parser.add_argument("--fleet", choices=sorted(FLEETS), default="mixed")
    parser.add_argument(
        "--priority-policy",
        choices=POLICIES,
        default="default",
        help="node policy of the preemption and idle-reclaim runs",
    )
    parser.add_argument(
        "--idle-hours", type=float, default=1.0, help="reclaim slices idle longer than this"
    )
    parser.add_argument(
        "--no-priorities", action="store_true", help="only the policy lines (no extra runs)"
    )
    args = parser.parse_args()
    nodes = fleet(FLEETS[args.fleet])
    trace = synthetic_trace(args.seed, args.hours, args.rate)
    large = sum(1 for w in trace if w.large)
    bound = offline_bound(trace, nodes, args.hours * 3600)
    print(
        f"fleet: {len(nodes)} nodes, {sum(len(n.gpus) for n in nodes)} GPUs; trace: {len(trace)}"
        f" workloads ({large} large) over {args.hours:g} h, seed {args.seed}; bound {bound:.3f}"
    )
    horizon = args.hours * 3600
    results = {}
    for policy in args.policies:
        started = time.perf_counter()
        results[policy] = simulate(trace, nodes, policy, horizon)
        print(f"{results[policy].line()}  ({time.perf_counter() - started:.1f} s)")
    if args.no_priorities:
        return
    policy = args.priority_policy
    without = results.get(policy) or simulate(trace, nodes, policy, horizon)
    started = time.perf_counter()
    preempted = simulate(trace, nodes, policy, horizon, preempt=True)
    print(f"{preemption_line(trace, without, preempted)}  ({time.perf_counter() - started:.1f} s)")
    started = time.perf_counter()
    reclaimed = simulate(trace, nodes, policy, horizon, reclaim_idle_s=args.idle_hours * 3600)
    print(
        f"{idle_line(without, reclaimed, args.idle_hours)}  ({time.perf_counter() - started:.1f} s)"
    )


if __name__ == "__main__":
    main()
