"""What extender-path pods hold per namespace, for the quota check of DRA claims.

The extender's ledger counts a pod from its ``vslice.io/allocation`` from the moment the
extender reserves it; the webhook, which checks claims' allocations, learns of the same pods
from a list+watch and counts them the same way (:func:`vslice_core.ledger.allocation_totals`):
a bound pod whose allocation reads counts until it finishes or is deleted; a bound pod whose
annotation was removed or no longer reads keeps what it was last counted with (as the
extender keeps it booked); an allocation on a pod that is not bound counts nothing (vslice
writes it together with the Binding). Pods without vslice's annotation are not kept.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from vslice_core.annotations import decode_allocation
from vslice_core.clusterobjects import allocation_value, metadata_of, node_name, pod_finished
from vslice_core.errors import DecodeError
from vslice_core.ledger import allocation_totals
from vslice_core.model import QuotaUsage

from vslice_control.quota.limits import add_usage

log = logging.getLogger("vslice.quota.pods")


class PodUsage:
    """Watch handler for Pods: each namespace's extender-path usage (see the module docstring).

    Thread-safe; its lock is taken last (it calls nothing while holding it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pods: dict[str, tuple[str, QuotaUsage]] = {}  # uid -> (namespace, totals)
        self._synced = False

    @property
    def synced(self) -> bool:
        """Whether the pods have been listed once."""
        with self._lock:
            return self._synced

    def used(self, namespace: str) -> QuotaUsage:
        with self._lock:
            total = QuotaUsage()
            for where, usage in self._pods.values():
                if where == namespace:
                    total = add_usage(total, usage)
            return total

    def replace(self, items: list[dict[str, Any]]) -> None:
        with self._lock:
            known = dict(self._pods)
        counted: dict[str, tuple[str, QuotaUsage]] = {}
        for pod in items:
            uid = _uid(pod)
            entry = _counted(pod, known.get(uid))
            if entry is not None:
                counted[uid] = entry
        with self._lock:
            self._pods = counted
            self._synced = True

    def apply(self, event: str, obj: dict[str, Any]) -> None:
        uid = _uid(obj)
        with self._lock:
            known = self._pods.get(uid)
        entry = None if event == "DELETED" else _counted(obj, known)
        with self._lock:
            if entry is None:
                self._pods.pop(uid, None)
            else:
                self._pods[uid] = entry


def _counted(
    pod: Mapping[str, Any], known: tuple[str, QuotaUsage] | None
) -> tuple[str, QuotaUsage] | None:
    """What the pod counts now (None: nothing)."""
    if pod_finished(pod) or not node_name(pod):
        return None
    value = allocation_value(pod)
    if value is None:
        return known
    try:
        allocation = decode_allocation(value)
    except DecodeError as error:
        log.warning("unreadable allocation kept at its last count", extra={"error": str(error)})
        return known
    namespace = str(metadata_of(pod).get("namespace") or "default")
    return namespace, allocation_totals(allocation)


def _uid(pod: Mapping[str, Any]) -> str:
    return str(metadata_of(pod).get("uid") or "")
