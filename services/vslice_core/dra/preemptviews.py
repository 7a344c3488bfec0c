"""The DRA path as priority preemption sees it: which pending pods wait for vslice claims, what
they ask, and every node as :func:`vslice_core.preemption.plan_preemption` needs it.

kube-scheduler does not preempt for a claim it cannot allocate (docs/preemption.md, "The DRA
path"), so the extender does, with the rule of the extender path. The inputs are the objects
as the API sends them:

- a node's GPUs: vslice's ResourceSlice of that node (:func:`inventory_from_slice`);
- what is used: every allocated claim of vslice's driver (:func:`allocation_of`), counted
  once however many pods share it;
- the possible victims: pods that are the only reservation of an allocated claim (evicting
  one of several pods sharing a claim frees nothing), with their priority and start time;
- the pending pod's request: its one vslice claim, not allocated yet (:func:`request_of`).
  A pod with several vslice claims is left to wait: one request per pod is what the
  placement engine judges.

Objects that do not read back (someone else wrote them) are left out: a slice leaves its node
out (what is used there is not known), a claim leaves its pods out of the victims but still
counts where it can be read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vslice_core.clusterobjects import held_by, metadata_of, node_name, pod_finished
from vslice_core.dra import DEVICE_CLASS, DRIVER
from vslice_core.dra.allocations import allocation_of, reserved_for
from vslice_core.dra.claims import request_of
from vslice_core.dra.devices import inventory_from_slice
from vslice_core.errors import InvalidRequest
from vslice_core.ledger import Ledger
from vslice_core.model import NodeInventory, PodRequest
from vslice_core.preemption import NodeView, RunningPod


@dataclass(frozen=True)
class WaitingPod:
    """A pending pod whose one vslice claim kube-scheduler could not allocate."""

    pod: Mapping[str, Any]
    claim: str  # namespace/name
    request: PodRequest


def _vslice_claim(claim: Mapping[str, Any]) -> bool:
    requests = ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []
    return any(
        isinstance(r, Mapping) and (r.get("exactly") or {}).get("deviceClassName") == DEVICE_CLASS
        for r in requests
    )


def waits_for_claims(pod: Mapping[str, Any]) -> bool:
    """Whether the pod uses ResourceClaims, is not bound, and kube-scheduler marked it
    Unschedulable: a candidate for preemption on the DRA path (its claims decide the rest)."""
    if node_name(pod) or pod_finished(pod) or not (pod.get("spec") or {}).get("resourceClaims"):
        return False
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(
        isinstance(c, Mapping)
        and c.get("type") == "PodScheduled"
        and c.get("status") == "False"
        and c.get("reason") == "Unschedulable"
        for c in conditions
    )


def claim_names(pod: Mapping[str, Any]) -> list[str]:
    """The names of the ResourceClaims a pod uses (a template's claim by its generated name,
    once the controller made it)."""
    generated = {
        str(s.get("name", "")): s.get("resourceClaimName")
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
        if isinstance(s, Mapping)
    }
    names = []
    for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
        if not isinstance(entry, Mapping):
            continue
        name = entry.get("resourceClaimName") or generated.get(str(entry.get("name", "")))
        if name:
            names.append(str(name))
    return names


def waiting_pods(
    pods: Sequence[Mapping[str, Any]], claims: Mapping[tuple[str, str], Mapping[str, Any]]
) -> list[WaitingPod]:
    """The unscheduled pods kube-scheduler marked Unschedulable whose one vslice claim is not
    allocated, highest priority first (then oldest)."""
    found = []
    for pod in pods:
        if not waits_for_claims(pod):
            continue
        namespace = str(metadata_of(pod).get("namespace", "default"))
        ours = [
            claims[(namespace, name)]
            for name in claim_names(pod)
            if (namespace, name) in claims and _vslice_claim(claims[(namespace, name)])
        ]
        if len(ours) != 1 or (ours[0].get("status") or {}).get("allocation"):
            continue
        name = str(metadata_of(pod).get("name", ""))
        try:
            request, _ = request_of(ours[0], namespace, name)
        except (InvalidRequest, ValueError):
            continue
        uid = str(metadata_of(pod).get("uid", ""))
        found.append(
            WaitingPod(
                pod, f"{namespace}/{metadata_of(ours[0]).get('name', '')}", _as(request, uid)
            )
        )
    return sorted(found, key=lambda w: (-held_by(w.pod).priority, held_by(w.pod).started_s))


def _as(request: PodRequest, uid: str) -> PodRequest:
    return request.model_copy(update={"uid": uid}) if uid else request


def node_views(
    slices: Sequence[Mapping[str, Any]],
    claims: Sequence[Mapping[str, Any]],
    pods: Mapping[str, Mapping[str, Any]],
    *,
    leaving: frozenset[str] = frozenset(),
    protected: frozenset[str] = frozenset(),
) -> list[NodeView]:
    """Every node with a vslice ResourceSlice, its usage and its possible victims.

    ``pods``: uid -> pod, the pods the claims are reserved for. ``leaving``: pods already
    evicted (they free nothing new); ``protected``: pods whose budget refused an eviction."""
    inventories: dict[str, NodeInventory] = {}
    for published in slices:
        if ((published.get("spec") or {}).get("driver")) != DRIVER:
            continue
        try:
            inventory = inventory_from_slice(published)
        except (InvalidRequest, ValueError):
            continue
        inventories[inventory.name] = inventory
    ledger = Ledger()
    for inventory in inventories.values():
        ledger.set_node(inventory)
    victims: dict[str, list[RunningPod]] = {}
    for claim in claims:
        try:
            allocation = allocation_of(claim, inventories)
        except (InvalidRequest, ValueError):
            continue
        if allocation is None:
            continue
        meta = metadata_of(claim)
        namespace = str(meta.get("namespace", "default"))
        ledger.add(f"claim/{meta.get('uid', '')}", allocation, namespace=namespace)
        users = reserved_for(claim)
        pod = pods.get(users[0][1]) if len(users) == 1 else None
        if pod is None or pod_finished(pod):
            continue
        uid = users[0][1]
        holder = held_by(pod)
        victims.setdefault(allocation.node, []).append(
            RunningPod(
                uid=uid,
                namespace=namespace,
                name=holder.name,
                priority=holder.priority,
                started_s=holder.started_s,
                evictable=uid not in leaving and uid not in protected,
                allocation=allocation,
            )
        )
    views = []
    for name in sorted(inventories):
        snapshot = ledger.node_snapshot(name)
        if snapshot is not None:
            views.append(NodeView(snapshot.inventory, snapshot.used, victims.get(name, ())))
    return views
