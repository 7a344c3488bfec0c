"""The placement engine: which GPUs of a node can take a pod, and how good that node is.

The engine works on plain slotted objects (:class:`GpuState`, :class:`NodeState`, :class:`Ask`),
not on pydantic models, because the extender evaluates thousands of nodes per pod. The
:class:`~vslice_core.ledger.Ledger` owns the node states and calls :func:`evaluate`.

Per GPU, the checks run in DESIGN.md's order and the first failing one is the GPU's reason:
``unhealthy``, ``cordoned``, ``type_mismatch``, ``uuid_mismatch``, ``slots_exhausted``,
``mutex_busy``, ``insufficient_memory``, ``insufficient_cores``, ``exclusive_conflict``,
``cores_exhausted``, then ``numa_mismatch`` (GPUs outside the chosen NUMA node). Per node:
``too_few_gpus`` when fewer GPUs than asked passed, ``quota_exceeded`` when the namespace quota
cannot take the pod on that node (percent requests cost more on bigger GPUs).

App containers are placed first, one after the other, each seeing what the previous ones
took. Init containers run before the app containers, one at a time, so each is checked
against the node without the pod's own app usage and the pod is charged, per GPU,
``max(init peak, sum of app containers)`` (:func:`charge_of`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from vslice_core.gputypes import key_matches, type_key
from vslice_core.model import (
    EXCLUSIVE_CORES,
    ContainerRequest,
    GpuUsage,
    NodeInventory,
    PodRequest,
)

# Above this many candidate sets the topology policy grows a set greedily instead.
_MAX_TOPOLOGY_SETS = 4096


@dataclass(slots=True)
class GpuState:
    """One GPU and what is taken on it (base usage plus every recorded allocation)."""

    uuid: str
    index: int
    model: str  # as the node's inventory writes it: suggestions name it so
    model_key: str  # the model's words (vslice_core.gputypes.type_key): what type filters match
    numa: int
    healthy: bool
    cordoned: bool
    memory: int
    cores: int
    slots: int
    used_memory: int = 0
    used_cores: int = 0
    used_slots: int = 0

    @property
    def open(self) -> bool:
        """Can take another slice at all (healthy, not cordoned, a free slot)."""
        return self.healthy and not self.cordoned and self.used_slots < self.slots

    @property
    def idle(self) -> bool:
        return self.used_slots == 0 and self.used_memory == 0 and self.used_cores == 0


# What an open GPU (healthy, not cordoned, a free slot) still has: (free MiB, the largest
# memory percent it can still give, free cores, idle).
FreeGpu = tuple[int, int, int, bool]


@dataclass(slots=True)
class NodeState:
    """A node's GPUs (by index) with aggregates that reject whole nodes cheaply."""

    name: str
    gpus: list[GpuState]
    by_uuid: dict[str, GpuState]
    links: dict[str, int]
    models: frozenset[str]  # the model keys of its GPUs
    base: dict[str, GpuUsage]
    total_memory: int = 0
    largest_memory: int = 0  # of its largest GPU: the node's size class for binpack
    used_memory: int = 0
    open_gpus: int = 0
    idle_gpus: int = 0
    max_free_memory: int = 0
    max_free_cores: int = 0
    max_free_percent: int = 0
    free: tuple[FreeGpu, ...] = ()  # per open GPU, in index order

    def refresh(self) -> None:
        """Recompute the aggregates; O(GPUs of this node)."""
        idle_gpus = max_memory = max_cores = max_percent = used = 0
        free_gpus: list[FreeGpu] = []
        for gpu in self.gpus:
            used += gpu.used_memory
            if not gpu.open:
                continue
            idle = gpu.idle
            idle_gpus += idle
            memory, cores = gpu.memory - gpu.used_memory, gpu.cores - gpu.used_cores
            percent = largest_percent(gpu.memory, memory)
            max_memory = max(max_memory, memory)
            max_cores = max(max_cores, cores)
            max_percent = max(max_percent, percent)
            free_gpus.append((memory, percent, cores, idle))
        self.used_memory = used
        self.free = tuple(free_gpus)
        self.open_gpus, self.idle_gpus = len(free_gpus), idle_gpus
        self.max_free_memory, self.max_free_cores = max_memory, max_cores
        self.max_free_percent = max_percent

    @property
    def load(self) -> float:
        """Share of the node's GPU memory in use: what node policies rank by."""
        return self.used_memory / self.total_memory if self.total_memory else 0.0

    def link(self, a: str, b: str) -> int:
        return self.links.get(f"{a},{b}" if a <= b else f"{b},{a}", 0)


def largest_percent(memory: int, free: int) -> int:
    """The largest memory percentage a GPU can still give: ``memory * p // 100 <= free``."""
    if free < 0:
        return -1
    percent = min(100, free * 100 // memory)
    while percent < 100 and memory * (percent + 1) // 100 <= free:
        percent += 1
    return percent


def node_state(inventory: NodeInventory, used: dict[str, GpuUsage] | None = None) -> NodeState:
    """A fresh node state with ``used`` (usage not tied to any known pod) applied."""
    base = dict(used or {})
    gpus = [
        GpuState(
            uuid=gpu.uuid,
            index=gpu.index,
            model=gpu.model,
            model_key=type_key(gpu.model),
            numa=gpu.numa,
            healthy=gpu.healthy,
            cordoned=gpu.cordoned,
            memory=gpu.memory_mib,
            cores=gpu.cores,
            slots=gpu.slots,
        )
        for gpu in sorted(inventory.gpus, key=lambda g: g.index)
    ]
    by_uuid = {gpu.uuid: gpu for gpu in gpus}
    for uuid, usage in base.items():
        if uuid in by_uuid:
            apply_usage(by_uuid[uuid], usage, 1)
    state = NodeState(
        name=inventory.name,
        gpus=gpus,
        by_uuid=by_uuid,
        links=dict(inventory.topology),
        models=frozenset(gpu.model_key for gpu in gpus),
        base=base,
        total_memory=sum(gpu.memory for gpu in gpus),
        largest_memory=max((gpu.memory for gpu in gpus), default=0),
    )
    state.refresh()
    return state


def apply_usage(gpu: GpuState, usage: GpuUsage, sign: int) -> None:
    gpu.used_slots += sign * usage.slots
    gpu.used_memory += sign * usage.memory_mib
    gpu.used_cores += sign * usage.cores


@dataclass(slots=True, frozen=True)
class Want:
    """One container's request in engine form."""

    position: int  # in the pod's list of GPU containers
    name: str
    init: bool
    count: int
    memory: int | None
    percent: int
    cores: int

    @property
    def exclusive(self) -> bool:
        return self.cores >= EXCLUSIVE_CORES

    def memory_on(self, gpu: GpuState) -> int:
        return self.memory if self.memory is not None else gpu.memory * self.percent // 100


# What every GPU a container gets must at least have free before anything of the pod is
# placed: (GPUs, free MiB, free memory percent, free cores, idle only); see :func:`may_fit`.
Floor = tuple[int, int, int, int, bool]


@dataclass(slots=True, frozen=True)
class Ask:
    """A pod's request in engine form, with the bounds used to reject nodes cheaply."""

    wants: tuple[Want, ...]
    types: tuple[str, ...]  # wanted and excluded types as keys (vslice_core.gputypes.type_key)
    types_exclude: tuple[str, ...]
    uuids: frozenset[str] | None
    uuids_exclude: frozenset[str]
    numa_bind: bool
    node_policy: str
    gpu_policy: str
    namespace: str
    need_open: int
    need_idle: int
    need_memory: int
    need_percent: int
    need_cores: int
    floors: tuple[Floor, ...]


def _want(position: int, container: ContainerRequest) -> Want:
    return Want(
        position=position,
        name=container.name,
        init=container.init,
        count=container.gpus,
        memory=container.memory_mib,
        percent=container.memory_percent or 0,
        cores=container.cores,
    )


def compile_request(request: PodRequest) -> Ask:
    """The engine form of a request (computed once per decision)."""
    wants = tuple(_want(i, c) for i, c in enumerate(request.containers))
    mutex = request.gpu_policy == "mutex"
    return Ask(
        wants=wants,
        types=tuple(type_key(t) for t in request.gpu_types),
        types_exclude=tuple(type_key(t) for t in request.gpu_types_exclude),
        uuids=frozenset(request.gpu_uuids) if request.gpu_uuids else None,
        uuids_exclude=frozenset(request.gpu_uuids_exclude),
        numa_bind=request.numa_bind,
        node_policy=request.node_policy,
        gpu_policy=request.gpu_policy,
        namespace=request.namespace,
        need_open=max((w.count for w in wants), default=0),
        need_idle=max((w.count for w in wants if w.exclusive or mutex), default=0),
        need_memory=max((w.memory or 0 for w in wants), default=0),
        need_percent=max((w.percent for w in wants if w.memory is None), default=0),
        need_cores=max((w.cores for w in wants), default=0),
        floors=tuple(_floor(w, mutex) for w in wants),
    )


def _floor(want: Want, mutex: bool) -> Floor:
    memory, percent = (0, want.percent) if want.memory is None else (want.memory, 0)
    # A container asking no cores still needs one left (else ``cores_exhausted``).
    return (want.count, memory, percent, max(1, want.cores), want.exclusive or mutex)


def types_match(ask: Ask, model_keys: Iterable[str]) -> bool:
    """Whether any of these models (as :func:`~vslice_core.gputypes.type_key`) passes the
    type selectors."""
    return any(_type_ok(ask, key) for key in model_keys)


def _type_ok(ask: Ask, model_key: str) -> bool:
    # vslice_core.gputypes.allowed on precomputed keys: this runs per GPU per decision.
    if ask.types and not any(key_matches(t, model_key) for t in ask.types):
        return False
    return not any(key_matches(t, model_key) for t in ask.types_exclude)


def walk_floors(ask: Ask, model_memory: Mapping[str, int]) -> tuple[int, int]:
    """Lower bounds for any node that can take the pod: (MiB of its largest GPU, most MiB
    free on one of its open GPUs); the binpack walk skips the nodes below them
    (:mod:`vslice_core.ranking`).

    A GPU that takes a container is open, of a model the type selectors allow and has at
    least the MiB asked free; ``model_memory`` holds the least memory seen per model key,
    so a percent request needs at least that percentage of the smallest allowed one.
    """
    if ask.types or ask.types_exclude:
        allowed = [memory for model, memory in model_memory.items() if _type_ok(ask, model)]
    else:
        allowed = list(model_memory.values())
    smallest = min(allowed, default=0)
    size = max(ask.need_memory, smallest)
    return size, max(ask.need_memory, smallest * ask.need_percent // 100)


def quick_reject(node: NodeState, ask: Ask) -> bool:
    """True when the aggregates alone prove the pod cannot fit (never rejects a node that fits)."""
    return (
        node.open_gpus < ask.need_open
        or node.idle_gpus < ask.need_idle
        or node.max_free_memory < ask.need_memory
        or node.max_free_percent < ask.need_percent
        or node.max_free_cores < ask.need_cores
    )


def may_fit(node: NodeState, ask: Ask) -> bool:
    """False when some container finds fewer GPUs than it asks that could each take it alone.

    Each test is one of :func:`gpu_reason`'s checks against the node as it is, and the pod's
    own containers only ever take more, so a node this rejects cannot fit; what it leaves out
    (type and UUID selectors, NUMA, quota) :func:`evaluate` checks. O(open GPUs): it spares
    the full evaluation of the many nodes whose free memory and free cores are on different
    GPUs, which the node-wide maxima of :func:`quick_reject` let through.
    """
    free = node.free
    for count, memory, percent, cores, idle_only in ask.floors:
        able = 0
        for gpu_memory, gpu_percent, gpu_cores, idle in free:
            if (
                gpu_memory >= memory
                and gpu_percent >= percent
                and gpu_cores >= cores
                and (idle or not idle_only)
            ):
                able += 1
        if able < count:
            return False
    return True


# Usage the pod itself adds on a node while it is being placed: uuid -> [slots, MiB, cores].
Delta = dict[str, list[int]]


def gpu_reason(gpu: GpuState, want: Want, ask: Ask, extra: Sequence[int] | None) -> str | None:
    """The first check this GPU fails for this container, or None when it can take it."""
    if not gpu.healthy:
        return "unhealthy"
    if gpu.cordoned:
        return "cordoned"
    if (ask.types or ask.types_exclude) and not _type_ok(ask, gpu.model_key):
        return "type_mismatch"
    if (ask.uuids is not None and gpu.uuid not in ask.uuids) or gpu.uuid in ask.uuids_exclude:
        return "uuid_mismatch"
    slots, memory, cores = gpu.used_slots, gpu.used_memory, gpu.used_cores
    if extra is not None:
        slots, memory, cores = slots + extra[0], memory + extra[1], cores + extra[2]
    if slots >= gpu.slots:
        return "slots_exhausted"
    busy = slots > 0 or memory > 0 or cores > 0
    if busy and ask.gpu_policy == "mutex":
        return "mutex_busy"
    return _share_reason(gpu, want, memory, cores, busy)


def _share_reason(gpu: GpuState, want: Want, memory: int, cores: int, busy: bool) -> str | None:
    if want.memory_on(gpu) > gpu.memory - memory:
        return "insufficient_memory"
    if want.cores > gpu.cores - cores:
        return "insufficient_cores"
    if want.exclusive and busy:
        return "exclusive_conflict"
    if want.cores == 0 and cores >= gpu.cores:
        return "cores_exhausted"
    return None


@dataclass(slots=True)
class Outcome:
    """What :func:`evaluate` found on one node."""

    fits: bool
    reasons: dict[str, int] = field(default_factory=dict)
    grants: dict[int, list[tuple[GpuState, int]]] = field(default_factory=dict)
    charges: dict[str, list[int]] = field(default_factory=dict)


def evaluate(node: NodeState, ask: Ask, room: tuple[int, int, int] | None) -> Outcome:
    """Place every container of the pod on this node, or say why it cannot go there.

    ``room`` is what the namespace quota still allows (MiB, cores, GPU slices), None = no quota.
    """
    delta: Delta = {}
    grants: dict[int, list[tuple[GpuState, int]]] = {}
    ordered = [w for w in ask.wants if not w.init] + [w for w in ask.wants if w.init]
    init_peak: Delta = {}
    for want in ordered:
        reasons: dict[str, int] = {}
        chosen = _place(node, want, ask, delta, reasons)
        if chosen is None:
            return Outcome(fits=False, reasons=reasons)
        grants[want.position] = [(gpu, want.memory_on(gpu)) for gpu in chosen]
        target = init_peak if want.init else delta
        for gpu in chosen:
            _charge(target, gpu.uuid, want.memory_on(gpu), want.cores, add=not want.init)
    charges = _collapse(delta, init_peak)
    if room is not None and not _within(charges, room):
        # The charges stay with the answer: why-not texts say how far past the quota it is.
        return Outcome(fits=False, reasons={"quota_exceeded": 1}, charges=charges)
    return Outcome(fits=True, grants=grants, charges=charges)


def _charge(target: Delta, uuid: str, memory: int, cores: int, *, add: bool) -> None:
    entry = target.setdefault(uuid, [0, 0, 0])
    if add:
        entry[0] += 1
        entry[1] += memory
        entry[2] += cores
    else:
        entry[0] = max(entry[0], 1)
        entry[1] = max(entry[1], memory)
        entry[2] = max(entry[2], cores)


def _collapse(apps: Delta, inits: Delta) -> dict[str, list[int]]:
    """Per GPU, the larger of the app sum and the init peak, per dimension."""
    charges = {uuid: list(usage) for uuid, usage in apps.items()}
    for uuid, peak in inits.items():
        entry = charges.setdefault(uuid, [0, 0, 0])
        charges[uuid] = [max(a, b) for a, b in zip(entry, peak, strict=True)]
    return charges


def charge_totals(charges: dict[str, list[int]]) -> tuple[int, int, int]:
    """What a pod's charges count against its namespace quota: (MiB, cores, GPU slices)."""
    slots = sum(c[0] for c in charges.values())
    memory = sum(c[1] for c in charges.values())
    cores = sum(c[2] for c in charges.values())
    return memory, cores, slots


def _within(charges: dict[str, list[int]], room: tuple[int, int, int]) -> bool:
    memory, cores, slots = charge_totals(charges)
    return memory <= room[0] and cores <= room[1] and slots <= room[2]


def _place(
    node: NodeState, want: Want, ask: Ask, delta: Delta, reasons: dict[str, int]
) -> list[GpuState] | None:
    """The GPUs this container gets on the node (counting reasons for the others), or None."""
    passing: list[GpuState] = []
    for gpu in node.gpus:
        reason = gpu_reason(gpu, want, ask, None if want.init else delta.get(gpu.uuid))
        if reason is None:
            passing.append(gpu)
        else:
            reasons[reason] = reasons.get(reason, 0) + 1
    if ask.numa_bind and len(passing) >= want.count:
        passing = _same_numa(_ordered(node, passing, want, ask, delta), want.count, reasons)
    if len(passing) < want.count:
        # Every GPU rejected already says why; the node-level reason is for the rest:
        # some passed but not enough, or the node has too few GPUs to begin with.
        if passing or len(node.gpus) < want.count:
            reasons["too_few_gpus"] = 1
        return None
    return _choose(node, passing, want, ask, delta)


def _same_numa(ordered: list[GpuState], count: int, reasons: dict[str, int]) -> list[GpuState]:
    """Keep the NUMA node of the best-ranked GPU that has enough candidates; reject the rest."""
    sizes: dict[int, int] = {}
    for gpu in ordered:
        sizes[gpu.numa] = sizes.get(gpu.numa, 0) + 1
    numa = next((gpu.numa for gpu in ordered if sizes[gpu.numa] >= count), None)
    kept = [gpu for gpu in ordered if gpu.numa == numa]
    rejected = len(ordered) - len(kept)
    if rejected:
        reasons["numa_mismatch"] = reasons.get("numa_mismatch", 0) + rejected
    return sorted(kept, key=lambda g: g.index)


def _ordered(
    node: NodeState, gpus: list[GpuState], want: Want, ask: Ask, delta: Delta
) -> list[GpuState]:
    """The GPUs in the order the GPU policy prefers them (ties: lower index)."""
    policy = ask.gpu_policy
    if policy == "topology" and want.count == 1:
        return sorted(gpus, key=lambda g: (_link_sum(node, g), g.index))
    if policy == "binpack":
        return sorted(gpus, key=lambda g: _best_fit(g, want, delta))
    if policy != "spread":
        return sorted(gpus, key=lambda g: (want.init and g.uuid not in delta, g.index))

    def key(gpu: GpuState) -> tuple[bool, float, int, int, int]:
        extra = delta.get(gpu.uuid, (0, 0, 0))
        load = (gpu.used_memory + extra[1]) / gpu.memory
        slots, cores = gpu.used_slots + extra[0], gpu.used_cores + extra[2]
        preferred = want.init and gpu.uuid not in delta
        return (preferred, load, slots, cores, gpu.index)

    return sorted(gpus, key=key)


def _best_fit(gpu: GpuState, want: Want, delta: Delta) -> tuple[bool, int, int, int, int]:
    """Binpack's GPU key: the least memory left after the slice (MiB, not share), then the
    most slices, then the fewest cores left, then the lower index.

    By share, a slice an L4 can hold went to a fuller-by-share A100 beside it and cut into
    room only an A100 has; best fit leaves the largest holes whole. On GPUs of one size and
    core count it is the share order (HAMi's binpack rule as vslice renders it) exactly.
    """
    extra = delta.get(gpu.uuid, (0, 0, 0))
    left = gpu.memory - gpu.used_memory - extra[1] - want.memory_on(gpu)
    slots, cores_left = gpu.used_slots + extra[0], gpu.cores - gpu.used_cores - extra[2]
    return (want.init and gpu.uuid not in delta, left, -slots, cores_left, gpu.index)


def _link_sum(node: NodeState, gpu: GpuState) -> int:
    return sum(node.link(gpu.uuid, other.uuid) for other in node.gpus if other is not gpu)


def _choose(
    node: NodeState, passing: list[GpuState], want: Want, ask: Ask, delta: Delta
) -> list[GpuState]:
    if ask.gpu_policy == "topology" and want.count > 1:
        return _best_linked(node, sorted(passing, key=lambda g: g.index), want.count)
    return sorted(_ordered(node, passing, want, ask, delta)[: want.count], key=lambda g: g.index)


def _set_score(node: NodeState, gpus: Sequence[GpuState]) -> int:
    return sum(node.link(a.uuid, b.uuid) for a, b in itertools.combinations(gpus, 2))


def _best_linked(node: NodeState, gpus: list[GpuState], count: int) -> list[GpuState]:
    """The set with the highest sum of pair scores; ties go to the lowest indices."""
    if math.comb(len(gpus), count) <= _MAX_TOPOLOGY_SETS:
        best = max(
            itertools.combinations(gpus, count),
            key=lambda combo: _set_score(node, combo),
        )
        return list(best)
    return _grown_set(node, gpus, count)


def _grown_set(node: NodeState, gpus: list[GpuState], count: int) -> list[GpuState]:
    """Greedy: from each seed, add the GPU best linked to the set so far; keep the best set."""
    best: list[GpuState] = []
    best_score = -1
    for seed in gpus:
        chosen = [seed]
        while len(chosen) < count:
            rest = [g for g in gpus if g not in chosen]
            chosen.append(max(rest, key=lambda g: sum(node.link(g.uuid, c.uuid) for c in chosen)))
        score = _set_score(node, chosen)
        if score > best_score:
            best, best_score = sorted(chosen, key=lambda g: g.index), score
    return best


def node_score(node: NodeState, policy: str) -> float:
    """0..10, higher is preferred: binpack favours full nodes, spread empty ones (the share of
    memory in use, as HAMi's). Binpack ranks by the size of a node's largest GPU first and by
    this score among nodes of one size (:mod:`vslice_core.ranking`)."""
    load = node.load
    return round(10 * (load if policy == "binpack" else 1 - load), 4)
