"""What the extender does with state it did not write or cannot read.

- :class:`Proofs`: signs every allocation the extender writes (``vslice.io/allocation-proof``,
  see :mod:`vslice_core.proof`) and tells a proven allocation from an unproven one. Without a
  key file both are off: every allocation counts as proven, as before proofs existed.
- :class:`Reports`: one place that tells operators about an unproven or unreadable
  allocation, an over-booked GPU or a GPU UUID claimed by two nodes: one log line, a counter
  ``vslice_extender_state_problems_total{kind}``, and a Warning event on the pod or node, each
  once per distinct problem (a watch replays the same pod many times), again after a restart.
  What is wrong *now* is in the ledger and the node feed, served at ``GET /status``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from vslice_core.model import GpuUsage
from vslice_core.proof import PROOF, Key, check, sign, signing_key
from vslice_serving.keyfile import load_keys

log = logging.getLogger("vslice.extender.trust")


class Proofs:
    def __init__(self, keys: Mapping[str, Key] | None = None) -> None:
        self._keys = dict(keys or {})
        self._signer = signing_key(self._keys) if self._keys else None

    @classmethod
    def from_file(cls, path: str) -> Proofs:
        """Keys from ``allocation_key_file`` (empty: proofs off); InvalidRequest names it."""
        return cls(load_keys(Path(path)) if path else None)

    @property
    def enabled(self) -> bool:
        return self._signer is not None

    def annotations(self, pod_uid: str, node: str, allocation_text: str) -> dict[str, str]:
        """What the Binding carries besides the allocation: its proof (nothing when off)."""
        if self._signer is None:
            return {}
        return {PROOF: sign(self._signer, pod_uid, node, allocation_text)}

    def problem(
        self, proof: str | None, pod_uid: str, node: str, allocation_text: str
    ) -> str | None:
        """None when the allocation is proven (or proofs are off), else why not."""
        if self._signer is None:
            return None
        return check(self._keys, proof, pod_uid, node, allocation_text)


class Events(Protocol):
    def pod(self, namespace: str, name: str, uid: str, reason: str, message: str) -> None: ...

    def node(self, name: str, reason: str, message: str) -> None: ...


class NoEvents:
    def pod(self, namespace: str, name: str, uid: str, reason: str, message: str) -> None:
        return None

    def node(self, name: str, reason: str, message: str) -> None:
        return None


class Counter(Protocol):
    def problem(self, kind: str) -> None: ...


class Reports:
    """Log + counter + event per distinct problem (see the module docstring)."""

    def __init__(self, events: Events | None = None, counter: Counter | None = None) -> None:
        self._events = events or NoEvents()
        self._counter = counter
        self._seen: dict[tuple[str, str], str] = {}  # (kind, subject) -> detail reported
        self._overbooked: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def _first(self, kind: str, subject: str, detail: str) -> bool:
        with self._lock:
            if self._seen.get((kind, subject)) == detail:
                return False
            self._seen[(kind, subject)] = detail
        if self._counter is not None:
            self._counter.problem(kind)
        return True

    def forget(self, subject: str) -> None:
        """The pod (uid) or node is gone or fine again: a new problem is reported anew."""
        with self._lock:
            for key in [k for k in self._seen if k[1] == subject]:
                del self._seen[key]

    def unproven(self, namespace: str, name: str, uid: str, node: str, why: str) -> None:
        if not self._first("unproven", uid, why):
            return
        message = (
            f"vslice.io/allocation of pod {namespace}/{name} on node {node} has no valid proof "
            f"({why}): counted against the node's capacity, never freeing room; the device "
            "plugin will not deliver it. Delete the pod to resolve."
        )
        log.warning(
            "unproven allocation counted",
            extra={"pod": f"{namespace}/{name}", "node": node, "why": why},
        )
        self._events.pod(namespace, name, uid, "UnprovenAllocation", message)

    def unreadable(self, namespace: str, name: str, uid: str, node: str, error: str) -> None:
        if not self._first("unreadable", uid, error):
            return
        message = (
            f"vslice.io/allocation of running pod {namespace}/{name} cannot be read ({error}): "
            f"which GPUs it holds is unknown, so node {node} takes no new GPU pods until the "
            "pod is deleted or finishes."
        )
        log.warning(
            "unreadable allocation blocks node",
            extra={"pod": f"{namespace}/{name}", "node": node, "error": error},
        )
        self._events.pod(namespace, name, uid, "UnreadableAllocation", message)
        self._events.node(node, "UnreadableAllocation", message)

    def overbooked(self, found: Mapping[str, Mapping[str, GpuUsage]]) -> None:
        """Report GPUs that became over-booked since the last call (``Ledger.overbooked``)."""
        now = {(node, uuid) for node, gpus in found.items() for uuid in gpus}
        with self._lock:
            new = sorted(now - self._overbooked)
            self._overbooked = now
        for node, uuid in new:
            usage = found[node][uuid]
            if self._counter is not None:
                self._counter.problem("overbooked")
            message = (
                f"GPU {uuid} on node {node} is over-booked: {usage.memory_mib} MiB, "
                f"{usage.cores} % cores, {usage.slots} slices counted, more than it has "
                "(an allocation vslice did not make or cannot vouch for); nothing more is "
                "placed on it until the usage is back within capacity."
            )
            log.warning("gpu over-booked", extra={"node": node, "gpu": uuid})
            self._events.node(node, "GpuOverbooked", message)

    def duplicate_gpu(self, uuid: str, node: str, owner: str) -> None:
        if not self._first("duplicate_gpu", f"{node}/{uuid}", owner):
            return
        message = (
            f"GPU {uuid} on node {node} is refused: node {owner} already claims the same UUID. "
            "Fix the inventory of one of the nodes."
        )
        log.warning("gpu uuid claimed twice", extra={"gpu": uuid, "node": node, "owner": owner})
        self._events.node(node, "DuplicateGpuUuid", message)
