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
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from vslice_core import annotations as ann
from vslice_core.errors import ClusterError, DecodeError, VsliceError

from vslice_services.deviceplugin.delivery import Delivery, Handover, delivery
from vslice_services.deviceplugin.devices import gpus_of
from vslice_services.deviceplugin.nodeapi import NodeApi
from vslice_services.deviceplugin.pending import (
    ContainerKey,
    KubeletView,
    PendingContainer,
    PodFacts,
    choose,
    describe_pending,
    pending_containers,
)
from vslice_services.deviceplugin.preferred import preferred_ids

log = logging.getLogger("vslice.deviceplugin.allocate")


class NoPendingAllocation(VsliceError):
    """No pod on this node waits for a slice of the requested size."""


def pod_facts(pod: Mapping[str, Any]) -> PodFacts:
    """Decode one pod as listed; raises DecodeError for a malformed vslice annotation."""
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    allocation_text = annotations.get(ann.ALLOCATION)
    delivered_text = annotations.get(ann.DELIVERED)
    allocation = ann.decode_allocation(allocation_text) if allocation_text else None
    delivered = ann.decode_delivered(delivered_text).containers if delivered_text else []
    phase = (pod.get("status") or {}).get("phase", "")
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
        finished=phase in ("Succeeded", "Failed") or bool(meta.get("deletionTimestamp")),
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
    ) -> None:
        self.node = node
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

    def allocate(self, device_ids: Sequence[str]) -> Delivery:
        """The delivery for the container the kubelet is starting with ``device_ids``.

        Raises InvalidRequest (unknown device IDs), NoPendingAllocation or ClusterError.
        """
        minors = self.gpu_minors()
        gpus_of(device_ids, minors)
        kubelet = self.kubelet_view()
        with self._lock:
            facts = self._facts(self._list_pods())
            pending = pending_containers(facts, self.node, kubelet)
            chosen = choose(pending, len(device_ids), self._claims, kubelet)
            if chosen is None:
                waiting = [item for item in pending if item.key not in self._claims]
                raise NoPendingAllocation(
                    f"no pod on node {self.node} waits for {len(device_ids)} GPU(s) "
                    f"(device IDs {', '.join(device_ids)}); pending: {describe_pending(waiting)}"
                )
            self._prepare_cache_dir(chosen)  # before the claim: a failure here takes nothing
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
        return delivery(self.handover, chosen.grants, chosen.uid, chosen.container, minors)

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
                facts.append(pod_facts(pod))
            except DecodeError as exc:
                self._report_bad(pod, exc)
        self._forget_settled(facts)
        return facts

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

    def _prepare_cache_dir(self, chosen: PendingContainer) -> None:
        path = self.handover.layout.host_cache_dir(chosen.uid, chosen.container)
        path.mkdir(parents=True, exist_ok=True)
        # Processes in the container may run as any user; the region must be writable by all.
        os.chmod(path, 0o777)

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
