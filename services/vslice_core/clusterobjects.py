"""Reading Nodes and Pods as the API server sends them (plain dicts): one reader for every
part that turns cluster objects into the ledger's input.

The extender's feed, the SDK's snapshot (``vslice top``, ``client.plan``) and
``vslice plan --from-dump`` all read the same three things, and must agree on them or a view
would show room the extender does not see:

- a node's GPU inventory: vslice's ``vslice.io/node-gpus`` annotation, or, on a node whose
  device plugin is HAMi's, its ``hami.io/node-nvidia-register`` (vslice's wins when both are
  there);
- a pod's allocation: ``vslice.io/allocation``;
- whether a pod is finished: phase ``Succeeded`` or ``Failed``. Its containers have stopped
  for good and the kubelet gave their devices back, so what it held is free. A pod that is
  being deleted is *not* finished: its containers may still run (and use the GPU) through
  the grace period, so it keeps its slice until the object is gone.

Malformed values raise :class:`~vslice_core.errors.DecodeError` (an ``InvalidRequest``); each
caller decides what that means for it (the extender blocks the node, a view lists a problem,
``plan --from-dump`` refuses the file).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from vslice_core.annotations import (
    ALLOCATION,
    HAMI_NODE_REGISTER,
    NODE_GPUS,
    decode_allocation,
    decode_hami_node_register,
    decode_node_gpus,
)
from vslice_core.model import Allocation, NodeInventory

FINISHED_PHASES = frozenset({"Succeeded", "Failed"})


def metadata_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    found = obj.get("metadata")
    return found if isinstance(found, Mapping) else {}


def annotations_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    found = metadata_of(obj).get("annotations")
    return found if isinstance(found, Mapping) else {}


def object_name(obj: Mapping[str, Any]) -> str:
    return str(metadata_of(obj).get("name", ""))


def phase(pod: Mapping[str, Any]) -> str:
    status = pod.get("status")
    return str(status.get("phase") or "") if isinstance(status, Mapping) else ""


def node_name(pod: Mapping[str, Any]) -> str:
    """The node the pod is bound to; empty while it is not."""
    spec = pod.get("spec")
    return str(spec.get("nodeName") or "") if isinstance(spec, Mapping) else ""


def pod_finished(pod: Mapping[str, Any]) -> bool:
    """Whether the pod ended for good (see the module docstring for why deletion is not)."""
    return phase(pod) in FINISHED_PHASES


def pod_deleting(pod: Mapping[str, Any]) -> bool:
    """Whether the pod's deletion has begun (``metadata.deletionTimestamp``)."""
    return bool(metadata_of(pod).get("deletionTimestamp"))


def has_inventory(node: Mapping[str, Any]) -> bool:
    """Whether the node carries an inventory annotation vslice reads (valid or not)."""
    found = annotations_of(node)
    return NODE_GPUS in found or HAMI_NODE_REGISTER in found


def node_inventory(node: Mapping[str, Any]) -> NodeInventory | None:
    """The node's GPU inventory from its annotations; None without one. Raises DecodeError."""
    name = object_name(node)
    found = annotations_of(node)
    if NODE_GPUS in found:
        return decode_node_gpus(str(found[NODE_GPUS]), name)
    if HAMI_NODE_REGISTER in found:
        return decode_hami_node_register(str(found[HAMI_NODE_REGISTER]), name)
    return None


def allocation_value(pod: Mapping[str, Any]) -> str | None:
    """The pod's raw ``vslice.io/allocation`` value; None without one."""
    value = annotations_of(pod).get(ALLOCATION)
    return None if value is None else str(value)


def pod_allocation(pod: Mapping[str, Any]) -> Allocation | None:
    """The pod's allocation; None without one. Raises DecodeError."""
    value = allocation_value(pod)
    return None if value is None else decode_allocation(value)


__all__ = [
    "FINISHED_PHASES",
    "allocation_value",
    "annotations_of",
    "has_inventory",
    "metadata_of",
    "node_inventory",
    "node_name",
    "object_name",
    "phase",
    "pod_allocation",
    "pod_deleting",
    "pod_finished",
]


@dataclass(frozen=True)
class HeldBy:
    """The pod holding a recorded allocation, as preemption compares pods."""

    name: str
    priority: int  # spec.priority (the admission's number from the PriorityClass; 0 unset)
    started_s: float  # status.startTime, else creationTimestamp, in epoch seconds (0: unknown)


def held_by(pod: Mapping[str, Any]) -> HeldBy:
    spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
    status = pod.get("status") if isinstance(pod.get("status"), Mapping) else {}
    priority = spec.get("priority") if isinstance(spec, Mapping) else None
    when = (status or {}).get("startTime") or metadata_of(pod).get("creationTimestamp")
    return HeldBy(
        name=str(metadata_of(pod).get("name", "")),
        priority=priority if isinstance(priority, int) and not isinstance(priority, bool) else 0,
        started_s=_epoch(when),
    )


def _epoch(stamp: object) -> float:
    """An RFC 3339 time as the API server writes it (``2026-12-05T03:20:00Z``), in seconds;
    0 for anything else (an unknown start counts as the oldest: it is evicted last)."""
    if not isinstance(stamp, str):
        return 0.0
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0
