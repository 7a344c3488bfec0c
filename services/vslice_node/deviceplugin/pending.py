"""Which pod is the kubelet starting? Matching an Allocate call to a pending allocation.

The kubelet's Allocate carries only device IDs: no pod, no container. vslice recovers the pod
from the cluster's own record, as a pure function over plain data:

1. Pending containers are those of pods on this node that carry an allocation for this node,
   are not finished or being deleted, whose allocation is not refused (no valid proof, see
   :mod:`vslice_node.deviceplugin.proofs`, or a volume over vslice's read-only files),
   and whose container is not yet marked delivered.
2. They are ordered by arrival, then namespace/name, then init containers before app
   containers, then position in the allocation. Arrival is the extender's bind time
   (``vslice.io/bind-time``, microseconds), else the pod's creation time. The kubelet watches
   the pods bound to its node and admits each as its watch event arrives, so it starts pods in
   binding order; the extender binds under the node's lock, so on one node bind times follow
   that order too. A pod's containers are allocated in order, init containers first, so the
   first pending container is the one being started. (Pods bound while the kubelet was down
   reach it in one batch that it sorts by creation time; two of those with the same GPU count
   can still be matched the other way round.)
3. A candidate must have as many granted GPUs as the kubelet asked devices for; the first
   such candidate wins. The device IDs themselves say nothing about the pod: the kubelet may
   pick any free IDs, so they are deliberately not used to choose.
4. Containers claimed by an earlier Allocate (not yet visible as delivered) are skipped, so two
   concurrent calls never take the same allocation; the caller holds a lock around
   choose-and-claim.
5. When the kubelet's PodResources API answers, its record wins over the cluster's: a
   container the kubelet already gave devices of the resource to is not pending (even if its
   delivered record was never written), and among the candidates, pods the kubelet already
   lists come first. The kubelet adds a pod to its pod manager just before admitting it and
   admits one pod at a time, so the pod it lists without devices is the one being started.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from vslice_core.model import Allocation, GpuGrant

ContainerKey = tuple[str, str]  # (pod uid, container name)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class PodFacts:
    """What matching needs from one pod, already decoded from its annotations."""

    namespace: str
    name: str
    uid: str
    since: str  # creation time, RFC 3339 UTC ("Z") as the API writes it: sorts chronologically
    allocation: Allocation | None
    delivered: frozenset[str] = frozenset()
    finished: bool = False
    bound: datetime | None = None  # the extender's bind time, when it recorded one
    refused: str | None = None  # why the allocation is not trusted (no valid proof), None = ok

    @property
    def arrival(self) -> datetime:
        """When the kubelet saw the pod: its bind time, else its creation time."""
        if self.bound is not None:
            return self.bound
        try:
            return datetime.fromisoformat(self.since).astimezone(UTC)
        except ValueError:
            return _EPOCH  # no or unreadable creation time: first, as before any other


@dataclass(frozen=True)
class KubeletView:
    """The kubelet's own record (PodResources ``List``): the pods it runs or is admitting, by
    (namespace, name), each with the containers already holding devices of our resource."""

    pods: Mapping[tuple[str, str], frozenset[str]] = field(default_factory=dict)

    def knows(self, namespace: str, pod: str) -> bool:
        return (namespace, pod) in self.pods

    def served(self, namespace: str, pod: str, container: str) -> bool:
        return container in self.pods.get((namespace, pod), frozenset())


@dataclass(frozen=True)
class PendingContainer:
    namespace: str
    pod: str
    uid: str
    container: str
    position: int
    arrival: datetime
    init: bool
    grants: tuple[GpuGrant, ...]

    @property
    def key(self) -> ContainerKey:
        return (self.uid, self.container)

    @property
    def order(self) -> tuple[datetime, str, str, bool, int]:
        return (self.arrival, self.namespace, self.pod, not self.init, self.position)

    @property
    def uuids(self) -> frozenset[str]:
        return frozenset(grant.uuid for grant in self.grants)


def pending_containers(
    pods: Iterable[PodFacts], node: str, kubelet: KubeletView | None = None
) -> list[PendingContainer]:
    """Every container on ``node`` granted GPUs and not yet delivered, in matching order."""
    pending: list[PendingContainer] = []
    for pod in pods:
        if pod.finished or pod.allocation is None or pod.allocation.node != node:
            continue
        if pod.refused is not None:
            continue
        for position, container in enumerate(pod.allocation.containers):
            if not container.gpus or container.name in pod.delivered:
                continue
            if kubelet is not None and kubelet.served(pod.namespace, pod.name, container.name):
                continue
            pending.append(
                PendingContainer(
                    namespace=pod.namespace,
                    pod=pod.name,
                    uid=pod.uid,
                    container=container.name,
                    position=position,
                    arrival=pod.arrival,
                    init=container.init,
                    grants=tuple(container.gpus),
                )
            )
    return sorted(pending, key=lambda item: item.order)


def choose(
    pending: Iterable[PendingContainer],
    device_count: int,
    claimed: Collection[ContainerKey],
    kubelet: KubeletView | None = None,
) -> PendingContainer | None:
    """The pending container an Allocate for ``device_count`` devices is meant for, or None."""
    candidates = [
        item for item in pending if item.key not in claimed and len(item.grants) == device_count
    ]
    if kubelet is not None:
        admitting = [item for item in candidates if kubelet.knows(item.namespace, item.pod)]
        candidates = admitting or candidates  # none listed: a kubelet that lags, use the order
    return min(candidates, key=lambda item: item.order) if candidates else None


def describe_pending(pending: Sequence[PendingContainer]) -> str:
    """A short list for error messages: ``ns/pod[container]=N GPUs``."""
    if not pending:
        return "none"
    return ", ".join(
        f"{item.namespace}/{item.pod}[{item.container}]={len(item.grants)} GPUs" for item in pending
    )
