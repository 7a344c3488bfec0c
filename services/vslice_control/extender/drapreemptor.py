"""Priority preemption on the DRA path, which kube-scheduler does not do for vslice's claims.

When kube-scheduler cannot allocate a pod's claim, its DynamicResources plugin answers
``UnschedulableAndUnresolvable`` ("cannot allocate all claims"), and its default preemption
never looks at a node so marked; it also has no way to take a victim's claim out of its dry
run (the plugin has no ``PreFilterExtensions``). A higher-priority pod whose claim does not
fit therefore waits behind any lower-priority claim (docs/preemption.md, "The DRA path").

So the active extender looks, every ``every_s`` seconds, for pending pods kube-scheduler
marked Unschedulable whose one vslice claim is not allocated; its pod watch keeps those pods
(:meth:`~vslice_control.extender.feed.PodFeed.claim_waiters`), so a pass with none reads
nothing from the API server. For each, highest priority
first, it reads the node views (:mod:`vslice_core.dra.preemptviews`), chooses victims by the
extender path's rule (:func:`vslice_core.preemption.plan_preemption`: the fewest, then the
lowest priorities, then the youngest; never equal or higher priority; ``Never`` honoured),
asks a dry-run eviction of each (a PodDisruptionBudget that refuses keeps its pod out of the
plans for a while) and evicts them, with the same events as the extender path. Once the
victims' pods are gone their claims are deallocated (a template's claim is deleted with its
pod), and kube-scheduler, which retries on claim changes, allocates the waiting claim.

Unlike the extender path, nothing holds the freed room for the preemptor: kube-scheduler
allocates claims, and a pod of any priority that comes first may take it. The preemptor is
then tried again (its victims are remembered for ``wait_s`` so the same pods are not counted
twice). Quotas are the webhook's check at allocation (docs/dra.md); preemption does not look
at them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from vslice_core.clusterobjects import metadata_of
from vslice_core.dra import DRIVER
from vslice_core.dra.allocations import reserved_for
from vslice_core.dra.preemptviews import WaitingPod, node_views, waiting_pods
from vslice_core.errors import ClusterError
from vslice_core.preemption import RunningPod, plan_preemption
from vslice_serving.periodic import Periodic

from vslice_control.extender.preemptor import (
    PROTECTED_S,
    WAIT_S,
    Evictions,
    pod_priority,
    tell,
)
from vslice_control.extender.trust import Events

log = logging.getLogger("vslice.extender.drapreemption")

EVERY_S = 2.0
REST_S = 10.0
"""How long a waiting pod for which no victims were found is left alone (each try reads the
pods holding claims)."""


class DraReads(Protocol):
    """The reads one pass needs (:class:`vslice_kube.dra.DraApi`)."""

    def resource_claims(self, namespace: str | None = None) -> list[dict[str, Any]]: ...

    def resource_slices(self, driver: str) -> list[dict[str, Any]]: ...

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None: ...


@dataclass
class _Evicted:
    victims: frozenset[str]
    until: float


class DraPreemptor:
    def __init__(
        self,
        waiters: Callable[[], list[dict[str, Any]]],
        reads: DraReads,
        evictions: Evictions,
        events: Events,
        *,
        active: Callable[[], bool] = lambda: True,
        every_s: float = EVERY_S,
        clock: Callable[[], float] = time.monotonic,
        wait_s: float = WAIT_S,
        protected_s: float = PROTECTED_S,
        rest_s: float = REST_S,
    ) -> None:
        self._waiters = waiters
        self._reads = reads
        self._evictions = evictions
        self._events = events
        self._active = active
        self._clock = clock
        self._wait_s = wait_s
        self._protected_s = protected_s
        self._underway: dict[str, _Evicted] = {}  # preemptor uid -> its victims
        self._resting: dict[str, float] = {}  # pod uid -> until when it is not tried again
        self._rest_s = rest_s
        self._protected: dict[str, float] = {}  # pod uid -> until when
        self._loop = Periodic(
            "dra-preemption",
            every_s,
            self.check,
            log,
            "DRA preemption pass failed",
            expected=(ClusterError,),
        )

    def check(self) -> None:
        """One pass (module docstring)."""
        if not self._active():
            return
        unscheduled = self._waiters()
        if not unscheduled:
            return  # the common case: nothing is read from the API server
        claims = self._reads.resource_claims()
        by_name = {
            (str(metadata_of(c).get("namespace", "default")), str(metadata_of(c).get("name"))): c
            for c in claims
        }
        waiting = waiting_pods(unscheduled, by_name)
        if not waiting:
            return
        now = self._clock()
        self._expire(now)
        # Not a pod whose victims are ending (kube-scheduler retries on their claims), nor one
        # that found no victims a moment ago: the victims' pods are read only for the others.
        due = [
            w
            for w in waiting
            if w.request.uid not in self._underway and w.request.uid not in self._resting
        ]
        if not due:
            return
        slices = self._reads.resource_slices(DRIVER)
        holders = self._holders(claims)
        for pod in due:
            if not self._attempt(pod, slices, claims, holders, now):
                self._resting[pod.request.uid] = now + self._rest_s

    def _holders(self, claims: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """uid -> pod of every pod that is the only reservation of an allocated claim."""
        found: dict[str, dict[str, Any]] = {}
        for claim in claims:
            users = reserved_for(claim)
            if len(users) != 1 or not (claim.get("status") or {}).get("allocation"):
                continue
            namespace = str(metadata_of(claim).get("namespace", "default"))
            pod = self._reads.pod(namespace, users[0][0])
            if pod is not None and str(metadata_of(pod).get("uid", "")) == users[0][1]:
                found[users[0][1]] = pod
        return found

    def _attempt(
        self,
        waiting: WaitingPod,
        slices: list[dict[str, Any]],
        claims: list[dict[str, Any]],
        holders: Mapping[str, dict[str, Any]],
        now: float,
    ) -> bool:
        """Plan and evict for one pod; False when no victims can make room for it now (a
        budget's refusal is True: the next pass plans again without that pod)."""
        priority, policy = pod_priority(waiting.pod)
        if policy == "Never":
            return False
        leaving = frozenset(v for e in self._underway.values() for v in e.victims)
        protected = frozenset(self._protected)
        views = node_views(slices, claims, holders, leaving=leaving, protected=protected)
        if not any(p.priority < priority for v in views for p in v.pods):
            return False
        plan = plan_preemption(views, waiting.request, priority, policy=policy)
        if plan.node is None or not plan.victims:
            log.info(
                "no preemption for a waiting claim",
                extra={"pod": _label(waiting), "why": plan.headline},
            )
            return False
        for victim in plan.victims:
            try:
                self._evictions.evict_pod(victim.namespace, victim.name, victim.uid, dry_run=True)
            except ClusterError as exc:
                self._protected[victim.uid] = now + self._protected_s
                log.info("victim protected", extra={"pod": victim.label, "error": str(exc)})
                return True  # planned again next pass, without it
        evicted: list[RunningPod] = []
        for victim in plan.victims:
            try:
                self._evictions.evict_pod(victim.namespace, victim.name, victim.uid, dry_run=False)
            except ClusterError as exc:
                self._protected[victim.uid] = now + self._protected_s
                log.warning("eviction refused", extra={"pod": victim.label, "error": str(exc)})
                continue
            evicted.append(victim)
        if not evicted:
            return True
        self._underway[waiting.request.uid] = _Evicted(
            frozenset(v.uid for v in evicted), now + self._wait_s
        )
        purpose = f"so that claim {waiting.claim} can be allocated there"
        tell(
            self._events,
            waiting.request,
            waiting.request.uid,
            priority,
            plan.node,
            evicted,
            purpose,
        )
        return True

    def _expire(self, now: float) -> None:
        self._underway = {u: e for u, e in self._underway.items() if e.until > now}
        self._protected = {u: t for u, t in self._protected.items() if t > now}
        self._resting = {u: t for u, t in self._resting.items() if t > now}

    def start(self) -> None:
        self._loop.start()

    def stop(self) -> None:
        self._loop.stop()


def _label(waiting: WaitingPod) -> str:
    return f"{waiting.request.namespace}/{waiting.request.name}"
