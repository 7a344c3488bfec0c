"""One consistent reading of the cluster: node inventories, pod allocations, and the ledger.

Built from the raw Node and Pod objects (as the API sends them), with the core's codecs
and ledger, so ``client.gpus()``, ``client.allocations()`` and ``client.plan()`` count usage
exactly as the extender does. A malformed annotation never breaks the view: the node or
pod is left out and the reason is kept in :attr:`ClusterSnapshot.problems`. Pods that ask
for vslice resources but are not placed yet are kept in :attr:`ClusterSnapshot.pending`, so
``decide`` can say why each one waits.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from vslice_core.annotations import ALLOCATION, NODE_GPUS, decode_allocation, decode_node_gpus
from vslice_core.errors import DecodeError, InvalidRequest
from vslice_core.ledger import Ledger, charges
from vslice_core.model import Allocation, Decision, Gpu, GpuUsage, NodeInventory, PodRequest
from vslice_core.requests import pod_request, uses_gpus

from vslice.tables import AllocationRow, AllocationTable, GpuRow, GpuTable

FINISHED_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True)
class PodAllocation:
    """A live pod's allocation as read from its ``vslice.io/allocation`` annotation."""

    namespace: str
    name: str
    uid: str
    phase: str
    allocation: Allocation

    @property
    def holder(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class PendingPod:
    """A pod that asks for vslice resources and is not placed yet (no node, no allocation)."""

    namespace: str
    name: str
    request: PodRequest

    @property
    def holder(self) -> str:
        return f"{self.namespace}/{self.name}"


def internal_ip(node: Mapping[str, Any]) -> str:
    """The Node's InternalIP from ``status.addresses`` (empty when it reports none)."""
    addresses = (node.get("status") or {}).get("addresses") or []
    return next(
        (
            str(a.get("address") or "")
            for a in addresses
            if isinstance(a, Mapping) and a.get("type") == "InternalIP"
        ),
        "",
    )


@dataclass
class ClusterSnapshot:
    """Nodes with vslice GPUs and the live pods holding slices of them."""

    inventories: dict[str, NodeInventory] = field(default_factory=dict)
    pods: list[PodAllocation] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    pending: list[PendingPod] = field(default_factory=list)
    addresses: dict[str, str] = field(default_factory=dict)
    """Node name -> InternalIP, for the nodes with vslice GPUs."""
    _ledger: Ledger | None = field(default=None, init=False, repr=False, compare=False)

    @classmethod
    def read(
        cls, nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]
    ) -> ClusterSnapshot:
        snapshot = cls()
        for node in nodes:
            snapshot._add_node(node)
        for pod in pods:
            snapshot._add_pod(pod)
        snapshot.pods.sort(key=lambda p: (p.namespace, p.name))
        snapshot.pending.sort(key=lambda p: (p.namespace, p.name))
        return snapshot

    def _add_node(self, node: Mapping[str, Any]) -> None:
        metadata = node.get("metadata") or {}
        name = str(metadata.get("name", ""))
        value = (metadata.get("annotations") or {}).get(NODE_GPUS)
        if value is None:
            return
        try:
            self.inventories[name] = decode_node_gpus(value, name)
        except DecodeError as exc:
            self.problems.append(f"node {name}: {exc}")
            return
        self.addresses[name] = internal_ip(node)

    def _add_pod(self, pod: Mapping[str, Any]) -> None:
        metadata = pod.get("metadata") or {}
        value = (metadata.get("annotations") or {}).get(ALLOCATION)
        phase = str((pod.get("status") or {}).get("phase") or "")
        if value is None and phase == "Pending" and not (pod.get("spec") or {}).get("nodeName"):
            self._add_pending(pod)
        if value is None or phase in FINISHED_PHASES:
            return
        namespace = str(metadata.get("namespace", "default"))
        name = str(metadata.get("name", ""))
        try:
            allocation = decode_allocation(value)
        except DecodeError as exc:
            self.problems.append(f"pod {namespace}/{name}: {exc}")
            return
        uid = str(metadata.get("uid") or f"{namespace}/{name}")
        self.pods.append(PodAllocation(namespace, name, uid, phase, allocation))

    def _add_pending(self, pod: Mapping[str, Any]) -> None:
        if not uses_gpus(pod):
            return
        metadata = pod.get("metadata") or {}
        namespace = str(metadata.get("namespace", "default"))
        name = str(metadata.get("name", ""))
        try:
            request = pod_request(pod)
        except InvalidRequest as exc:
            self.problems.append(f"pod {namespace}/{name}: {exc}")
            return
        if request.containers:
            self.pending.append(PendingPod(namespace, name, request))

    # --- what the views need ------------------------------------------------------------

    def ledger(self) -> Ledger:
        """The core ledger holding every node and every live allocation (built once; the
        snapshot is a reading of one moment, and ``decide`` does not change the ledger)."""
        if self._ledger is None:
            ledger = Ledger()
            for inventory in self.inventories.values():
                ledger.set_node(inventory)
            for pod in self.pods:
                ledger.add(pod.uid, pod.allocation, namespace=pod.namespace)
            self._ledger = ledger
        return self._ledger

    def decide(self, request: PodRequest) -> Decision:
        """The engine's answer with every node's verdict and numbers (``explain=True``) and,
        when nothing fits, the changed requests that would (``suggest=True``)."""
        return self.ledger().decide(request, explain=True, suggest=True)

    def usage(self) -> dict[tuple[str, str], GpuUsage]:
        """(node, GPU UUID) -> what live allocations take, counted by the core's ``charges``
        (the ledger's own rule: per GPU, the larger of init peak and app containers)."""
        totals: dict[tuple[str, str], GpuUsage] = {}
        for pod in self.pods:
            for uuid, charge in charges(pod.allocation).items():
                key = (pod.allocation.node, uuid)
                before = totals.get(key, GpuUsage())
                totals[key] = GpuUsage(
                    slots=before.slots + charge.slots,
                    memory_mib=before.memory_mib + charge.memory_mib,
                    cores=before.cores + charge.cores,
                )
        return totals

    def gpu_models(self) -> list[str]:
        return sorted({gpu.model for inv in self.inventories.values() for gpu in inv.gpus})

    def gpu_uuids(self) -> list[str]:
        return sorted(gpu.uuid for inv in self.inventories.values() for gpu in inv.gpus)

    def gpu(self, node: str, uuid: str) -> Gpu | None:
        inventory = self.inventories.get(node)
        return next((g for g in inventory.gpus if g.uuid == uuid), None) if inventory else None

    def gpus(self) -> GpuTable:
        usage = self.usage()
        holders = self._holders()
        rows = []
        for name in sorted(self.inventories):
            for gpu in sorted(self.inventories[name].gpus, key=lambda g: g.index):
                used = usage.get((name, gpu.uuid))
                rows.append(
                    GpuRow(
                        node=name,
                        index=gpu.index,
                        uuid=gpu.uuid,
                        model=gpu.model,
                        memory_mib=gpu.memory_mib,
                        memory_used_mib=used.memory_mib if used else 0,
                        cores=gpu.cores,
                        cores_used=used.cores if used else 0,
                        slots=gpu.slots,
                        slots_used=used.slots if used else 0,
                        numa=gpu.numa,
                        healthy=gpu.healthy,
                        cordoned=gpu.cordoned,
                        pods=tuple(holders.get((name, gpu.uuid), ())),
                        address=self.addresses.get(name, ""),
                    )
                )
        return GpuTable(rows)

    def _holders(self) -> dict[tuple[str, str], list[str]]:
        holders: dict[tuple[str, str], list[str]] = {}
        for pod in self.pods:
            for container in pod.allocation.containers:
                for grant in container.gpus:
                    names = holders.setdefault((pod.allocation.node, grant.uuid), [])
                    if pod.holder not in names:
                        names.append(pod.holder)
        return holders

    def allocations(self, namespace: str | None = None) -> AllocationTable:
        rows = [
            self._row(pod, container.name, grant)
            for pod in self.pods
            if namespace is None or pod.namespace == namespace
            for container in pod.allocation.containers
            for grant in sorted(container.gpus, key=lambda g: g.index)
        ]
        return AllocationTable(rows)

    def _row(self, pod: PodAllocation, container: str, grant: Any) -> AllocationRow:
        gpu = self.gpu(pod.allocation.node, grant.uuid)
        return AllocationRow(
            namespace=pod.namespace,
            pod=pod.name,
            node=pod.allocation.node,
            container=container,
            gpu_index=grant.index,
            gpu_uuid=grant.uuid,
            gpu_model=gpu.model if gpu else "unknown",
            memory_mib=grant.memory_mib,
            cores=grant.cores,
            phase=pod.phase,
        )
