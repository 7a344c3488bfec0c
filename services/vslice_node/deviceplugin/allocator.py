"""Allocate and GetPreferredAllocation, minus the gRPC: find the pod, hand over its slice,
have the delivery recorded.

Where the pods come from: the node's watched pod view (:mod:`.podview`), so an Allocate
normally makes no API call at all. When the view cannot answer, one fresh list of the node's
pods decides instead: the view is not synced yet or failing, it has no pending container of
the requested size (the kubelet can call right after the binding, before our watch shows the
pod), or the kubelet's PodResources record names a pod the view does not have yet (the pod
being admitted). Only when that list has no match either is the answer "no pending
allocation" (or a refusal, below). The API server being unreachable is retried for
``api_wait_s`` on that list, as before.

Concurrency: one lock (``Allocator._lock``) guards the in-memory choice and claim only:
settle old claims, compute the pending containers, choose, claim. Nothing under it calls the
API server, the kubelet or the file system, so a slow API call of one Allocate never holds
up another. Two Allocate calls still never take the same pending allocation: the second one's
choice, under the lock, skips the first one's claim, even before the first one's
``vslice.io/delivered`` record is written or visible. Claims live in memory until the watched
view shows the container delivered, or shows the pod gone (the watch saw it deleted, or a
relist that started after the claim lacks it). Fresh lists never drop a claim: they can be
ahead of the watch, and the next call may read the view again (see :meth:`_forget_settled`).
No other lock is ever taken while holding it.

The delivered record is written after the answer by :class:`.deliveries.DeliveryWriter` (in
the background, idempotent, retried while the API server fails, dropped for a pod that is
gone); the claim keeps the allocation taken meanwhile. The container's files (region
directory, limits file) are written after the claim and before the answer; if that fails the
claim is given back, so a failure takes nothing.

An allocation without a valid proof (:mod:`vslice_node.deviceplugin.proofs`), or of a
pod that would mount a volume over the files vslice hands its containers read-only (the
limits directory, ``/etc/ld.so.preload``), is never pending. When an Allocate could only have
been meant for such a pod (decided on the fresh list), it fails with
:class:`AllocationRefused` naming the pod and the reason, and the pod gets a Warning event
``AllocationRefused`` (written in the background, never failing the answer).

Before answering, the container's limits file is written (atomically, mode 0444) into its
own directory under ``limits_root``, which the container mounts read-only; where the driver
enforces memory limits, the container's hook spec too (:mod:`vslice_node.handover.memoryhook`).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vslice_core import annotations as ann
from vslice_core.clusterobjects import pod_deleting, pod_finished
from vslice_core.errors import ClusterError, DecodeError, VsliceError
from vslice_core.proof import PROOF

from vslice_node.deviceplugin.deliveries import DeliveryWriter
from vslice_node.deviceplugin.devices import gpus_of
from vslice_node.deviceplugin.pending import (
    ContainerKey,
    KubeletView,
    PendingContainer,
    PodFacts,
    choose,
    describe_pending,
    pending_containers,
)
from vslice_node.deviceplugin.podview import PodSnapshot, PodView, name_of, uid_of
from vslice_node.deviceplugin.preferred import preferred_ids
from vslice_node.deviceplugin.proofs import ProofCheck
from vslice_node.handover.container import (
    CONTAINER_LIMITS_DIR,
    PRELOAD_PATH,
    ContainerHandover,
    Handover,
    container_handover,
    shadowing_mounts,
)
from vslice_node.handover.files import write_container_files, write_hook_spec
from vslice_node.nodeapi import NodeApi

log = logging.getLogger("vslice.deviceplugin.allocate")


class NoPendingAllocation(VsliceError):
    """No pod on this node waits for a slice of the requested size."""


class AllocationRefused(NoPendingAllocation):
    """The only pods this Allocate could be meant for carry no valid allocation proof."""

    def __init__(self, message: str, refused: PendingContainer, why: str) -> None:
        super().__init__(message)
        self.refused = refused
        self.why = why


def pod_facts(pod: Mapping[str, Any]) -> PodFacts:
    """Decode one pod as listed; raises DecodeError for a malformed vslice annotation."""
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    allocation_text = annotations.get(ann.ALLOCATION)
    delivered_text = annotations.get(ann.DELIVERED)
    allocation = ann.decode_allocation(allocation_text) if allocation_text else None
    delivered = ann.decode_delivered(delivered_text).containers if delivered_text else []
    bound_text = annotations.get(ann.BIND_TIME)
    try:
        bound = ann.decode_bind_time(bound_text) if bound_text else None
    except DecodeError:
        bound = None  # only an ordering hint: fall back to the creation time, keep the pod
    return PodFacts(
        namespace=meta.get("namespace", "default"),
        name=meta.get("name", ""),
        uid=meta.get("uid", ""),
        since=meta.get("creationTimestamp", ""),
        allocation=allocation,
        delivered=frozenset(delivered),
        # Not to be started again: no container of a pod that ended or is going gets a slice.
        finished=pod_finished(pod) or pod_deleting(pod),
        bound=bound,
    )


@dataclass(frozen=True)
class Claim:
    """A container an Allocate took, not yet shown delivered."""

    chosen: PendingContainer
    made_at: float  # monotonic; a list started later that lacks the pod means it is gone


@dataclass(frozen=True)
class _Choice:
    """What one pass over a snapshot found: the claimed container, or why there is none."""

    chosen: PendingContainer | None
    facts: tuple[PodFacts, ...]
    refusal: AllocationRefused | None = None
    waiting: tuple[PendingContainer, ...] = ()


class Allocator:
    def __init__(
        self,
        node: str,
        api: NodeApi,
        handover: Handover,
        gpu_minors: Callable[[], Mapping[str, int]],
        *,
        api_wait_s: float = 10.0,
        kubelet_view: Callable[[], KubeletView | None] = lambda: None,
        proofs: ProofCheck | None = None,
        view: PodView | None = None,
        deliveries: DeliveryWriter | None = None,
    ) -> None:
        self.node = node
        self.proofs = proofs or ProofCheck("")
        self.api = api
        self.handover = handover
        self.gpu_minors = gpu_minors
        self.api_wait_s = api_wait_s
        self.kubelet_view = kubelet_view  # the kubelet's PodResources record, None if unknown
        self.view = view or PodView(api, node)
        self.deliveries = deliveries or DeliveryWriter(api, node)
        self._lock = threading.Lock()
        self._claims: dict[ContainerKey, Claim] = {}
        self._reported: set[tuple[str, str]] = set()  # (pod uid, bad value) already logged
        self.fresh_lists = 0  # lists Allocate or GetPreferredAllocation made themselves

    def start(self) -> None:
        """Start watching the node's pods and writing delivered records."""
        self.view.start()
        self.deliveries.start()

    def stop(self) -> None:
        self.view.stop()
        self.deliveries.stop()

    # -- Allocate ---------------------------------------------------------------------------

    def allocate(self, device_ids: Sequence[str]) -> ContainerHandover:
        """What the container the kubelet is starting with ``device_ids`` is handed.

        Raises InvalidRequest (unknown device IDs), AllocationRefused (only a pod without a
        valid proof could match), NoPendingAllocation or ClusterError.
        """
        try:
            return self._allocate(device_ids)
        except AllocationRefused as exc:
            self._warn_refused(exc.refused, exc.why, str(exc))
            raise

    def _allocate(self, device_ids: Sequence[str]) -> ContainerHandover:
        minors = self.gpu_minors()
        gpus_of(device_ids, minors)
        kubelet = self.kubelet_view()  # a gRPC call: before, never under, the lock
        size = len(device_ids)
        choice: _Choice | None = None
        watched = self._watched(kubelet)
        if watched is not None:
            choice = self._choose_and_claim(watched, size, kubelet)
        snapshot = watched
        if snapshot is None or choice is None or choice.chosen is None:
            # The view does not know the pod (yet): one list decides.
            snapshot = self._fresh_list()
            choice = self._choose_and_claim(snapshot, size, kubelet)
        self.deliveries.settle(snapshot)
        chosen = choice.chosen
        if chosen is None:
            if choice.refusal is not None:
                raise choice.refusal
            raise NoPendingAllocation(
                f"no pod on node {self.node} waits for {size} GPU(s) "
                f"(device IDs {', '.join(device_ids)}); "
                f"pending: {describe_pending(choice.waiting)}"
            )
        try:
            write_container_files(self.handover, chosen.grants, chosen.uid, chosen.container)
            write_hook_spec(self.handover, chosen.grants, chosen.uid, chosen.container)
        except BaseException:
            with self._lock:  # a failure takes nothing: the next call may take it again
                self._claims.pop(chosen.key, None)
            raise
        recorded = next((f.delivered for f in choice.facts if f.uid == chosen.uid), frozenset())
        self.deliveries.record(chosen.namespace, chosen.pod, chosen.uid, chosen.container, recorded)
        log.info(
            "allocated",
            extra={
                "pod": f"{chosen.namespace}/{chosen.pod}",
                "container": chosen.container,
                "gpus": [grant.uuid for grant in chosen.grants],
                "device_ids": list(device_ids),
            },
        )
        return container_handover(
            self.handover, chosen.grants, chosen.uid, chosen.container, minors
        )

    def _watched(self, kubelet: KubeletView | None) -> PodSnapshot | None:
        """The view's snapshot, or None when it cannot be used for this call: not synced, or
        the kubelet names a pod the view has not seen (the one being admitted, most likely)."""
        snapshot = self.view.snapshot()
        if snapshot is None:
            return None
        if kubelet is not None and not set(kubelet.pods) <= snapshot.names():
            return None
        return snapshot

    def _fresh_list(self) -> PodSnapshot:
        """List with retries: a short API outage must not fail a container start."""
        deadline = time.monotonic() + self.api_wait_s
        delay = 0.2
        while True:
            try:
                self.fresh_lists += 1
                return self.view.fresh_list()
            except ClusterError as exc:
                if time.monotonic() + delay > deadline:
                    raise
                log.warning("listing pods failed; retrying", extra={"error": str(exc)})
                time.sleep(delay)
                delay = min(delay * 2, 2.0)

    def _choose_and_claim(
        self, snapshot: PodSnapshot, size: int, kubelet: KubeletView | None
    ) -> _Choice:
        """Choose under the lock and claim; with no match, the refusal (if an unproven pod was
        the match) and the containers still waiting, for the message."""
        facts = tuple(self._facts(snapshot.pods))  # decoding and proofs: outside the lock
        with self._lock:
            self._forget_settled(snapshot, facts)
            pending = pending_containers(facts, self.node, kubelet)
            chosen = choose(pending, size, self._claims, kubelet)
            if chosen is not None:
                self._claims[chosen.key] = Claim(chosen, time.monotonic())
                return _Choice(chosen, facts)
            refusal = self._refusal(facts, size, kubelet)
            waiting = tuple(item for item in pending if item.key not in self._claims)
        return _Choice(None, facts, refusal, waiting)

    def _facts(self, pods: Iterable[Mapping[str, Any]]) -> list[PodFacts]:
        facts = []
        for pod in pods:
            try:
                facts.append(self._proven(pod, pod_facts(pod)))
            except DecodeError as exc:
                self._report_bad(pod, exc)
        return facts

    def _proven(self, pod: Mapping[str, Any], facts: PodFacts) -> PodFacts:
        """The facts, marked refused when the allocation lacks a valid proof or the pod would
        mount a volume over the files vslice hands its containers read-only."""
        if facts.allocation is None or facts.finished:
            return facts
        covered = shadowing_mounts(pod, (CONTAINER_LIMITS_DIR, PRELOAD_PATH))
        if covered:
            why = (
                f"it mounts a volume over vslice's read-only files ({', '.join(covered)}); "
                f"remove the volumeMount at {CONTAINER_LIMITS_DIR} or {PRELOAD_PATH}"
            )
            return dataclasses.replace(facts, refused=why)
        if not self.proofs.enabled:
            return facts
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        reason = self.proofs.problem(
            annotations.get(PROOF), facts.uid, self.node, str(annotations.get(ann.ALLOCATION))
        )
        if reason is None:
            return facts
        why = (
            f"its {ann.ALLOCATION} has no valid {PROOF} ({reason}); only vslice's scheduler "
            "may allocate GPUs: create the pod again without spec.nodeName and without "
            "vslice.io/ annotations"
        )
        return dataclasses.replace(facts, refused=why)

    def _refusal(
        self, facts: Sequence[PodFacts], device_count: int, kubelet: KubeletView | None
    ) -> AllocationRefused | None:
        """The refusal when a refused pod is what this Allocate would have matched; the lock
        is held (the choice skips claimed containers)."""
        refused = {f.uid: f.refused for f in facts if f.refused is not None}
        if not refused:
            return None
        unproven = [dataclasses.replace(f, refused=None) for f in facts if f.uid in refused]
        chosen = choose(
            pending_containers(unproven, self.node, kubelet), device_count, self._claims, kubelet
        )
        if chosen is None:
            return None
        why = str(refused[chosen.uid])
        return AllocationRefused(
            f"pod {chosen.namespace}/{chosen.pod} (container {chosen.container}) is refused its "
            f"GPUs on node {self.node}: {why}",
            chosen,
            why,
        )

    def _warn_refused(self, chosen: PendingContainer, why: str, message: str) -> None:
        log.error(
            "allocation refused",
            extra={"pod": f"{chosen.namespace}/{chosen.pod}", "error": why},
        )

        def write() -> None:
            try:
                self.api.pod_event(
                    chosen.namespace, chosen.pod, chosen.uid, "AllocationRefused", message
                )
            except ClusterError as exc:
                log.warning("event not written", extra={"error": str(exc)})

        # Never delays the kubelet's answer: the event is a report, not state.
        threading.Thread(target=write, name="refusal-event", daemon=True).start()

    def _report_bad(self, pod: Mapping[str, Any], exc: DecodeError) -> None:
        key = (uid_of(pod), str(exc.value))
        if key not in self._reported:  # one line per bad value, not one per kubelet call
            self._reported.add(key)
            namespace, name = name_of(pod)
            log.error(
                "ignoring pod with a malformed annotation",
                extra={"pod": f"{namespace}/{name}", "error": str(exc)},
            )

    def _forget_settled(self, snapshot: PodSnapshot, facts: Sequence[PodFacts]) -> None:
        """Drop claims the watched view shows delivered, and claims of pods it shows gone; the
        lock is held.

        Only what the watch showed settles a claim: it moves forward only, so a container it
        shows delivered stays delivered in every later snapshot. A fresh list (or the overlay
        it left) may be ahead of the watch; a claim dropped on its word would leave the
        container pending again in the next, older-looking view snapshot, and Allocate would
        hand it out twice. A pod merely missing from a view whose list is older than the claim
        keeps its claim too: the claim may come from a pod the watch has not shown yet."""
        if snapshot.fresh:
            return
        delivered = {
            (f.uid, name) for f in facts if f.uid not in snapshot.overlay for name in f.delivered
        }
        present = snapshot.uids()
        for key, claim in list(self._claims.items()):
            uid = key[0]
            gone = uid in snapshot.gone or (
                uid not in present and snapshot.listed_at >= claim.made_at
            )
            if key in delivered or gone:
                del self._claims[key]

    # -- GetPreferredAllocation ---------------------------------------------------------------

    def preferred(
        self, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> list[str]:
        """Prefer slots on the GPUs of the pending allocation of this size Allocate will take."""
        target: list[str] = []
        kubelet = self.kubelet_view()
        try:
            chosen = None
            snapshot = self._watched(kubelet)
            if snapshot is not None:
                chosen = self._peek(snapshot, size, kubelet)
            if chosen is None:
                # Its pods stay in the view's overlay: the Allocate that follows needs no list.
                self.fresh_lists += 1
                chosen = self._peek(self.view.fresh_list(), size, kubelet)
            if chosen is not None:
                target = [grant.uuid for grant in chosen.grants]
        except ClusterError as exc:
            log.warning("preferred allocation without pod data", extra={"error": str(exc)})
        return preferred_ids(available, must_include, size, target)

    def _peek(
        self, snapshot: PodSnapshot, size: int, kubelet: KubeletView | None
    ) -> PendingContainer | None:
        """The container Allocate would take now, without claiming it."""
        facts = self._facts(snapshot.pods)
        with self._lock:
            return choose(
                pending_containers(facts, self.node, kubelet), size, self._claims, kubelet
            )
