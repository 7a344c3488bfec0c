"""Priority preemption on the extender path: a pending GPU pod that fits nowhere evicts the
fewest lower-priority slices that make it fit on one node, and that node is held for it until
they are gone.

Why vslice and not kube-scheduler: the extender answers every miss as *unresolvable*, so
kube-scheduler's own preemption never runs for GPU pods. Its dry run sees only the node's
extended-resource counts (the GPU slots), not memory or cores: for a memory miss it would offer
no candidate or the wrong victims (docs/preemption.md). The choice of victims is
:func:`vslice_core.preemption.plan_preemption` over the ledger; this module does the rest:

- **who may preempt**: a pod whose ``spec.priority`` is above some running slice's and whose
  ``spec.preemptionPolicy`` is not ``Never``;
- **PodDisruptionBudgets**: every victim is evicted through the Eviction API, first as a dry
  run (the API server answers 429 when a budget forbids it now, and evicts nothing), then for
  real; a pod a budget protects is left out of plans for ``protected_s`` seconds, so the next
  try picks others;
- **holding the room**: the node is held for the preemptor while its victims terminate (at
  most ``wait_s`` seconds): pods of lower or equal priority get no slice there meanwhile, so
  the room freed goes to the pod it was freed for;
- **events**: ``Preempting`` on the preemptor and ``Preempted`` on each victim, naming the
  other pod, the priorities, the node and what was freed, in numbers.

The filter calls it only after the ledger found no node; it never evicts for a pod that fits.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from vslice_core.errors import ClusterError
from vslice_core.ledger import Ledger
from vslice_core.model import PodRequest
from vslice_core.preemption import (
    PREEMPTED,
    NodeView,
    PreemptionPolicy,
    RunningPod,
    plan_preemption,
    preempted_text,
)
from vslice_core.quantities import format_mib

from vslice_control.extender.feed import PodFeed
from vslice_control.extender.trust import Events

log = logging.getLogger("vslice.extender.preemption")

WAIT_S = 120.0
"""How long a node stays held for a preemptor whose victims are terminating."""
PROTECTED_S = 60.0
"""How long a pod whose PodDisruptionBudget refused an eviction is left out of plans."""
PLANS_PER_ATTEMPT = 4
"""Plans one filter call may make, each without the pods whose dry run was refused before."""


class Evictions(Protocol):
    def evict_pod(self, namespace: str, name: str, uid: str, *, dry_run: bool) -> None:
        """Create the pod's Eviction (policy/v1); ClusterError 429 when a PodDisruptionBudget
        forbids it now, 404 when the pod is gone."""
        ...


@dataclass
class _Underway:
    node: str
    priority: int
    label: str
    victims: tuple[str, ...]  # uids
    until: float


@dataclass(frozen=True)
class Outcome:
    """What preemption did for one filter call: the node it concerns (None: none) and a
    sentence for the pod's scheduling message."""

    node: str | None
    reason: str


def pod_priority(pod: Mapping[str, Any]) -> tuple[int, PreemptionPolicy]:
    spec = pod.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    priority = spec.get("priority")
    number = priority if isinstance(priority, int) and not isinstance(priority, bool) else 0
    never: PreemptionPolicy = "Never"
    return number, never if spec.get("preemptionPolicy") == never else "PreemptLowerPriority"


class Preemptor:
    def __init__(
        self,
        ledger: Ledger,
        pods: PodFeed,
        evictions: Evictions,
        events: Events,
        *,
        clock: Callable[[], float] = time.monotonic,
        wait_s: float = WAIT_S,
        protected_s: float = PROTECTED_S,
    ) -> None:
        self._ledger = ledger
        self._pods = pods
        self._evictions = evictions
        self._events = events
        self._clock = clock
        self._wait_s = wait_s
        self._protected_s = protected_s
        self._underway: dict[str, _Underway] = {}  # preemptor uid -> what it waits for
        self._protected: dict[str, float] = {}  # pod uid -> until when
        # One preemption decision at a time: two pending pods must not pick victims from the
        # same snapshot and evict twice as much as either needs. Held across the evictions'
        # API calls, so only by filters that found no room; every filter reads the holds
        # under the short state lock instead, never waiting for an eviction.
        self._decide = threading.Lock()
        self._state = threading.Lock()  # _underway and _protected

    # ----- holding nodes ----------------------------------------------------------------
    def held_for_others(self, uid: str, priority: int) -> dict[str, str]:
        """``{node: why}`` of the nodes held for a preemptor of higher priority than this
        pod's (or equal), other than this pod itself."""
        now = self._clock()
        with self._state:
            if not self._underway:
                return {}
            self._expire(now)
            return {
                u.node: f"held for {u.label} (priority {u.priority}), whose evicted pods are ending"
                for owner, u in self._underway.items()
                if owner != uid and u.priority >= priority
            }

    def placed(self, uid: str) -> None:
        """The preemptor was bound: its node is no longer held."""
        with self._state:
            self._underway.pop(uid, None)

    # ----- deciding ---------------------------------------------------------------------
    def attempt(
        self, pod: Mapping[str, Any], request: PodRequest, node_names: Sequence[str]
    ) -> Outcome | None:
        """After a miss on every node: evict for this pod where that makes it fit, or say
        why not; None when preemption does not apply (priority 0 and nothing lower, or no
        GPU request)."""
        priority, policy = pod_priority(pod)
        with self._state:
            waiting = request.uid in self._underway
        if not waiting:
            # The common miss needs no node looked at: a pod that may not preempt, or one
            # with no pod anywhere below it.
            lowest = self._pods.lowest_priority()
            if policy == "Never" or (priority <= 0 and (lowest is None or lowest >= priority)):
                return None
            if lowest is None or lowest >= priority:
                return Outcome(None, f"preemption: no pod below priority {priority} holds a slice")
        label = f"{request.namespace}/{request.name}"
        now = self._clock()
        with self._decide:
            with self._state:
                self._expire(now)
                underway = self._underway.get(request.uid)
            if underway is not None:
                left = [v for v in underway.victims if self._ledger.allocation(v) is not None]
                if left:
                    return Outcome(
                        underway.node,
                        f"preempting: waiting for {len(left)} evicted pod(s) on node "
                        f"{underway.node} to end",
                    )
                with self._state:  # gone, yet no fit: someone else took the room
                    self._underway.pop(request.uid, None)
            refused: str | None = None
            # A victim its budget protects is left out and the plan made again at once: a
            # refused dry run changes nothing in the cluster, so no event would bring the
            # pod back to this filter soon.
            for _ in range(PLANS_PER_ATTEMPT):
                views = self._views(node_names, request.uid, priority)
                if not any(p.priority < priority for v in views for p in v.pods):
                    if refused is None and priority <= 0:  # (Never returned above)
                        return None
                    return Outcome(
                        None,
                        refused or f"preemption: no pod below priority {priority} holds a slice",
                    )
                plan = plan_preemption(
                    views,
                    request,
                    priority,
                    policy=policy,
                    quota=self._ledger.quota_check(request.namespace),
                )
                if plan.node is None or plan.victims is None or not plan.victims:
                    why = f"preemption: {plan.headline}"
                    return Outcome(None, f"{refused}; {why}" if refused else why)
                refused = self._dry_run(plan.victims, now)
                if refused is None:
                    break
            else:
                return Outcome(None, refused or "preemption: no eviction was allowed")
            evicted = self._evict(plan.victims, now)
            refused_now = len(plan.victims) - len(evicted)
            if not evicted:
                return Outcome(
                    plan.node, f"preemption: all {refused_now} evictions were refused; trying again"
                )
            with self._state:
                self._underway[request.uid] = _Underway(
                    plan.node, priority, label, tuple(v.uid for v in evicted), now + self._wait_s
                )
        self._tell(pod, request, priority, plan.node, evicted)
        names = ", ".join(f"{v.label} (priority {v.priority})" for v in evicted)
        partly = (
            f" ({refused_now} more refused: tried again once they have ended)"
            if refused_now
            else ""
        )
        return Outcome(
            plan.node,
            f"preempting {len(evicted)} lower-priority pod(s) on node {plan.node}: {names}"
            f"{partly}; placed there once they have ended",
        )

    def _views(self, node_names: Sequence[str], uid: str, priority: int) -> list[NodeView]:
        now = self._clock()
        with self._state:
            held = {
                u.node
                for owner, u in self._underway.items()
                if owner != uid and u.priority >= priority
            }
            leaving = {v for u in self._underway.values() for v in u.victims}
            protected = {u for u, until in self._protected.items() if until > now}
        views = []
        for name in node_names:
            if name in held:
                continue
            snapshot = self._ledger.node_snapshot(name)
            if snapshot is None:
                continue
            pods = []
            for pod_uid, namespace, allocation in snapshot.held:
                holder = self._pods.held_by(pod_uid)
                if holder is None:  # not seen through the watch (a hold): never a victim
                    continue
                pods.append(
                    RunningPod(
                        uid=pod_uid,
                        namespace=namespace,
                        name=holder.name,
                        priority=holder.priority,
                        started_s=holder.started_s,
                        # Leaving already (another preemptor's victim) frees nothing new.
                        evictable=pod_uid not in leaving and pod_uid not in protected,
                        allocation=allocation,
                    )
                )
            views.append(NodeView(snapshot.inventory, snapshot.used, pods))
        return views

    def _dry_run(self, victims: Sequence[RunningPod], now: float) -> str | None:
        """None when every victim may be evicted now; else why not (and it is left out of
        the next plans)."""
        for victim in victims:
            try:
                self._evictions.evict_pod(victim.namespace, victim.name, victim.uid, dry_run=True)
            except ClusterError as exc:
                with self._state:
                    self._protected[victim.uid] = now + self._protected_s
                if exc.code == 429:
                    return (
                        f"preemption: a PodDisruptionBudget forbids evicting {victim.label} "
                        "now; other pods are tried next"
                    )
                return f"preemption: {victim.label} cannot be evicted ({exc}); trying others"
        return None

    def _evict(self, victims: Sequence[RunningPod], now: float) -> list[RunningPod]:
        evicted = []
        for victim in victims:
            try:
                self._evictions.evict_pod(victim.namespace, victim.name, victim.uid, dry_run=False)
            except ClusterError as exc:
                with self._state:
                    self._protected[victim.uid] = now + self._protected_s
                log.warning("eviction refused", extra={"pod": victim.label, "error": str(exc)})
                continue
            evicted.append(victim)
        return evicted

    def _expire(self, now: float) -> None:
        for uid in [u for u, entry in self._underway.items() if entry.until <= now]:
            del self._underway[uid]
        for uid in [u for u, until in self._protected.items() if until <= now]:
            del self._protected[uid]

    def _tell(
        self,
        pod: Mapping[str, Any],
        request: PodRequest,
        priority: int,
        node: str,
        evicted: Sequence[RunningPod],
    ) -> None:
        meta = pod.get("metadata") if isinstance(pod.get("metadata"), Mapping) else {}
        uid = str((meta or {}).get("uid", request.uid))
        tell(self._events, request, uid, priority, node, evicted, "to make room for this pod")


def tell(
    events: Events,
    request: PodRequest,
    uid: str,
    priority: int,
    node: str,
    evicted: Sequence[RunningPod],
    purpose: str,
) -> None:
    """The events of one preemption, on both paths: ``Preempting`` on the pod (``purpose``
    says what the evictions are for), ``Preempted`` on each victim."""
    label = f"{request.namespace}/{request.name}"
    freed = ", ".join(f"{v.label} (priority {v.priority}, {holds_text(v)})" for v in evicted)
    events.pod(
        request.namespace,
        request.name,
        uid,
        "Preempting",
        f"vslice evicts {len(evicted)} pod(s) of lower priority on node {node} {purpose} "
        f"(priority {priority}): {freed}",
    )
    for victim in evicted:
        events.pod(
            victim.namespace,
            victim.name,
            victim.uid,
            PREEMPTED,
            preempted_text(label, priority, victim.priority, node, holds_text(victim)),
        )
    log.info(
        "preempting", extra={"pod": label, "node": node, "victims": [v.label for v in evicted]}
    )


def holds_text(pod: RunningPod) -> str:
    grants = [g for c in pod.allocation.containers for g in c.gpus]
    memory = sum(g.memory_mib for g in grants)
    gpus = ", ".join(sorted({g.uuid for g in grants}))
    return f"{format_mib(memory)} on {gpus}"
