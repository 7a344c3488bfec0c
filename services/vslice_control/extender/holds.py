"""In-flight holds: slices this replica reserved in a filter or a bind whose annotation the
watch has not shown yet.

A pod event without an allocation never releases a hold; a hold whose bind never came expires
after a TTL, and one for a pod the pod watch has not shown within a short grace (a pod that
does not exist) is dropped then (:meth:`Holds.sweep`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from vslice_core.model import PodRequest


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
            # Re-inserted at the end: the table stays in order of ``since``, so a sweep
            # looks only at the holds old enough to expire, not at every hold of a burst.
            self._holds.pop(uid, None)
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
        return self.sweep(lambda _uid: True, self._ttl)

    def sweep(self, exists: Callable[[str], bool], grace_seconds: float) -> list[str]:
        """Uids of unbound holds older than the TTL, or older than ``grace_seconds`` for a pod
        that does not ``exist`` (the pod watch has not shown it: a filter for a pod that was
        never created, or deleted meanwhile), removed from the table. The grace covers the
        watch lagging behind the scheduler for a pod just created."""
        now = time.monotonic()
        expired, unknown = now - self._ttl, now - grace_seconds
        oldest = max(expired, unknown)  # nothing newer than this can go
        with self._lock:
            gone = []
            for uid, h in self._holds.items():
                if h.since >= oldest:
                    break  # in order of since: the rest are newer
                if not h.bound and (h.since < expired or (h.since < unknown and not exists(uid))):
                    gone.append(uid)
            for uid in gone:
                del self._holds[uid]
            return gone
