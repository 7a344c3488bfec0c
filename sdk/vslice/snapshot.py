"""One consistent reading of the cluster: node inventories, pod allocations, and the ledger.

Built from the raw Node and Pod objects (as the API sends them), read by the core's one
reader of cluster objects (:mod:`vslice_core.clusterobjects`: HAMi's node register included,
"finished" as the extender means it) and counted by its ledger, so ``client.gpus()``,
``client.allocations()`` and ``client.plan()`` count usage exactly as the extender does. A
malformed annotation never breaks the view: the node or pod is left out and the reason is
kept in :attr:`ClusterSnapshot.problems`. Pods that ask for vslice resources but are not
placed yet are kept in :attr:`ClusterSnapshot.pending`, so
``decide`` can say why each one waits.

The DRA path (driver ``gpu.vslice.io``) is read beside it, from ResourceSlices and
ResourceClaims as the API sends them:

- a GPU serves one path (docs/dra.md "Mixing paths"): the annotation lists a node's GPUs on
  the extender path, its ResourceSlice those on the DRA path. :attr:`inventories` holds both
  (a GPU in both, by UUID, counts once, as the annotation says); :meth:`decide` asks the
  engine about one path's GPUs and allocations only, as that path's allocator sees them;
- an allocated claim of the driver is one :class:`PodAllocation` with ``path="dra"``, held by
  the first pod of ``status.reservedFor`` (the others sharing the claim are kept in
  ``shared_with`` and listed on the GPU, but the claim is counted once, as kube-scheduler
  counts it). kube-scheduler counts an allocated claim until it is deallocated, whatever its
  pods' phases, so the views do too; an allocated claim no pod has reserved yet is held by
  the claim itself (phase ``Unreserved``);
- a pod with ``spec.resourceClaims`` naming vslice claims that is not scheduled yet is a
  :class:`PendingPod` with ``path="dra"``, its request read from the claim (or the template)
  with :func:`vslice_core.dra.claims.request_of`.

A malformed slice or claim is left out and named in ``problems``, as an annotation is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from vslice_core.annotations import (
    IDLE_RECLAIM_AT,
    IDLE_SINCE,
    MEMORY_BACKEND,
    decode_allocation,
    decode_moment,
)
from vslice_core.clusterobjects import (
    FINISHED_PHASES,
    allocation_value,
    node_inventory,
    object_name,
    pod_finished,
)
from vslice_core.clusterobjects import phase as pod_phase
from vslice_core.dra import DRIVER as DRA_DRIVER
from vslice_core.dra import claim_label
from vslice_core.dra.allocations import allocation_of, reserved_for
from vslice_core.dra.devices import inventory_from_slice
from vslice_core.errors import ClusterError, DecodeError, InvalidRequest
from vslice_core.ledger import Ledger, charges
from vslice_core.model import Allocation, Decision, Gpu, GpuUsage, NodeInventory, PodRequest
from vslice_core.queueing import QueueState, queue_states
from vslice_core.requests import pod_request, uses_gpus

from vslice import dra
from vslice.tables import AllocationRow, AllocationTable, GpuRow, GpuTable, IdleMark

UNRESERVED: Final = "Unreserved"
"""The phase of a DRA allocation no pod has reserved yet (it holds the GPU all the same)."""
DELETING: Final = "Terminating"
"""What a pod whose deletion has begun is shown as (kubectl's word): it holds its slice through
its grace period, but it is going."""
# What a hand-edited or foreign object can raise while it is read: never past the snapshot.
_UNREADABLE = (InvalidRequest, ValueError, TypeError, AttributeError, KeyError)

Path = Literal["extender", "dra"]
TemplateLookup = Callable[[str, str], Mapping[str, Any] | None]
"""``(namespace, name) -> ResourceClaimTemplate or None``, for pending DRA pods."""


def shown_phase(pod: Mapping[str, Any]) -> str:
    """The phase as a user should read it: ``Terminating`` once deletion has begun (the
    phase stays Running until the object is gone, up to its grace period)."""
    phase = pod_phase(pod)
    if (pod.get("metadata") or {}).get("deletionTimestamp") and phase not in FINISHED_PHASES:
        return DELETING
    return phase


@dataclass(frozen=True)
class PodAllocation:
    """A live pod's allocation as read from its ``vslice.io/allocation`` annotation, or
    (``path="dra"``) an allocated ResourceClaim of vslice's driver and the pod it serves."""

    namespace: str
    name: str
    uid: str
    phase: str
    allocation: Allocation
    path: Path = "extender"
    claim: str = ""
    """``namespace/name`` of the ResourceClaim (DRA path only)."""
    shared_with: tuple[str, ...] = ()
    """Other pods (``namespace/name``) the claim is reserved for: they share this allocation."""
    priority: int = 0
    """The pod's ``spec.priority`` (set from its PriorityClass at admission; 0 without)."""

    @property
    def holder(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class PendingPod:
    """A pod that asks for vslice resources and is not placed yet (no node, no allocation)."""

    namespace: str
    name: str
    request: PodRequest
    path: Path = "extender"
    notes: tuple[str, ...] = ()
    """DRA path: what the engine's answer leaves out (policies DRA cannot express, ...)."""

    @property
    def holder(self) -> str:
        return f"{self.namespace}/{self.name}"


def idle_mark(metadata: Mapping[str, Any]) -> IdleMark | None:
    """The idle mark its node's monitor put on a pod (docs/idle.md); None when the pod is not
    idle; DecodeError for a malformed one."""
    annotations = metadata.get("annotations") or {}
    if IDLE_SINCE not in annotations:
        return None
    since = decode_moment(IDLE_SINCE, str(annotations[IDLE_SINCE]))
    due = annotations.get(IDLE_RECLAIM_AT)
    return IdleMark(since, None if due is None else decode_moment(IDLE_RECLAIM_AT, str(due)))


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
    dra_gpus: set[tuple[str, str]] = field(default_factory=set)
    """(node, GPU UUID) of the GPUs on the DRA path (from ResourceSlices)."""
    idle: dict[str, IdleMark] = field(default_factory=dict)
    """``namespace/name`` -> the idle mark of each live pod its node's monitor marked."""
    memory_backends: dict[str, str] = field(default_factory=dict)
    """Node name -> ``driver`` or ``shim``, as the node agent wrote it (absent: ``shim``)."""
    queued: list[QueueState] = field(default_factory=list)
    """Jobs waiting in a Kueue queue (not admitted yet, so without pods), in queue order;
    empty without Kueue (docs/kueue.md)."""
    _ledgers: dict[str | None, Ledger] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    @classmethod
    def read(
        cls,
        nodes: Iterable[Mapping[str, Any]],
        pods: Iterable[Mapping[str, Any]],
        slices: Iterable[Mapping[str, Any]] = (),
        claims: Iterable[Mapping[str, Any]] = (),
        *,
        templates: TemplateLookup | Mapping[tuple[str, str], Mapping[str, Any]] | None = None,
        workloads: Iterable[Mapping[str, Any]] = (),
    ) -> ClusterSnapshot:
        """Read the objects as the API sent them. ``slices`` and ``claims`` are the DRA
        path's ResourceSlices and ResourceClaims (other drivers' are skipped); ``templates``
        finds the ResourceClaimTemplate of a pending DRA pod whose claim is not made yet (a
        mapping keyed ``(namespace, name)`` or a callable; None: such pods are not listed);
        ``workloads`` are Kueue's Workloads (the queued Jobs)."""
        snapshot = cls()
        states = queue_states(w for w in workloads if isinstance(w, Mapping))
        snapshot.queued = sorted(
            (state for state in states if state.queued),
            key=lambda s: (s.namespace, s.queue, s.position or 0, s.job),
        )
        node_list = list(nodes)
        pod_list = list(pods)
        claim_list = list(claims)
        for node in node_list:
            snapshot._add_node(node)
        addresses = {
            str((node.get("metadata") or {}).get("name", "")): internal_ip(node)
            for node in node_list
            if isinstance(node, Mapping)
        }
        snapshot._add_slices(slices, addresses)
        for pod in pod_list:
            snapshot._add_pod(pod)
        reader = _ClaimReader(snapshot, pod_list, claim_list, templates)
        for claim in claim_list:
            reader.add_claim(claim)
        for pod in pod_list:
            reader.add_pending(pod)
        snapshot.pods.sort(key=lambda p: (p.namespace, p.name, p.claim))
        snapshot.pending.sort(key=lambda p: (p.namespace, p.name))
        return snapshot

    def _add_node(self, node: Mapping[str, Any]) -> None:
        name = object_name(node)
        try:
            inventory = node_inventory(node)
        except DecodeError as exc:
            self.problems.append(f"node {name}: {exc}")
            return
        if inventory is None:
            return
        self.inventories[name] = inventory
        self.addresses[name] = internal_ip(node)
        written = ((node.get("metadata") or {}).get("annotations") or {}).get(MEMORY_BACKEND)
        # Agents from before the choice write nothing: their nodes are shim-only.
        self.memory_backends[name] = written if written in ("driver", "shim") else "shim"

    def _add_slices(
        self, slices: Iterable[Mapping[str, Any]], addresses: Mapping[str, str]
    ) -> None:
        # One slice per node for vslice; should two exist for a node (a replaced slice not
        # yet gone), the newer pool generation is the one kube-scheduler uses.
        newest: dict[str, tuple[int, NodeInventory]] = {}
        for published in slices:
            if not isinstance(published, Mapping):
                self.problems.append(f"ResourceSlice: not an object, got {published!r:.60}")
                continue
            spec = published.get("spec") or {}
            if not isinstance(spec, Mapping) or spec.get("driver") != DRA_DRIVER:
                continue
            try:
                inventory = inventory_from_slice(published)
                generation = int((spec.get("pool") or {}).get("generation") or 0)
            except _UNREADABLE as exc:
                name = (published.get("metadata") or {}).get("name", "?")
                text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                prefix = "" if text.startswith("ResourceSlice") else f"ResourceSlice {name}: "
                self.problems.append(prefix + text)
                continue
            if inventory.name not in newest or generation >= newest[inventory.name][0]:
                newest[inventory.name] = (generation, inventory)
        for name, (_, inventory) in sorted(newest.items()):
            known = self.inventories.get(name)
            if known is None:
                self.inventories[name] = inventory
                self.addresses[name] = addresses.get(name, "")
                added = inventory.gpus
            else:  # GPUs on both paths of one node: the annotation's entry of a GPU wins
                listed = {gpu.uuid for gpu in known.gpus}
                added = [gpu for gpu in inventory.gpus if gpu.uuid not in listed]
                gpus = [*known.gpus, *added]
                self.inventories[name] = known.model_copy(update={"gpus": gpus})
            self.dra_gpus |= {(name, gpu.uuid) for gpu in added}

    def _add_pod(self, pod: Mapping[str, Any]) -> None:
        metadata = pod.get("metadata") or {}
        value = allocation_value(pod)
        phase = pod_phase(pod)
        if not pod_finished(pod):
            self._add_idle(metadata)
        if value is None and phase == "Pending" and not (pod.get("spec") or {}).get("nodeName"):
            self._add_pending(pod)
        if value is None or pod_finished(pod):
            return
        namespace = str(metadata.get("namespace", "default"))
        name = str(metadata.get("name", ""))
        try:
            allocation = decode_allocation(value)
        except DecodeError as exc:
            self.problems.append(f"pod {namespace}/{name}: {exc}")
            return
        uid = str(metadata.get("uid") or f"{namespace}/{name}")
        priority = (pod.get("spec") or {}).get("priority")
        self.pods.append(
            PodAllocation(
                namespace,
                name,
                uid,
                shown_phase(pod),
                allocation,
                priority=priority if isinstance(priority, int) else 0,
            )
        )

    def _add_idle(self, metadata: Mapping[str, Any]) -> None:
        holder = f"{metadata.get('namespace', 'default')}/{metadata.get('name', '')}"
        try:
            mark = idle_mark(metadata)
        except DecodeError as exc:
            self.problems.append(f"pod {holder}: {exc}")
            return
        if mark is not None:
            self.idle[holder] = mark

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

    def ledger(self, path: Path | None = None) -> Ledger:
        """The core ledger of every node and live allocation (``path``: only that path's GPUs
        and allocations, as its allocator counts them). Built once per path; the snapshot is
        a reading of one moment, and ``decide`` does not change the ledger."""
        if path not in self._ledgers:
            ledger = Ledger()
            for inventory in self.inventories.values():
                ledger.set_node(self._on_path(inventory, path))
            for pod in self.pods:
                if path is None or pod.path == path:
                    ledger.add(pod.uid, pod.allocation, namespace=pod.namespace)
            self._ledgers[path] = ledger
        return self._ledgers[path]

    def _on_path(self, inventory: NodeInventory, path: Path | None) -> NodeInventory:
        if path is None:
            return inventory
        want = path == "dra"
        gpus = [g for g in inventory.gpus if ((inventory.name, g.uuid) in self.dra_gpus) == want]
        return inventory.model_copy(update={"gpus": gpus})

    def decide(self, request: PodRequest, path: Path | None = None) -> Decision:
        """The engine's answer with every node's verdict and numbers (``explain=True``) and,
        when nothing fits, the changed requests that would (``suggest=True``); with ``path``,
        over that path's GPUs only (a DRA pod cannot land on an extender-path GPU)."""
        return self.ledger(path).decide(request, explain=True, suggest=True)

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
                        path="dra" if (name, gpu.uuid) in self.dra_gpus else "extender",
                        idle_pods=tuple(
                            h for h in holders.get((name, gpu.uuid), ()) if h in self.idle
                        ),
                        memory_backend=self.memory_backends.get(name, "shim"),
                    )
                )
        return GpuTable(rows)

    def _holders(self) -> dict[tuple[str, str], list[str]]:
        holders: dict[tuple[str, str], list[str]] = {}
        for pod in self.pods:
            for container in pod.allocation.containers:
                for grant in container.gpus:
                    names = holders.setdefault((pod.allocation.node, grant.uuid), [])
                    # Pods sharing one claim all use the GPU: each is listed on it.
                    for holder in (pod.holder, *pod.shared_with):
                        if holder not in names:
                            names.append(holder)
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
        idle = self.idle.get(pod.holder)
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
            path=pod.path,
            idle_since=idle.since if idle else None,
            reclaim_at=idle.reclaim_at if idle else None,
        )


class _ClaimReader:
    """Reads the DRA path into a snapshot: allocated claims as allocations, unscheduled pods
    with vslice claims as pending (kept apart from the extender path's reading above)."""

    def __init__(
        self,
        snapshot: ClusterSnapshot,
        pods: list[Mapping[str, Any]],
        claims: list[Mapping[str, Any]],
        templates: TemplateLookup | Mapping[tuple[str, str], Mapping[str, Any]] | None,
    ) -> None:
        self.snapshot = snapshot
        self.by_uid: dict[str, Mapping[str, Any]] = {}
        self.by_name: dict[tuple[str, str], Mapping[str, Any]] = {}
        for pod in pods:
            meta = pod.get("metadata") if isinstance(pod, Mapping) else None
            if not isinstance(meta, Mapping):
                continue
            key = (str(meta.get("namespace") or "default"), str(meta.get("name") or ""))
            self.by_name[key] = pod
            if meta.get("uid"):
                self.by_uid[str(meta["uid"])] = pod
        self.claims: dict[tuple[str, str], Mapping[str, Any]] = {}
        for claim in claims:
            meta = claim.get("metadata") if isinstance(claim, Mapping) else None
            if isinstance(meta, Mapping):
                key = (str(meta.get("namespace") or "default"), str(meta.get("name") or ""))
                self.claims[key] = claim
        self.templates = templates
        self.fetched: dict[tuple[str, str], Mapping[str, Any] | None] = {}

    # --- allocated claims ------------------------------------------------------------------

    def add_claim(self, claim: Mapping[str, Any]) -> None:
        if not isinstance(claim, Mapping):
            self.snapshot.problems.append(f"ResourceClaim: not an object, got {claim!r:.60}")
            return
        try:
            allocation = allocation_of(claim, self.snapshot.inventories)
            users = reserved_for(claim)
        except _UNREADABLE as exc:
            text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            prefix = (
                "" if text.startswith("ResourceClaim") else f"ResourceClaim {claim_label(claim)}: "
            )
            self.snapshot.problems.append(prefix + text)
            return
        if allocation is None:
            return
        meta = claim.get("metadata") or {}
        namespace = str(meta.get("namespace") or "default")
        label = f"{namespace}/{meta.get('name', '')}"
        # The ledger key: a claim's own uid, apart from pod uids (a pod may also carry an
        # annotation allocation, counted as well).
        key = f"claim/{meta.get('uid') or label}"
        holders = [self._pod_of(namespace, name, uid) for name, uid in users]
        if not holders:
            self.snapshot.pods.append(
                PodAllocation(
                    namespace,
                    str(meta.get("name", "")),
                    key,
                    UNRESERVED,
                    allocation,
                    path="dra",
                    claim=label,
                )
            )
            return
        (name, phase), *others = holders
        self.snapshot.pods.append(
            PodAllocation(
                namespace,
                name,
                key,
                phase,
                allocation,
                path="dra",
                claim=label,
                shared_with=tuple(f"{namespace}/{other}" for other, _ in others),
            )
        )

    def _pod_of(self, namespace: str, name: str, uid: str) -> tuple[str, str]:
        """(name, phase) of a reserving pod; the phase is empty when the pod is not listed."""
        pod = self.by_uid.get(uid) or self.by_name.get((namespace, name))
        return name, shown_phase(pod) if pod else ""

    # --- pending pods ----------------------------------------------------------------------

    def add_pending(self, pod: Mapping[str, Any]) -> None:
        if not isinstance(pod, Mapping):
            return
        spec = pod.get("spec") or {}
        status = pod.get("status") or {}
        if (
            not isinstance(spec, Mapping)
            or not spec.get("resourceClaims")
            or spec.get("nodeName")
            or not isinstance(status, Mapping)
            or status.get("phase") != "Pending"
            or uses_gpus(pod)  # nvidia.com/* limits: the extender path reads it (above)
        ):
            return
        meta = pod.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}
        namespace = str(meta.get("namespace") or "default")
        name = str(meta.get("name") or "")
        try:
            found = dra.pod_request(pod, self._lookup)
        except _UNREADABLE as exc:
            self.snapshot.problems.append(f"pod {namespace}/{name}: {exc}")
            return
        if found is None:
            return
        if self._allocated(namespace, pod):
            return  # allocated, not bound yet: counted as an allocation already
        if found.missing:
            if self.templates is not None:
                names = ", ".join(ref.label(namespace) for ref in found.missing)
                self.snapshot.problems.append(
                    f"pod {namespace}/{name} waits for {names}, which does not exist: create "
                    "it, or change spec.resourceClaims to name one that does"
                )
            if not found.request.containers:
                return
        self.snapshot.pending.append(
            PendingPod(
                namespace,
                name,
                found.request,
                path="dra",
                notes=tuple(dra.notes(pod, found.notes)),
            )
        )

    def _allocated(self, namespace: str, pod: Mapping[str, Any]) -> bool:
        made = dra.generated_claims(pod)
        names = list(made.values()) + [
            str(entry.get("resourceClaimName"))
            for entry in (pod.get("spec") or {}).get("resourceClaims") or []
            if isinstance(entry, Mapping) and entry.get("resourceClaimName")
        ]
        for name in names:
            status = (self.claims.get((namespace, name)) or {}).get("status")
            if isinstance(status, Mapping) and status.get("allocation"):
                return True
        return False

    def _lookup(self, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        if kind == "ResourceClaim":
            return self.claims.get((namespace, name))
        if self.templates is None:
            return None
        key = (namespace, name)
        if key not in self.fetched:
            if isinstance(self.templates, Mapping):
                self.fetched[key] = self.templates.get(key)
            else:
                try:
                    self.fetched[key] = self.templates(namespace, name)
                except ClusterError as exc:
                    self.snapshot.problems.append(
                        f"ResourceClaimTemplate {namespace}/{name} not read: {exc}"
                    )
                    self.fetched[key] = None
        return self.fetched[key]
