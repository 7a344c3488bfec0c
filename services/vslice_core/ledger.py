"""The usage ledger: what every GPU, node and namespace has promised, kept incrementally.

The extender holds one :class:`Ledger`. Recording or releasing a pod's allocation costs time
proportional to that allocation (plus the GPUs of its node, to refresh the node's aggregates),
never to the cluster: no decision recomputes usage over all pods.

Locking: one ``threading.Lock`` guards all state. Every public method holds it from start to
end and no method calls out while holding it, so there is no lock order to get wrong: a
decision sees one consistent snapshot, and :meth:`Ledger.try_commit` / :meth:`Ledger.reserve`
re-check capacity and record in the same critical section, which is what makes two
concurrent binds unable to over-allocate a GPU.

Allocations whose node disappears are kept (with their namespace usage) until released;
when the node comes back, :meth:`Ledger.set_node` re-applies them.

What the ledger cannot vouch for still counts, and never frees room:

- an *unproven* allocation (:meth:`Ledger.add` with ``proven=False``: no valid proof that
  vslice's extender wrote it) is recorded beside the pod's proven one, so editing a pod's
  allocation down books more, never less, until the pod is gone;
- counting what nobody checked can push a GPU past its memory, cores or slots: such a GPU is
  *over-booked* (:meth:`Ledger.overbooked`), and the engine's own capacity checks give it
  nothing more until the usage is back within capacity;
- a node can be *blocked* (:meth:`Ledger.block_node`, e.g. a running pod's allocation there
  cannot be read, so which GPUs it holds is unknown): no new slice is placed on it until every
  block is lifted.

A full list of nodes and bound pods (start-up, a re-list, a new leader term's re-read) is fed
inside :meth:`Ledger.bulk`: every change is applied as usual, but the nodes are ranked once at
the end instead of once per pod, which is most of the cost of a large list.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from vslice_core.errors import InvalidRequest, NoFit
from vslice_core.headroom import Candidate, node_room, suggest
from vslice_core.model import (
    REASONS,
    Allocation,
    ContainerAllocation,
    Decision,
    GpuGrant,
    GpuUsage,
    NamespaceQuota,
    NodeInventory,
    NodeVerdict,
    PodRequest,
    QuotaCheck,
    QuotaLimits,
    QuotaUsage,
    Suggestion,
)
from vslice_core.placement import (
    Ask,
    GpuState,
    NodeState,
    Outcome,
    apply_usage,
    charge_totals,
    compile_request,
    evaluate,
    may_fit,
    node_score,
    node_state,
    quick_reject,
    types_match,
    walk_floors,
)
from vslice_core.ranking import NodeRanking

BLOCKED = "node_blocked"
"""Reason code of a node that takes nothing new until its blocks are lifted (extender only)."""
_UNPROVEN = "\0unproven"  # record key suffix: never a valid pod uid


def charges(allocation: Allocation) -> dict[str, GpuUsage]:
    """What an allocation takes per GPU UUID: ``max(init peak, sum of app containers)``."""
    apps: dict[str, list[int]] = {}
    inits: dict[str, list[int]] = {}
    for container in allocation.containers:
        for grant in container.gpus:
            if container.init:
                peak = inits.setdefault(grant.uuid, [0, 0, 0])
                peak[0] = max(peak[0], 1)
                peak[1] = max(peak[1], grant.memory_mib)
                peak[2] = max(peak[2], grant.cores)
            else:
                total = apps.setdefault(grant.uuid, [0, 0, 0])
                total[0] += 1
                total[1] += grant.memory_mib
                total[2] += grant.cores
    result: dict[str, GpuUsage] = {}
    for uuid in sorted(apps.keys() | inits.keys()):
        app, init = apps.get(uuid, [0, 0, 0]), inits.get(uuid, [0, 0, 0])
        slots, memory, cores = (max(a, b) for a, b in zip(app, init, strict=True))
        result[uuid] = GpuUsage(slots=slots, memory_mib=memory, cores=cores)
    return result


@dataclass(frozen=True)
class NodeSnapshot:
    """See :meth:`Ledger.node_snapshot`."""

    inventory: NodeInventory
    used: dict[str, GpuUsage]
    held: list[tuple[str, str, Allocation]]  # (pod uid, namespace, allocation)


@dataclass(slots=True)
class _Record:
    """One pod's recorded allocation and what it charges."""

    namespace: str
    allocation: Allocation
    charges: dict[str, GpuUsage]
    exclusive: frozenset[str]  # GPUs on which a container asked for every core
    zero_cores: frozenset[str]  # GPUs on which a container asked for no cores
    totals: tuple[int, int, int]  # MiB, cores, GPU slices: what the namespace quota counts


@dataclass(frozen=True, slots=True)
class GpuView:
    """One GPU as its node advertises it and what is taken on it now (read by the metrics)."""

    uuid: str
    index: int
    model: str  # as the node's inventory writes it
    memory_mib: int
    cores: int
    slots: int
    used: GpuUsage


@dataclass(frozen=True, slots=True)
class QuotaView:
    """A namespace's GPU limits and what counts against them, exactly as the bind checks it:
    the quota's own ``used`` plus every allocation the ledger records for the namespace
    (proven, unproven and held alike)."""

    limits: QuotaLimits
    used: QuotaUsage


def _record(namespace: str, allocation: Allocation) -> _Record:
    taken = charges(allocation)
    grants = [g for c in allocation.containers for g in c.gpus]
    return _Record(
        namespace=namespace,
        allocation=allocation,
        charges=taken,
        exclusive=frozenset(g.uuid for g in grants if g.cores >= 100),
        zero_cores=frozenset(g.uuid for g in grants if g.cores == 0),
        totals=_totals(taken),
    )


def _totals(taken: Mapping[str, GpuUsage]) -> tuple[int, int, int]:
    return (
        sum(u.memory_mib for u in taken.values()),
        sum(u.cores for u in taken.values()),
        sum(u.slots for u in taken.values()),
    )


def allocation_totals(allocation: Allocation) -> QuotaUsage:
    """What an allocation counts against its namespace's quota (the bind's own count)."""
    memory, cores, slices = _totals(charges(allocation))
    return QuotaUsage(memory_mib=memory, cores=cores, gpus=slices)


class Ledger:
    """Usage per GPU, node and namespace; decisions and commits against it. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._nodes: dict[str, NodeState] = {}
        self._inventories: dict[str, NodeInventory] = {}  # as given to set_node, for reading
        self._pods: dict[str, _Record] = {}
        self._by_node: dict[str, set[str]] = {}
        self._quotas: dict[str, NamespaceQuota] = {}
        self._namespace_used: dict[str, list[int]] = {}
        self._ranking = NodeRanking()
        self._blocks: dict[str, dict[str, str]] = {}  # node -> {block key: why}
        self._over: dict[str, set[str]] = {}  # node -> uuids of its over-booked GPUs
        # The least memory seen per GPU model, for the binpack walk's first size class
        # (placement.walk_floors). Never lowered back on a node's removal: a stale entry
        # only starts a walk earlier than it could, never past a node that fits.
        self._model_memory: dict[str, int] = {}

    @contextmanager
    def bulk(self) -> Iterator[None]:
        """Apply many changes in a row (a full list of nodes or pods), ranking once at the end.

        Charges, aggregates, over-booking, blocks and quota usage change exactly as without it,
        and so does the node ranking once the block ends; only the sorting is put off. Other
        threads may call any method meanwhile: a decision sorts first, so it walks the same
        order it would have walked without the bulk load. Blocks nest.
        """
        with self._lock:
            self._ranking.defer()
        try:
            yield
        finally:
            with self._lock:
                self._ranking.resume()

    # ----- nodes and quotas -------------------------------------------------------------
    def set_node(
        self, inventory: NodeInventory, used: Mapping[str, GpuUsage] | None = None
    ) -> None:
        """Add or replace a node; known allocations on it are re-applied."""
        with self._lock:
            state = node_state(inventory, dict(used or {}))
            self._nodes[inventory.name] = state
            for gpu in state.gpus:
                if gpu.memory < self._model_memory.get(gpu.model_key, gpu.memory + 1):
                    self._model_memory[gpu.model_key] = gpu.memory
            self._inventories[inventory.name] = inventory
            for uid in sorted(self._by_node.get(inventory.name, ())):
                self._apply_charges(state, self._pods[uid], 1)
            self._over.pop(inventory.name, None)
            self._check_over(state, [gpu.uuid for gpu in state.gpus])
            state.refresh()
            self._index(state)

    def remove_node(self, name: str) -> None:
        """Forget a node; its allocations stay recorded and return with it."""
        with self._lock:
            self._unindex(name)
            self._nodes.pop(name, None)
            self._inventories.pop(name, None)
            self._over.pop(name, None)

    def set_quota(self, namespace: str, quota: NamespaceQuota | None) -> None:
        with self._lock:
            if quota is None:
                self._quotas.pop(namespace, None)
            else:
                self._quotas[namespace] = quota

    # ----- pods -------------------------------------------------------------------------
    def add(
        self,
        pod_uid: str,
        allocation: Allocation,
        namespace: str = "default",
        *,
        proven: bool = True,
    ) -> None:
        """Record a known allocation (idempotent per uid; a different one replaces it).

        ``proven=False``: an allocation vslice cannot vouch for. It is counted *in addition*
        to the pod's proven allocation (unless it is the same), replacing only an earlier
        unproven one; a proven value drops the unproven one again. No capacity check: what a
        pod holds is counted whether or not it fits (see :meth:`overbooked`).
        """
        with self._lock:
            key = pod_uid if proven else pod_uid + _UNPROVEN
            if proven:
                self._forget(pod_uid + _UNPROVEN)
            else:
                trusted = self._pods.get(pod_uid)
                if trusted and trusted.allocation == allocation:
                    self._forget(key)  # the same slices as the proven record: count them once
                    return
            current = self._pods.get(key)
            if current and current.allocation == allocation and current.namespace == namespace:
                return
            self._forget(key)
            self._remember(key, _record(namespace, allocation))

    def release(self, pod_uid: str) -> Allocation | None:
        """Give a pod's slices back (proven and unproven); returns what it held by proof
        (None if unknown)."""
        with self._lock:
            self._forget(pod_uid + _UNPROVEN)
            record = self._forget(pod_uid)
            return record.allocation if record else None

    def unproven(self, pod_uid: str) -> Allocation | None:
        """The pod's unproven allocation, if one is counted."""
        with self._lock:
            record = self._pods.get(pod_uid + _UNPROVEN)
            return record.allocation if record else None

    # ----- blocked nodes, over-booked GPUs -----------------------------------------------
    def block_node(self, node: str, key: str, why: str) -> None:
        """Place nothing new on ``node`` until :meth:`unblock` of every key (idempotent)."""
        with self._lock:
            self._unblock(key)
            self._blocks.setdefault(node, {})[key] = why
            self._unindex(node)

    def unblock(self, key: str) -> None:
        with self._lock:
            self._unblock(key)

    def blocked_nodes(self) -> dict[str, dict[str, str]]:
        """``{node: {block key: why}}`` of every blocked node."""
        with self._lock:
            return {node: dict(blocks) for node, blocks in sorted(self._blocks.items())}

    def overbooked(self) -> dict[str, dict[str, GpuUsage]]:
        """``{node: {gpu uuid: usage}}`` of every GPU whose usage exceeds its memory, cores or
        slots (only possible through allocations recorded without a capacity check)."""
        with self._lock:
            found: dict[str, dict[str, GpuUsage]] = {}
            for name, uuids in sorted(self._over.items()):
                state = self._nodes[name]
                for uuid in sorted(uuids):
                    gpu = state.by_uuid[uuid]
                    found.setdefault(name, {})[uuid] = GpuUsage(
                        slots=gpu.used_slots, memory_mib=gpu.used_memory, cores=gpu.used_cores
                    )
            return found

    def try_commit(self, pod_uid: str, allocation: Allocation, namespace: str = "default") -> None:
        """Re-check that the allocation still fits and record it, atomically; else NoFit."""
        with self._lock:
            current = self._pods.get(pod_uid)
            if current and current.allocation == allocation and current.namespace == namespace:
                return
            previous = self._forget(pod_uid)
            record = _record(namespace, allocation)
            reasons = self._commit_reasons(record)
            if reasons:
                if previous is not None:
                    self._remember(pod_uid, previous)
                raise NoFit(
                    f"pod {pod_uid} no longer fits on node {allocation.node}: "
                    + ", ".join(f"{k}={v}" for k, v in reasons.items()),
                    reasons={allocation.node: reasons},
                )
            self._remember(pod_uid, record)

    def reserve(self, request: PodRequest, node: str) -> Allocation:
        """Place the pod on that node and record it in one locked step (a bind); else NoFit."""
        if not request.uid:
            raise InvalidRequest(
                "metadata.uid must be set to reserve a pod, got ''", field="metadata.uid", value=""
            )
        ask = compile_request(request)
        with self._lock:
            # The pod's own earlier allocation, if any, must not stand in its way.
            previous = self._forget(request.uid)
            state = self._nodes.get(node)
            if state is None:
                outcome = Outcome(False, {"too_few_gpus": 1})
            elif node in self._blocks:
                outcome = Outcome(False, {BLOCKED: 1})
            else:
                outcome = self._evaluate(state, ask)
            if state is None or not outcome.fits:
                if previous is not None:
                    self._remember(request.uid, previous)
                reasons = {c: n for c, n in outcome.reasons.items() if c in (*REASONS, BLOCKED)}
                raise NoFit(
                    f"pod {request.namespace}/{request.name} does not fit on node {node}",
                    reasons={node: reasons},
                )
            allocation = _allocation(node, request, outcome)
            self._remember(request.uid, _record(request.namespace, allocation))
            return allocation

    # ----- decisions --------------------------------------------------------------------
    def decide(
        self,
        request: PodRequest,
        candidates: Iterable[str] | None = None,
        *,
        explain: bool = False,
        suggest: bool = False,
    ) -> Decision:
        """The best node for the pod among ``candidates`` (None = all) and its allocation.

        ``explain=False`` stops at the first fitting node in policy order and reports only
        that node's verdict (or every candidate's exact verdict when nothing fits);
        ``explain=True`` evaluates and reports every candidate. Both choose the same node.
        A node that cannot take the pod carries its :class:`NodeRoom` (the numbers behind
        its reasons). ``suggest=True`` adds, when nothing fits, changed requests that fit
        now (:func:`vslice_core.headroom.suggest`; what-if answers, not the bind path).
        """
        ask = compile_request(request)
        names = None if candidates is None else list(candidates)
        with self._lock:
            if not explain:
                found = self._first_fit(ask, names)
                if found is not None:
                    state, outcome = found
                    verdict = NodeVerdict(fits=True, score=node_score(state, ask.node_policy))
                    return Decision(
                        node=state.name,
                        allocation=_allocation(state.name, request, outcome),
                        nodes={state.name: verdict},
                    )
            unique = None if names is None else list(dict.fromkeys(names))
            decision = self._explain(request, ask, unique)
            if suggest and not decision.fits:
                decision = decision.model_copy(
                    update={"suggestions": self._suggestions(request, unique)}
                )
            return decision

    def _suggestions(self, request: PodRequest, names: list[str] | None) -> list[Suggestion]:
        room = self._room(request.namespace)
        order = {name: rank for rank, name in enumerate(self._ranking.walk(request.node_policy))}
        wanted = self._nodes if names is None else names
        candidates = [
            Candidate(self._nodes[name], room)
            for name in wanted
            if name in self._nodes and name not in self._blocks
        ]
        return suggest(request, candidates, lambda name: order.get(name, len(order)))

    def _first_fit(self, ask: Ask, names: list[str] | None) -> tuple[NodeState, Outcome] | None:
        """The first node in policy order among ``names`` (None: all) that fits, and how.

        A few candidates are sorted directly. Many are not hashed into a set up front: that
        costs more than the rest of a typical decision, and the first node that fits is usually
        a candidate, which one scan of the list (string compares, no hashing) confirms. Only
        when a scan misses is the set built; from then on it filters the walk.
        """
        room = self._room(ask.namespace)
        models: dict[frozenset[str], bool] = {}
        few = names is not None and self._ranking.few(len(names))
        unfiltered = None if few else names  # candidates the walk itself does not filter by
        wanted: set[str] | None = None
        nodes = self._nodes
        size, free = (
            walk_floors(ask, self._model_memory) if ask.node_policy == "binpack" else (0, 0)
        )
        walk = self._ranking.walk(
            ask.node_policy, names if few else None, ask.need_idle, size, free
        )
        for name in walk:
            if wanted is not None and name not in wanted:
                continue
            state = nodes[name]
            outcome = None if quick_reject(state, ask) else _fitting(state, ask, room, models)
            if outcome is None:
                continue
            if unfiltered is None or wanted is not None or name in unfiltered:
                return state, outcome
            wanted = set(unfiltered)
        return None

    def _explain(self, request: PodRequest, ask: Ask, names: list[str] | None) -> Decision:
        room = self._room(ask.namespace)
        verdicts: dict[str, NodeVerdict] = {}
        best: tuple[NodeState, Outcome] | None = None
        order = {name: rank for rank, name in enumerate(self._ranking.walk(ask.node_policy))}
        for name in sorted(self._nodes) if names is None else names:
            state = self._nodes.get(name)
            if state is None:
                verdicts[name] = NodeVerdict(fits=False, reasons={"too_few_gpus": 1})
                continue
            if name in self._blocks:
                verdicts[name] = NodeVerdict(fits=False, reasons={BLOCKED: 1})
                continue
            outcome = evaluate(state, ask, room)
            score = node_score(state, ask.node_policy) if outcome.fits else None
            reasons = {code: outcome.reasons[code] for code in REASONS if code in outcome.reasons}
            left = None if outcome.fits else node_room(state, ask)
            verdicts[name] = NodeVerdict(
                fits=outcome.fits,
                score=score,
                reasons=reasons,
                room=left,
                quota_charge=_quota_charge(outcome),
            )
            if outcome.fits and (best is None or order[name] < order[best[0].name]):
                best = (state, outcome)
        quota = self._quota_check(ask.namespace)
        if best is None:
            return Decision(nodes=verdicts, quota=quota)
        chosen = best[0].name
        return Decision(
            node=chosen,
            allocation=_allocation(chosen, request, best[1]),
            nodes=verdicts,
            quota=quota,
        )

    def _room(self, namespace: str) -> tuple[int, int, int] | None:
        quota = self._quotas.get(namespace)
        if quota is None:
            return None
        used = self._namespace_used.get(namespace, [0, 0, 0])
        limits, base = quota.limits, quota.used
        unlimited = 1 << 62
        return (
            _left(limits.memory_mib, base.memory_mib + used[0], unlimited),
            _left(limits.cores, base.cores + used[1], unlimited),
            _left(limits.gpus, base.gpus + used[2], unlimited),
        )

    def _quota_check(self, namespace: str) -> QuotaCheck | None:
        quota = self._quotas.get(namespace)
        if quota is None:
            return None
        recorded = self._namespace_used.get(namespace, [0, 0, 0])
        base = quota.used
        used = QuotaUsage(
            memory_mib=base.memory_mib + recorded[0],
            cores=base.cores + recorded[1],
            gpus=base.gpus + recorded[2],
        )
        return QuotaCheck(namespace=namespace, limits=quota.limits, used=used)

    def _evaluate(self, state: NodeState, ask: Ask) -> Outcome:
        return evaluate(state, ask, self._room(ask.namespace))

    # ----- reading ----------------------------------------------------------------------
    def allocation(self, pod_uid: str) -> Allocation | None:
        with self._lock:
            record = self._pods.get(pod_uid)
            return record.allocation if record else None

    def pod_uids(self) -> list[str]:
        """Uids of the pods with anything recorded (proven or not)."""
        with self._lock:
            return sorted({key.removesuffix(_UNPROVEN) for key in self._pods})

    def node_names(self) -> list[str]:
        with self._lock:
            return sorted(self._nodes)

    def gpu_count(self, node: str) -> int | None:
        """The node's GPUs on this path; None for a node the ledger does not know (no vslice
        node agent). A vslice node whose GPUs are all on the DRA path has 0."""
        with self._lock:
            state = self._nodes.get(node)
            return None if state is None else len(state.gpus)

    def ranked(self, policy: str, idle: int = 0) -> list[str]:
        """The nodes a decision under ``policy`` walks, best first (only those with at least
        ``idle`` idle GPUs; blocked nodes are left out)."""
        with self._lock:
            return list(self._ranking.walk(policy, idle=idle))

    def gpu_usage(self, node: str) -> dict[str, GpuUsage]:
        """Usage per GPU UUID of a node (base usage plus recorded allocations)."""
        with self._lock:
            state = self._nodes.get(node)
            if state is None:
                return {}
            return {
                gpu.uuid: GpuUsage(
                    slots=gpu.used_slots, memory_mib=gpu.used_memory, cores=gpu.used_cores
                )
                for gpu in state.gpus
            }

    def node_snapshot(self, node: str) -> NodeSnapshot | None:
        """One node as a preemption decision needs it, in one snapshot: its inventory, the
        usage counted on each GPU and the proven allocations recorded there; None for a node
        the ledger does not know, that has no GPU, or that is blocked (what it holds is not
        known, so what an eviction would free is not either)."""
        with self._lock:
            state, inventory = self._nodes.get(node), self._inventories.get(node)
            if state is None or inventory is None or not state.gpus or self._blocks.get(node):
                return None
            used = {
                gpu.uuid: GpuUsage(
                    slots=gpu.used_slots, memory_mib=gpu.used_memory, cores=gpu.used_cores
                )
                for gpu in state.gpus
            }
            held = [
                (uid, self._pods[uid].namespace, self._pods[uid].allocation)
                for uid in sorted(self._by_node.get(node, ()))
                if uid in self._pods and not uid.endswith(_UNPROVEN)
            ]
        return NodeSnapshot(inventory, used, held)

    def quota_check(self, namespace: str) -> QuotaCheck | None:
        """The namespace's quota with what it uses now (None: no quota)."""
        with self._lock:
            return self._quota_check(namespace)

    def gpus(self, node: str) -> list[GpuView]:
        """The node's GPUs in index order, each with its capacity and usage (one snapshot)."""
        with self._lock:
            state, inventory = self._nodes.get(node), self._inventories.get(node)
            if state is None or inventory is None:
                return []
            views = []
            for gpu in sorted(inventory.gpus, key=lambda g: g.index):
                taken = state.by_uuid[gpu.uuid]
                used = GpuUsage(
                    slots=taken.used_slots, memory_mib=taken.used_memory, cores=taken.used_cores
                )
                views.append(
                    GpuView(
                        uuid=gpu.uuid,
                        index=gpu.index,
                        model=gpu.model,
                        memory_mib=taken.memory,
                        cores=taken.cores,
                        slots=taken.slots,
                        used=used,
                    )
                )
            return views

    def quotas(self) -> dict[str, QuotaView]:
        """Every namespace that has a quota, with what counts against it now."""
        with self._lock:
            views = {}
            for namespace in sorted(self._quotas):
                check = self._quota_check(namespace)
                if check is not None:
                    views[namespace] = QuotaView(limits=check.limits, used=check.used)
            return views

    def allocations(self) -> list[tuple[str, str, Allocation]]:
        """``(pod uid, namespace, allocation)`` of every proven (or held) allocation, by uid;
        unproven ones are left out: vslice did not grant them."""
        with self._lock:  # only the copy under the lock: decisions wait for it
            records = list(self._pods.items())
        return [
            (uid, record.namespace, record.allocation)
            for uid, record in sorted(records, key=lambda item: item[0])
            if not uid.endswith(_UNPROVEN)
        ]

    def namespace_usage(self, namespace: str) -> QuotaUsage:
        """What recorded allocations of the namespace take (quota ``used`` not included)."""
        with self._lock:
            used = self._namespace_used.get(namespace, [0, 0, 0])
            return QuotaUsage(memory_mib=used[0], cores=used[1], gpus=used[2])

    # ----- internals (lock held) ---------------------------------------------------------
    def _remember(self, uid: str, record: _Record) -> None:
        self._pods[uid] = record
        node = record.allocation.node
        self._by_node.setdefault(node, set()).add(uid)
        self._count_namespace(record, 1)
        state = self._nodes.get(node)
        if state is not None:
            self._apply_charges(state, record, 1)
            self._check_over(state, record.charges)
            state.refresh()
            self._index(state)

    def _forget(self, uid: str) -> _Record | None:
        record = self._pods.pop(uid, None)
        if record is None:
            return None
        node = record.allocation.node
        uids = self._by_node.get(node)
        if uids is not None:
            uids.discard(uid)
            if not uids:
                del self._by_node[node]
        self._count_namespace(record, -1)
        state = self._nodes.get(node)
        if state is not None:
            self._apply_charges(state, record, -1)
            self._check_over(state, record.charges)
            state.refresh()
            self._index(state)
        return record

    def _check_over(self, state: NodeState, uuids: Iterable[str]) -> None:
        """Refresh which of these GPUs of the node are over-booked."""
        over = self._over.setdefault(state.name, set())
        for uuid in uuids:
            gpu = state.by_uuid.get(uuid)
            if gpu is not None and (
                gpu.used_memory > gpu.memory
                or gpu.used_cores > gpu.cores
                or gpu.used_slots > gpu.slots
            ):
                over.add(uuid)
            else:
                over.discard(uuid)
        if not over:
            del self._over[state.name]

    def _count_namespace(self, record: _Record, sign: int) -> None:
        used = self._namespace_used.setdefault(record.namespace, [0, 0, 0])
        for i, amount in enumerate(record.totals):
            used[i] += sign * amount
        if not any(used):
            del self._namespace_used[record.namespace]

    @staticmethod
    def _apply_charges(state: NodeState, record: _Record, sign: int) -> None:
        for uuid, usage in record.charges.items():
            gpu = state.by_uuid.get(uuid)
            if gpu is not None:
                apply_usage(gpu, usage, sign)

    def _index(self, state: NodeState) -> None:
        """Re-rank a node after its usage changed (replaces its previous rank); a blocked
        node stays out of the ranking, so no decision walks to it."""
        if state.name in self._blocks:
            return
        self._ranking.put(
            state.name, state.load, state.idle_gpus, state.largest_memory, state.max_free_memory
        )

    def _unblock(self, key: str) -> None:
        for node in [n for n, blocks in self._blocks.items() if key in blocks]:
            del self._blocks[node][key]
            if not self._blocks[node]:
                del self._blocks[node]
                state = self._nodes.get(node)
                if state is not None:
                    self._index(state)

    def _unindex(self, name: str) -> None:
        self._ranking.remove(name)

    def _commit_reasons(self, record: _Record) -> dict[str, int]:
        """Why the record cannot be added now (empty when it fits)."""
        state = self._nodes.get(record.allocation.node)
        if state is None:
            return {"too_few_gpus": 1}
        if record.allocation.node in self._blocks:
            return {BLOCKED: 1}
        reasons: dict[str, int] = {}
        for uuid, usage in record.charges.items():
            gpu = state.by_uuid.get(uuid)
            reason = "too_few_gpus" if gpu is None else _charge_reason(gpu, usage, record, uuid)
            if reason is not None:
                reasons[reason] = reasons.get(reason, 0) + 1
        if not reasons and not self._quota_allows(record):
            reasons["quota_exceeded"] = 1
        return reasons

    def _quota_allows(self, record: _Record) -> bool:
        room = self._room(record.namespace)
        if room is None:
            return True
        return all(amount <= left for amount, left in zip(record.totals, room, strict=True))


def _quota_charge(outcome: Outcome) -> QuotaUsage | None:
    """What the pod would count against its quota, for a node the quota keeps it off."""
    if "quota_exceeded" not in outcome.reasons:
        return None
    memory, cores, slots = charge_totals(outcome.charges)
    return QuotaUsage(memory_mib=memory, cores=cores, gpus=slots)


def _fitting(
    state: NodeState,
    ask: Ask,
    room: tuple[int, int, int] | None,
    models: dict[frozenset[str], bool],
) -> Outcome | None:
    """How the pod fits on the node, or None; the cheap checks first (``models`` caches the
    type selectors' answer per set of GPU models over one decision)."""
    if ask.types or ask.types_exclude:
        ok = models.get(state.models)
        if ok is None:
            ok = models[state.models] = types_match(ask, state.models)
        if not ok:
            return None
    if not may_fit(state, ask):
        return None
    outcome = evaluate(state, ask, room)
    return outcome if outcome.fits else None


def _left(limit: int | None, used: int, unlimited: int) -> int:
    return unlimited if limit is None else limit - used


def _charge_reason(gpu: GpuState, usage: GpuUsage, record: _Record, uuid: str) -> str | None:
    """The capacity check of one GPU for a whole charge, in the engine's reason order."""
    if not gpu.healthy:
        return "unhealthy"
    if gpu.cordoned:
        return "cordoned"
    if gpu.used_slots + usage.slots > gpu.slots:
        return "slots_exhausted"
    busy = gpu.used_slots > 0 or gpu.used_memory > 0 or gpu.used_cores > 0
    if gpu.used_memory + usage.memory_mib > gpu.memory:
        return "insufficient_memory"
    if gpu.used_cores + usage.cores > gpu.cores:
        return "insufficient_cores"
    if uuid in record.exclusive and busy:
        return "exclusive_conflict"
    if uuid in record.zero_cores and gpu.used_cores >= gpu.cores:
        return "cores_exhausted"
    return None


def _allocation(node: str, request: PodRequest, outcome: Outcome) -> Allocation:
    """The pydantic allocation of an outcome, containers in the pod's order."""
    containers = []
    for position, container in enumerate(request.containers):
        grants = [
            GpuGrant(uuid=gpu.uuid, index=gpu.index, memory_mib=memory, cores=container.cores)
            for gpu, memory in outcome.grants.get(position, [])
        ]
        containers.append(
            ContainerAllocation(name=container.name, init=container.init, gpus=grants)
        )
    return Allocation(node=node, containers=containers)
