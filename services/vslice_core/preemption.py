"""Priority preemption: which running pods to evict so that a pending GPU pod fits.

A pending pod that fits nowhere may take room from pods of *strictly lower* priority whose
PodDisruptionBudget allows their eviction. For one node, :func:`victims_on` answers with the
set to evict, chosen in this order:

1. the fewest pods;
2. then the lowest priorities: the sets' priorities are compared highest first, so a set
   whose most important victim is less important wins (as kube-scheduler does);
3. then the youngest: start times are compared oldest first, so the set whose longest-running
   victim started latest wins (the least running time is thrown away).

Across nodes, :func:`plan_preemption` picks the node whose set is best by the same order;
equal sets go to the node listed first (the caller lists them in its node policy's order).
A pod whose ``preemptionPolicy`` is ``Never`` evicts nothing, ever.

"Fits" is the placement engine's own answer (:func:`vslice_core.placement.evaluate`, after
its cheap :func:`~vslice_core.placement.quick_reject` and
:func:`~vslice_core.placement.may_fit` filters) on the node as it would be without the
victims, so an eviction never makes room the extender would then refuse. What a victim gives
back is what the ledger charges for its allocation (:func:`vslice_core.ledger.charges`);
usage the ledger counts for a pod beyond that (an unproven allocation) is not counted as
freed, which can only make the answer more cautious.

The search is exact and bounded. Only pods that hold a GPU the pending pod may use (or that
give back quota the pod needs) can matter, and a node holds a few dozen pods at most. If
freeing every candidate at once does not make the pod fit, the node is refused straight away
with the numbers of that state. Otherwise sets are tried by increasing size, starting at a
lower bound from the engine's own per-GPU floors (:func:`~vslice_core.placement.may_fit`):
each GPU the pod needs must lose enough of its pods to pass them. Within a size, sets come in
colex order over the candidates sorted cheapest first, where the highest priority of a set
never falls, so the search stops as soon as no later set can beat the best found.

Bound: at most :data:`SEARCH_LIMIT` sets per node. When the sets of the next size would take
it past that, the search turns greedy instead of trying some of them: it grows a set in two
orders (cheapest first; GPU by GPU, largest slices first), drops from each every pod it can
spare, costliest first, and keeps the better. Such an answer fits but may not be the best,
and says so (``exact=False`` and its reason).

The refusal shortcut assumes that freeing room never turns a fit into a misfit: true of every
per-GPU check the engine makes; a pod of several containers, which the engine places greedily
one after the other, could in rare cases break it, and then the node is refused (no pod is
evicted for nothing). The minimal-size answer does not depend on it.

Every refusal carries a sentence with numbers, rendered with :mod:`vslice_core.whynot`'s words.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

from vslice_core.headroom import node_room, usable
from vslice_core.ledger import allocation_totals, charges
from vslice_core.model import (
    REASONS,
    Allocation,
    GpuUsage,
    NodeInventory,
    NodeVerdict,
    PodRequest,
    QuotaCheck,
    QuotaUsage,
)
from vslice_core.placement import (
    Ask,
    Floor,
    GpuState,
    NodeState,
    apply_usage,
    charge_totals,
    compile_request,
    evaluate,
    may_fit,
    node_state,
    quick_reject,
)
from vslice_core.quantities import format_mib
from vslice_core.whynot import describe_request, node_line

PreemptionPolicy = Literal["PreemptLowerPriority", "Never"]
PREEMPTION_POLICIES: Final[tuple[str, ...]] = ("Never", "PreemptLowerPriority")

SEARCH_LIMIT: Final = 10_000
"""Sets tried on one node before the search turns greedy. With up to 13 candidate pods every
set fits in it; with 40, every set of up to 2 pods and most of 3 (the early stop cuts more)."""

_UNLIMITED = 1 << 62

# A victim set's rank, lower is better: (pods, priorities highest first, -starts oldest first).
Rank = tuple[int, tuple[int, ...], tuple[float, ...]]


@dataclass(frozen=True, slots=True)
class RunningPod:
    """A pod holding slices on a node, as preemption needs to know it."""

    uid: str
    namespace: str
    name: str
    priority: int  # the pod's Kubernetes priority (spec.priority), not nvidia.com/priority
    started_s: float  # when it started, seconds on any one clock: a later start is younger
    evictable: bool  # its PodDisruptionBudgets (if any) allow evicting it now
    allocation: Allocation

    @property
    def label(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class NodeView:
    """One node as the ledger sees it: its inventory, the usage counted on each GPU
    (:meth:`vslice_core.ledger.Ledger.gpu_usage`: base usage plus every recorded allocation)
    and the pods whose allocations are part of that usage."""

    inventory: NodeInventory
    used: Mapping[str, GpuUsage]
    pods: Sequence[RunningPod] = ()

    def __post_init__(self) -> None:
        name = self.inventory.name
        stray = next((p for p in self.pods if p.allocation.node != name), None)
        if stray is not None:
            raise ValueError(
                f"pods[].allocation.node must be {name!r}, got {stray.allocation.node!r} "
                f"for {stray.label}"
            )

    @property
    def name(self) -> str:
        return self.inventory.name


@dataclass(frozen=True, slots=True)
class NodeVictims:
    """One node's answer: the pods to evict (``()`` when the pod fits as it is), or None
    with the reason in ``reason``."""

    node: str
    victims: tuple[RunningPod, ...] | None
    reason: str
    exact: bool = True  # False: the greedy fallback chose (fits, maybe not the smallest)
    searched: int = 0  # sets tried
    outranked: bool = False  # only sets better than another node's were looked for: none was

    @property
    def fits(self) -> bool:
        return self.victims is not None

    @property
    def rank(self) -> Rank | None:
        return None if self.victims is None else rank(self.victims)


@dataclass(frozen=True, slots=True)
class Preemption:
    """The answer across nodes: where the pod goes and whom it evicts there (``node`` None:
    nowhere), with every node's own answer."""

    node: str | None
    victims: tuple[RunningPod, ...]
    headline: str
    nodes: dict[str, NodeVictims] = field(default_factory=dict)

    @property
    def fits(self) -> bool:
        return self.node is not None

    def text(self) -> str:
        """The headline, then one line per node (ending without a newline)."""
        return "\n".join([self.headline, *(f"  {n.reason}" for n in self.nodes.values())])

    def __str__(self) -> str:
        return self.text()


def rank(pods: Sequence[RunningPod]) -> Rank:
    """The order victim sets are chosen by, lower first (see the module docstring)."""
    priorities = tuple(sorted((p.priority for p in pods), reverse=True))
    starts = tuple(-s for s in sorted(p.started_s for p in pods))
    return (len(pods), priorities, starts)


def victims_on(
    view: NodeView,
    request: PodRequest,
    priority: int,
    *,
    quota: QuotaCheck | None = None,
    beat: Rank | None = None,
    limit: int = SEARCH_LIMIT,
) -> NodeVictims:
    """The pods of lower priority to evict from this node so that ``request`` fits there.

    ``priority`` is the pending pod's Kubernetes priority. ``quota``: the pod's namespace
    quota with what counts against it now (victims of that namespace give theirs back).
    ``beat``: only a set ranked better than this counts (what another node already offers).
    """
    return _Search(view, request, priority, quota, limit).run(beat)


def plan_preemption(
    views: Sequence[NodeView],
    request: PodRequest,
    priority: int,
    *,
    policy: PreemptionPolicy = "PreemptLowerPriority",
    quota: QuotaCheck | None = None,
    limit: int = SEARCH_LIMIT,
) -> Preemption:
    """The node whose victim set is best (fewest pods, lowest priorities, youngest, then the
    order of ``views``), and that set; nothing when ``policy`` is ``Never``."""
    if policy == "Never":
        return Preemption(
            node=None,
            victims=(),
            headline="preemptionPolicy is Never: the pod waits for room and evicts no pod",
        )
    if policy not in PREEMPTION_POLICIES:
        raise ValueError(
            f"preemptionPolicy must be one of {', '.join(PREEMPTION_POLICIES)}, got {policy!r}"
        )
    answers: dict[str, NodeVictims] = {}
    best: tuple[Rank, NodeVictims] | None = None
    for view in views:
        beat = None if best is None else best[0]
        answer = victims_on(view, request, priority, quota=quota, beat=beat, limit=limit)
        if answer.outranked and best is not None:
            answer = _outranked(answer, best[1])
        answers[view.name] = answer
        found = answer.rank
        if found is not None and (best is None or found < best[0]):
            best = (found, answer)
    return _decided(None if best is None else best[1], answers, request, priority)


def _outranked(answer: NodeVictims, best: NodeVictims) -> NodeVictims:
    """A node searched only for sets better than ``best``'s, and none was."""
    victims = best.victims or ()
    if victims:
        offer = f"{_plural(len(victims), 'pod')}, {_priorities(victims)}"
        reason = f"{answer.node}: no set here beats {best.node}'s ({offer})"
    else:
        reason = f"{answer.node}: not searched, {best.node} takes the pod without evicting"
    return NodeVictims(answer.node, None, reason, answer.exact, answer.searched, True)


def _decided(
    best: NodeVictims | None,
    answers: dict[str, NodeVictims],
    request: PodRequest,
    priority: int,
) -> Preemption:
    if best is None or best.victims is None:
        headline = (
            f"no node makes room for {describe_request(request)} by evicting pods of "
            f"priority below {priority}"
        )
        return Preemption(node=None, victims=(), headline=headline, nodes=answers)
    if not best.victims:
        headline = f"fits on {best.node} without evicting any pod"
    else:
        listed = ", ".join(f"{p.label} (priority {p.priority})" for p in best.victims)
        headline = f"evict {_plural(len(best.victims), 'pod')} on {best.node}: {listed}"
    return Preemption(node=best.node, victims=best.victims, headline=headline, nodes=answers)


class _Search:
    """The search on one node: one engine node state, victims freed and restored in place."""

    def __init__(
        self,
        view: NodeView,
        request: PodRequest,
        priority: int,
        quota: QuotaCheck | None,
        limit: int,
    ) -> None:
        self.view, self.request, self.priority, self.limit = view, request, priority, limit
        self.ask: Ask = compile_request(request)
        self.state: NodeState = node_state(view.inventory, dict(view.used))
        self.quota = quota if quota is not None and quota.namespace == request.namespace else None
        lower = [p for p in view.pods if p.priority < priority]
        self.kept_priority = len(view.pods) - len(lower)
        allowed = [p for p in lower if p.evictable]
        self.kept_budget = len(lower) - len(allowed)
        # Cheapest first: lowest priority, then youngest; the uid keeps the order total.
        allowed.sort(key=lambda p: (p.priority, -p.started_s, p.uid))
        self.allowed = allowed
        self.frees = [self._frees(p) for p in allowed]
        self.candidates = [i for i, p in enumerate(allowed) if self._matters(p, self.frees[i])]
        # What each candidate gives back to the pod's namespace quota (MiB, cores, slices).
        self.gives = [self._gives(p) for p in allowed]
        self.searched = 0
        self.gave_up = False  # the exact search stopped at SEARCH_LIMIT

    # ----- what a victim gives back ---------------------------------------------------
    def _frees(self, pod: RunningPod) -> list[tuple[GpuState, GpuUsage]]:
        by_uuid = self.state.by_uuid
        return [(by_uuid[u], c) for u, c in charges(pod.allocation).items() if u in by_uuid]

    def _matters(self, pod: RunningPod, frees: list[tuple[GpuState, GpuUsage]]) -> bool:
        """Whether evicting it can change the engine's answer: the engine rejects a GPU the
        pod may not use before it looks at its usage, so only those GPUs and the quota count.
        A minimal set never holds a pod that does not matter."""
        if self.quota is not None and pod.namespace == self.request.namespace:
            return True
        return any(usable(gpu, self.ask) for gpu, _ in frees)

    def _gives(self, pod: RunningPod) -> tuple[int, int, int]:
        if self.quota is None or pod.namespace != self.request.namespace:
            return (0, 0, 0)
        totals = allocation_totals(pod.allocation)
        return (totals.memory_mib, totals.cores, totals.gpus)

    def _room(self, chosen: Sequence[int]) -> tuple[int, int, int] | None:
        """What the namespace quota allows with ``chosen`` gone (None: no quota)."""
        if self.quota is None:
            return None
        back = [sum(self.gives[i][d] for i in chosen) for d in range(3)]
        limits, used = self.quota.limits, self.quota.used
        return (
            _left(limits.memory_mib, used.memory_mib - back[0]),
            _left(limits.cores, used.cores - back[1]),
            _left(limits.gpus, used.gpus - back[2]),
        )

    def fits(self, chosen: Sequence[int]) -> bool:
        """The engine's answer on the node without these candidates."""
        self._free(chosen, -1)
        try:
            ask, state = self.ask, self.state
            if quick_reject(state, ask) or not may_fit(state, ask):
                return False
            return evaluate(state, ask, self._room(chosen)).fits
        finally:
            self._free(chosen, 1)

    def _free(self, chosen: Sequence[int], sign: int) -> None:
        for i in chosen:
            for gpu, usage in self.frees[i]:
                apply_usage(gpu, usage, sign)
        self.state.refresh()

    def _rank(self, chosen: Sequence[int]) -> Rank:
        return rank([self.allowed[i] for i in chosen])

    # ----- the search -----------------------------------------------------------------
    def run(self, beat: Rank | None) -> NodeVictims:
        name = self.view.name
        if self.fits(()):
            return NodeVictims(name, (), f"{name}: fits without evicting any pod", searched=1)
        if not self.allowed:
            return self._refuse(self._nothing_to_evict())
        if not self.fits(self.candidates):
            return self._refuse(self._still_short())
        found = self._exact(beat)
        if found is None and self.gave_up:
            return self._greedy(beat)
        if found is None:
            return self._beaten()
        return self._answer(found, exact=True)

    def _exact(self, beat: Rank | None) -> list[int] | None:
        """The best set by increasing size; None when none beats ``beat`` or past the limit."""
        candidates = self.candidates
        for size in range(max(1, self._least_size()), len(candidates) + 1):
            if beat is not None and size > beat[0]:
                return None
            if math.comb(len(candidates), size) > self.limit - self.searched:
                # Trying only part of this size could not prove the best set: go greedy now.
                self.gave_up = True
                return None
            best: list[int] | None = None
            best_rank = beat
            for top in range(size - 1, len(candidates)):
                # Sets whose most costly member is candidates[top] all have its priority as
                # their highest: once that is above the best's, no later set can win.
                if (
                    best_rank is not None
                    and best_rank[0] == size
                    and self.allowed[candidates[top]].priority > best_rank[1][0]
                ):
                    break
                for rest in _colex(size - 1, top):
                    self.searched += 1
                    chosen = [candidates[j] for j in (*rest, top)]
                    this = self._rank(chosen)
                    if best_rank is not None and this >= best_rank:
                        continue
                    if self.fits(chosen):
                        best, best_rank = chosen, this
            if best is not None:
                return best
        return None

    def _least_size(self) -> int:
        """A lower bound on the size of any set that makes the pod fit, from may_fit's floors.

        Each container needs ``count`` GPUs that could each take it alone. A GPU needs at least
        :meth:`_gpu_need` of its own pods gone for that, and one victim is on at most ``span``
        GPUs, so a set needs the ``count``-th smallest need and the sum of the ``count``
        smallest needs over ``span``, whichever is more.
        """
        span = max((len(self.frees[i]) for i in self.candidates), default=1) or 1
        least = 0
        for floor in self.ask.floors:
            count = floor[0]
            needs = sorted(self._needs(floor).values())
            if len(needs) < count:
                return len(self.candidates) + 1
            smallest = needs[:count]
            least = max(least, smallest[-1], -(-sum(smallest) // span))
        return least

    def _needs(self, floor: Floor) -> dict[str, int]:
        """Per GPU UUID, :meth:`_gpu_need` for this floor."""
        on_gpu: dict[str, list[GpuUsage]] = {}
        for i in self.candidates:
            for gpu, usage in self.frees[i]:
                on_gpu.setdefault(gpu.uuid, []).append(usage)
        return {g.uuid: self._gpu_need(g, floor, on_gpu.get(g.uuid, [])) for g in self.state.gpus}

    def _gpu_need(self, gpu: GpuState, floor: Floor, frees: list[GpuUsage]) -> int:
        """The fewest of the pods on this GPU whose eviction lets it pass the floor (a bound:
        each dimension is counted on its own); a large number when none can."""
        never = len(self.candidates) + 1
        if not usable(gpu, self.ask):
            return never
        _, memory, percent, cores, idle_only = floor
        if idle_only:
            deficits = (gpu.used_slots, gpu.used_memory, gpu.used_cores)
        else:
            deficits = (
                gpu.used_slots - gpu.slots + 1,
                max(memory, gpu.memory * percent // 100) - (gpu.memory - gpu.used_memory),
                cores - (gpu.cores - gpu.used_cores),
            )
        need = 0
        for dimension, deficit in enumerate(deficits):
            if deficit <= 0:
                continue
            amounts = sorted(
                ((u.slots, u.memory_mib, u.cores)[dimension] for u in frees), reverse=True
            )
            freed = taken = 0
            for amount in amounts:
                if freed >= deficit:
                    break
                freed, taken = freed + amount, taken + 1
            if freed < deficit:
                return never
            need = max(need, taken)
        return need

    def _greedy(self, beat: Rank | None) -> NodeVictims:
        """Past the limit: two greedy orders, each adding candidates until the pod fits and
        then dropping the costliest it can spare; the better set wins. Cheapest first keeps
        priorities low; GPU by GPU (those needing the fewest evictions first, the largest
        slices first on each) keeps the set small when the pod needs room on several GPUs.
        Freeing every candidate fits (checked before), so both find a set."""
        sets = [self._grown(self.candidates), self._grown(self._by_gpu())]
        chosen = min(sets, key=self._rank)
        if beat is not None and self._rank(chosen) >= beat:
            return self._beaten()
        return self._answer(chosen, exact=False)

    def _grown(self, order: Sequence[int]) -> list[int]:
        chosen: list[int] = []
        for i in order:
            chosen.append(i)
            if self.fits(chosen):
                break
        for i in sorted(chosen, reverse=True):  # costliest first: the candidates are sorted
            trial = [j for j in chosen if j != i]
            if self.fits(trial):
                chosen = trial
        return chosen

    def _by_gpu(self) -> list[int]:
        """The candidates GPU by GPU: the GPUs needing the fewest evictions for the container
        asking the most GPUs first; on each, the largest slices first."""
        widest = max(self.ask.floors, key=lambda floor: floor[0])
        needs = self._needs(widest)
        order: list[int] = []
        for gpu in sorted(self.state.gpus, key=lambda g: (needs[g.uuid], g.index)):
            here = [i for i in self.candidates if any(g is gpu for g, _ in self.frees[i])]
            here.sort(key=lambda i: -sum(u.memory_mib for _, u in self.frees[i]))
            order.extend(i for i in here if i not in order)
        return order

    # ----- the words --------------------------------------------------------------------
    def _answer(self, chosen: list[int], *, exact: bool) -> NodeVictims:
        pods = tuple(self.allowed[i] for i in sorted(chosen))
        freed = format_mib(sum(u.memory_mib for i in chosen for _, u in self.frees[i]))
        reason = (
            f"{self.view.name}: evicting {_plural(len(pods), 'pod')} "
            f"({', '.join(p.label for p in pods)}; {_priorities(pods)}; {freed}) makes room"
        )
        if not exact:
            reason += (
                f" (past {self.limit} sets tried the search went greedy: "
                "a smaller or better set may exist)"
            )
        return NodeVictims(self.view.name, pods, reason, exact, self.searched)

    def _refuse(self, reason: str) -> NodeVictims:
        return NodeVictims(self.view.name, None, reason, searched=self.searched)

    def _beaten(self) -> NodeVictims:
        reason = f"{self.view.name}: no set beats the one another node offers"
        return NodeVictims(self.view.name, None, reason, searched=self.searched, outranked=True)

    def _nothing_to_evict(self) -> str:
        name = self.view.name
        if not self.view.pods:
            return f"{name}: no pod runs here to evict, and {self._verdict_here(())}"
        parts = []
        if self.kept_priority:
            parts.append(
                f"{_plural(self.kept_priority, 'pod')} of priority {self.priority} or more"
            )
        if self.kept_budget:
            parts.append(
                f"{_plural(self.kept_budget, 'pod')} of lower priority kept by a disruption budget"
            )
        return f"{name}: no pod here may be evicted ({' and '.join(parts)})"

    def _still_short(self) -> str:
        allowed = self.allowed
        freed = format_mib(sum(u.memory_mib for f in self.frees for _, u in f))
        kept = self.kept_priority + self.kept_budget
        stays = f"; {_plural(kept, 'other pod')} must stay" if kept else ""
        return (
            f"{self.view.name}: evicting every pod it may ({_plural(len(allowed), 'pod')} "
            f"below priority {self.priority}, {freed}{stays}) still leaves no room for "
            f"{describe_request(self.request)}: {self._verdict_here(range(len(allowed)))}"
        )

    def _verdict_here(self, chosen: Sequence[int]) -> str:
        """The engine's reasons on the node without ``chosen``, with their numbers."""
        self._free(chosen, -1)
        try:
            outcome = evaluate(self.state, self.ask, self._room(chosen))
            room = node_room(self.state, self.ask)
        finally:
            self._free(chosen, 1)
        reasons = {code: outcome.reasons[code] for code in REASONS if code in outcome.reasons}
        charge = None
        if "quota_exceeded" in reasons:
            memory, cores, slices = charge_totals(outcome.charges)
            charge = QuotaUsage(memory_mib=memory, cores=cores, gpus=slices)
        verdict = NodeVerdict(fits=False, reasons=reasons, room=room, quota_charge=charge)
        return node_line(verdict, self.request, self._quota_after(chosen))

    def _quota_after(self, chosen: Sequence[int]) -> QuotaCheck | None:
        room = self._room(chosen)
        if self.quota is None or room is None:
            return None
        limits = self.quota.limits
        used = QuotaUsage(
            memory_mib=_used(limits.memory_mib, room[0]),
            cores=_used(limits.cores, room[1]),
            gpus=_used(limits.gpus, room[2]),
        )
        return self.quota.model_copy(update={"used": used})


PREEMPTED: Final = "Preempted"
"""The reason of the event on each victim; :func:`preempted_text` is its message."""
_PREEMPTED_BY = "evicted by vslice for "


def preempted_text(
    preemptor: str, priority: int, victim_priority: int, node: str, holds: str
) -> str:
    """The victim's event message; :func:`preemptor_of` reads the preemptor back from it (the
    SDK's ``Workload.status``), so both sides live here."""
    return (
        f"{_PREEMPTED_BY}{preemptor} (priority {priority} > {victim_priority}) on node {node}, "
        f"to free this pod's {holds}"
    )


def preemptor_of(message: str) -> str | None:
    """``namespace/name`` of the pod a ``Preempted`` event names; None for another message."""
    if not message.startswith(_PREEMPTED_BY):
        return None
    name = message.removeprefix(_PREEMPTED_BY).split(" ", 1)[0]
    return name if name.count("/") == 1 else None


def _colex(size: int, below: int) -> Iterator[tuple[int, ...]]:
    """Every ``size``-subset of ``range(below)`` in colex order (by the largest member first),
    as ascending tuples."""
    if size == 0:
        yield ()
        return
    for top in range(size - 1, below):
        for rest in _colex(size - 1, top):
            yield (*rest, top)


def _left(limit: int | None, used: int) -> int:
    return _UNLIMITED if limit is None else limit - used


def _used(limit: int | None, left: int) -> int:
    return 0 if limit is None else max(0, limit - left)


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def _priorities(pods: Sequence[RunningPod]) -> str:
    values = sorted({p.priority for p in pods})
    if len(values) == 1:
        return f"priority {values[0]}"
    return f"priorities {', '.join(map(str, values))}"
