"""Which pod is the kubelet starting? Matching an Allocate call to a pending allocation.

The kubelet's Allocate carries only device IDs: no pod, no container. vslice recovers the pod
from the cluster's own record, as a pure function over plain data:

1. Pending containers are those of pods on this node that carry an allocation for this node,
   are not finished or being deleted, and whose container is not yet marked delivered.
2. They are ordered by pod creation time, then namespace/name, then init containers before
   app containers, then position in the allocation. The kubelet admits pods in the order they
   reach it (a batch in creation order) and allocates a pod's containers in order, init
   containers first, so the oldest pending container is the one being started.
3. A candidate must have as many granted GPUs as the kubelet asked devices for; the oldest
   such candidate wins. The device IDs themselves say nothing about the pod: the kubelet may
   pick any free IDs, so they are deliberately not used to choose.
4. Containers claimed by an earlier Allocate (not yet visible as delivered) are skipped, so two
   concurrent calls never take the same allocation; the caller holds a lock around
   choose-and-claim.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from vslice_core.model import Allocation, GpuGrant

ContainerKey = tuple[str, str]  # (pod uid, container name)


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


@dataclass(frozen=True)
class PendingContainer:
    namespace: str
    pod: str
    uid: str
    container: str
    position: int
    since: str
    init: bool
    grants: tuple[GpuGrant, ...]

    @property
    def key(self) -> ContainerKey:
        return (self.uid, self.container)

    @property
    def order(self) -> tuple[str, str, str, bool, int]:
        return (self.since, self.namespace, self.pod, not self.init, self.position)

    @property
    def uuids(self) -> frozenset[str]:
        return frozenset(grant.uuid for grant in self.grants)


def pending_containers(pods: Iterable[PodFacts], node: str) -> list[PendingContainer]:
    """Every container on ``node`` that was granted GPUs and not yet delivered, oldest first."""
    pending: list[PendingContainer] = []
    for pod in pods:
        if pod.finished or pod.allocation is None or pod.allocation.node != node:
            continue
        for position, container in enumerate(pod.allocation.containers):
            if not container.gpus or container.name in pod.delivered:
                continue
            pending.append(
                PendingContainer(
                    namespace=pod.namespace,
                    pod=pod.name,
                    uid=pod.uid,
                    container=container.name,
                    position=position,
                    since=pod.since,
                    init=container.init,
                    grants=tuple(container.gpus),
                )
            )
    return sorted(pending, key=lambda item: item.order)


def choose(
    pending: Iterable[PendingContainer], device_count: int, claimed: Collection[ContainerKey]
) -> PendingContainer | None:
    """The pending container an Allocate for ``device_count`` devices is meant for, or None."""
    candidates = [
        item for item in pending if item.key not in claimed and len(item.grants) == device_count
    ]
    return min(candidates, key=lambda item: item.order) if candidates else None


def describe_pending(pending: Sequence[PendingContainer]) -> str:
    """A short list for error messages: ``ns/pod[container]=N GPUs``."""
    if not pending:
        return "none"
    return ", ".join(
        f"{item.namespace}/{item.pod}[{item.container}]={len(item.grants)} GPUs" for item in pending
    )
