"""Allocate and GetPreferredAllocation, minus the gRPC: find the pod, hand over its slice,
record the delivery.

Concurrency: one lock (``Allocator._lock``) covers list-pods, choose, claim and the delivered
patch, so two Allocate calls never take the same pending allocation, even before the first
call's ``vslice.io/delivered`` patch is visible in a list. Claims live in memory until the
annotation shows the container delivered or the pod is gone. No other lock is ever taken
while holding it.

A failed delivered patch (API server unreachable) does not fail the container: the kubelet
gets its answer, the claim stays, and :meth:`Allocator.retry_deliveries` (called by the
plugin's refresh loop) writes the record once the server is back.

An allocation without a valid proof (:mod:`vslice_node.deviceplugin.proofs`), or of a
pod that would mount a volume over the files vslice hands its containers read-only (the
limits directory, ``/etc/ld.so.preload``), is never pending. When an Allocate could only have
been meant for such a pod, it fails with
:class:`AllocationRefused` naming the pod and the reason, and the pod gets a Warning event
``AllocationRefused`` (written after the lock is released, never failing the answer).

Before answering, the container's limits file is written (atomically, mode 0444) into its
own directory under ``limits_root``, which the container mounts read-only.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from vslice_core import annotations as ann
from vslice_core.clusterobjects import pod_deleting, pod_finished
from vslice_core.errors import ClusterError, DecodeError, VsliceError
from vslice_core.proof import PROOF

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
from vslice_node.handover.files import write_container_files
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
    ) -> None:
        self.node = node
        self.proofs = proofs or ProofCheck("")
        self.api = api
        self.handover = handover
        self.gpu_minors = gpu_minors
        self.api_wait_s = api_wait_s
        self.kubelet_view = kubelet_view  # the kubelet's PodResources record, None if unknown
        self._lock = threading.Lock()
        self._claims: dict[ContainerKey, PendingContainer] = {}
        self._undelivered: dict[str, PendingContainer] = {}  # pod uid -> last claim to record
        self._reported: set[tuple[str, str]] = set()  # (pod uid, bad value) already logged

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
        kubelet = self.kubelet_view()
        with self._lock:
            facts = self._facts(self._list_pods())
            pending = pending_containers(facts, self.node, kubelet)
            chosen = choose(pending, len(device_ids), self._claims, kubelet)
            if chosen is None:
                self._refuse_unproven(facts, len(device_ids), kubelet)
                waiting = [item for item in pending if item.key not in self._claims]
                raise NoPendingAllocation(
                    f"no pod on node {self.node} waits for {len(device_ids)} GPU(s) "
                    f"(device IDs {', '.join(device_ids)}); pending: {describe_pending(waiting)}"
                )
            # Before the claim: a failure here takes nothing.
            write_container_files(self.handover, chosen.grants, chosen.uid, chosen.container)
            self._claims[chosen.key] = chosen
            self._record_delivery(chosen, facts)
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

    def _list_pods(self) -> list[dict[str, Any]]:
        """List with retries: a short API outage must not fail a container start."""
        deadline = time.monotonic() + self.api_wait_s
        delay = 0.2
        while True:
            try:
                return self.api.pods_on_node(self.node)
            except ClusterError as exc:
                if time.monotonic() + delay > deadline:
                    raise
                log.warning("listing pods failed; retrying", extra={"error": str(exc)})
                time.sleep(delay)
                delay = min(delay * 2, 2.0)

    def _facts(self, pods: Iterable[Mapping[str, Any]]) -> list[PodFacts]:
        facts = []
        for pod in pods:
            try:
                facts.append(self._proven(pod, pod_facts(pod)))
            except DecodeError as exc:
                self._report_bad(pod, exc)
        self._forget_settled(facts)
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

    def _refuse_unproven(
        self, facts: Sequence[PodFacts], device_count: int, kubelet: KubeletView | None
    ) -> None:
        """Raise AllocationRefused when a refused pod is what this Allocate would have matched."""
        refused = {f.uid: f.refused for f in facts if f.refused is not None}
        if not refused:
            return
        unproven = [dataclasses.replace(f, refused=None) for f in facts if f.uid in refused]
        chosen = choose(
            pending_containers(unproven, self.node, kubelet), device_count, self._claims, kubelet
        )
        if chosen is None:
            return
        why = str(refused[chosen.uid])
        raise AllocationRefused(
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
        meta = pod.get("metadata") or {}
        key = (str(meta.get("uid")), str(exc.value))
        if key not in self._reported:  # one line per bad value, not one per kubelet call
            self._reported.add(key)
            log.error(
                "ignoring pod with a malformed annotation",
                extra={"pod": f"{meta.get('namespace')}/{meta.get('name')}", "error": str(exc)},
            )

    def _forget_settled(self, facts: Sequence[PodFacts]) -> None:
        """Drop claims the cluster now shows delivered, and claims of pods that are gone."""
        delivered = {(f.uid, name) for f in facts for name in f.delivered}
        live = {f.uid for f in facts}
        for key in list(self._claims):
            if key in delivered or key[0] not in live:
                del self._claims[key]

    # -- the delivered record -----------------------------------------------------------------

    def _record_delivery(self, chosen: PendingContainer, facts: Sequence[PodFacts]) -> None:
        try:
            self._patch_delivered(chosen, facts)
        except ClusterError as exc:
            if exc.code in (404, 409):
                log.warning("pod is gone; delivery not recorded", extra={"error": str(exc)})
                return
            log.error("cannot record delivery yet; will retry", extra={"error": str(exc)})
            self._undelivered[chosen.uid] = chosen

    def _patch_delivered(self, chosen: PendingContainer, facts: Sequence[PodFacts]) -> None:
        recorded = next((f.delivered for f in facts if f.uid == chosen.uid), frozenset())
        claimed = {name for uid, name in self._claims if uid == chosen.uid}
        value = ann.encode_delivered(
            ann.Delivery(
                node=self.node,
                containers=sorted(recorded | claimed),
                time=datetime.now(UTC),
            )
        )
        self.api.annotate_pod(chosen.namespace, chosen.pod, chosen.uid, {ann.DELIVERED: value})
        self._undelivered.pop(chosen.uid, None)

    def retry_deliveries(self) -> int:
        """Write delivered records that failed earlier; the number still waiting."""
        with self._lock:
            if not self._undelivered:
                return 0
            try:
                facts = self._facts(self.api.pods_on_node(self.node))
            except ClusterError as exc:
                log.warning("delivery retry: API server unreachable", extra={"error": str(exc)})
                return len(self._undelivered)
            for chosen in list(self._undelivered.values()):
                self._record_delivery(chosen, facts)
            return len(self._undelivered)

    # -- GetPreferredAllocation ---------------------------------------------------------------

    def preferred(
        self, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> list[str]:
        """Prefer slots on the GPUs of the pending allocation of this size Allocate will take."""
        target: list[str] = []
        kubelet = self.kubelet_view()
        try:
            with self._lock:
                facts = self._facts(self.api.pods_on_node(self.node))
                pending = pending_containers(facts, self.node, kubelet)
                chosen = choose(pending, size, self._claims, kubelet)
            if chosen is not None:
                target = [grant.uuid for grant in chosen.grants]
        except ClusterError as exc:
            log.warning("preferred allocation without pod data", extra={"error": str(exc)})
        return preferred_ids(available, must_include, size, target)
