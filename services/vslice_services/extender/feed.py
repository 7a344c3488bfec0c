"""Feeding the ledger from the cluster: node inventories, pod allocations, in-flight holds.

The ledger must equal what the annotations say, so a restarted extender rebuilds it from the
first list of nodes and pods and loses nothing:

- :class:`NodeFeed`: a node's GPUs come from ``vslice.io/node-gpus`` (HAMi's
  ``hami.io/node-nvidia-register`` is read when that is absent). A node without a readable
  inventory is taken out of the ledger; the allocations on it stay and return with it.
- :class:`PodFeed`: a bound pod's ``vslice.io/allocation`` is recorded until the pod
  finishes (Succeeded/Failed) or is deleted. A malformed value written by someone else is
  logged and never erases what the ledger already holds for that pod. An allocation on a pod
  that is not bound does not count: vslice writes it together with the Binding, so it can
  only come from someone else and books nothing.
- :class:`Holds`: slices this replica reserved in a filter or a bind whose annotation the
  watch has not shown yet. A pod event without an allocation never releases a hold; a hold
  whose bind never came expires after a TTL.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vslice_core.annotations import (
    ALLOCATION,
    HAMI_NODE_REGISTER,
    NODE_GPUS,
    decode_allocation,
    decode_hami_node_register,
    decode_node_gpus,
)
from vslice_core.errors import DecodeError
from vslice_core.ledger import Ledger
from vslice_core.model import NodeInventory, PodRequest

log = logging.getLogger("vslice.extender.feed")

FINISHED_PHASES = ("Succeeded", "Failed")


def _metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    metadata = obj.get("metadata")
    return metadata if isinstance(metadata, Mapping) else {}


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    annotations = _metadata(obj).get("annotations")
    return annotations if isinstance(annotations, Mapping) else {}


def node_inventory(node: Mapping[str, Any]) -> NodeInventory | None:
    """The node's GPU inventory from its annotations; None without one. Raises DecodeError."""
    name = str(_metadata(node).get("name", ""))
    annotations = _annotations(node)
    if NODE_GPUS in annotations:
        return decode_node_gpus(str(annotations[NODE_GPUS]), name)
    if HAMI_NODE_REGISTER in annotations:
        return decode_hami_node_register(str(annotations[HAMI_NODE_REGISTER]), name)
    return None


class NodeFeed:
    """Watch handler for Nodes."""

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger
        self._applied: dict[str, tuple[Any, Any]] = {}  # name -> annotation values applied
        self._lock = threading.Lock()

    def replace(self, items: list[dict[str, Any]]) -> None:
        present = set()
        for node in items:
            present.add(str(_metadata(node).get("name", "")))
            self._apply(node)
        for name in set(self._ledger.node_names()) - present:
            self._forget(name)

    def apply(self, event: str, obj: dict[str, Any]) -> None:
        if event == "DELETED":
            self._forget(str(_metadata(obj).get("name", "")))
        else:
            self._apply(obj)

    def _apply(self, node: Mapping[str, Any]) -> None:
        name = str(_metadata(node).get("name", ""))
        annotations = _annotations(node)
        values = (annotations.get(NODE_GPUS), annotations.get(HAMI_NODE_REGISTER))
        with self._lock:
            if self._applied.get(name) == values:
                return  # heartbeats and lock changes: the inventory did not change
            self._applied[name] = values
        try:
            inventory = node_inventory(node)
        except DecodeError as exc:
            log.warning(
                "node inventory unreadable; node left out", extra={"node": name, "error": str(exc)}
            )
            self._ledger.remove_node(name)
            return
        if inventory is None:
            self._ledger.remove_node(name)
        else:
            self._ledger.set_node(inventory)

    def _forget(self, name: str) -> None:
        with self._lock:
            self._applied.pop(name, None)
        self._ledger.remove_node(name)


@dataclass
class _Hold:
    node: str
    since: float
    request: PodRequest | None = None
    bound: bool = False


class Holds:
    """This replica's reservations that no pod annotation shows yet, by pod uid."""

    def __init__(self, ttl_seconds: float = 60.0) -> None:
        self._ttl = ttl_seconds
        self._holds: dict[str, _Hold] = {}
        self._lock = threading.Lock()

    def hold(self, uid: str, node: str, request: PodRequest | None = None) -> None:
        with self._lock:
            self._holds[uid] = _Hold(node, time.monotonic(), request)

    def request(self, uid: str) -> PodRequest | None:
        """The request the filter read from the pod (so a bind need not read it again)."""
        with self._lock:
            hold = self._holds.get(uid)
            return hold.request if hold else None

    def mark_bound(self, uid: str) -> None:
        with self._lock:
            if uid in self._holds:
                self._holds[uid].bound = True

    def drop(self, uid: str) -> None:
        with self._lock:
            self._holds.pop(uid, None)

    def node(self, uid: str) -> str | None:
        with self._lock:
            hold = self._holds.get(uid)
            return hold.node if hold else None

    def __contains__(self, uid: object) -> bool:
        with self._lock:
            return uid in self._holds

    def expired(self) -> list[str]:
        """Uids of unbound holds older than the TTL, removed from the table."""
        limit = time.monotonic() - self._ttl
        with self._lock:
            gone = [uid for uid, h in self._holds.items() if not h.bound and h.since < limit]
            for uid in gone:
                del self._holds[uid]
            return gone


class PodFeed:
    """Watch handler for Pods."""

    def __init__(self, ledger: Ledger, holds: Holds) -> None:
        self._ledger = ledger
        self._holds = holds
        self._bad: dict[str, str] = {}  # uid -> malformed value already reported

    def replace(self, items: list[dict[str, Any]]) -> None:
        present = set()
        for pod in items:
            present.add(str(_metadata(pod).get("uid", "")))
            self._apply(pod)
        for uid in set(self._ledger.pod_uids()) - present:
            if uid not in self._holds:
                self._ledger.release(uid)

    def apply(self, event: str, obj: dict[str, Any]) -> None:
        if event == "DELETED":
            uid = str(_metadata(obj).get("uid", ""))
            self._holds.drop(uid)
            self._bad.pop(uid, None)
            self._ledger.release(uid)
        else:
            self._apply(obj)

    def _apply(self, pod: Mapping[str, Any]) -> None:
        metadata = _metadata(pod)
        uid = str(metadata.get("uid", ""))
        phase = (pod.get("status") or {}).get("phase")
        value = _annotations(pod).get(ALLOCATION)
        bound = bool((pod.get("spec") or {}).get("nodeName"))
        if phase in FINISHED_PHASES:
            self._holds.drop(uid)
            self._ledger.release(uid)
        elif value is not None and bound:
            self._record(uid, str(metadata.get("namespace", "default")), str(value), metadata)
        elif uid not in self._holds:
            self._ledger.release(uid)

    def _record(self, uid: str, namespace: str, value: str, metadata: Mapping[str, Any]) -> None:
        try:
            allocation = decode_allocation(value)
        except DecodeError as exc:
            if self._bad.get(uid) != value:  # report each bad value once, not per event
                self._bad[uid] = value
                log.warning(
                    "pod allocation unreadable; previous record kept",
                    extra={"pod": f"{namespace}/{metadata.get('name')}", "error": str(exc)},
                )
            return
        self._ledger.add(uid, allocation, namespace)
        self._holds.drop(uid)
