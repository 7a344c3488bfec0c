"""The ``vslice.io/delivered`` record, written in the background after Allocate answered.

The record says which of a pod's containers got their slice, so the allocator stops
counting them as pending. The allocator keeps its own claim on a container until the record
shows (see :mod:`vslice_node.deviceplugin.allocator`), so nothing depends on the record being
written before the kubelet's answer: Allocate only hands the container to
:meth:`DeliveryWriter.record` (in memory) and returns, and a few writer threads (4) patch the
pods, one patch per pod at a time.

- **Idempotent.** Each pod's value is the containers recorded when the first of them was
  chosen, plus every container this writer was asked to record since, for as long as the pod
  lives. The record only grows, and writing the same value twice changes nothing. Containers of
  one pod that are recorded close together go out in one patch.
- **Retried.** When the API server fails, the writer waits and tries again (0.2 s doubling
  to 2 s, for the whole queue: an unreachable server is not asked once per pod); one error line
  per outage.
- **Dropped for a pod that is gone.** 404 (no such pod) and 409 (the UID precondition: a
  same-named replacement) end that pod's entry; so does :meth:`DeliveryWriter.settle` when the
  pod view shows the pod gone.
- **At stop** the writers keep going for up to ``flush_s`` to write what is queued.

The writer's lock guards its entries only; the patch is made without it.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from vslice_core import annotations as ann
from vslice_core.errors import ClusterError

from vslice_node.deviceplugin.podview import PodSnapshot
from vslice_node.nodeapi import NodeApi

log = logging.getLogger("vslice.deviceplugin.delivered")

BACKOFF_S = 0.2
MAX_BACKOFF_S = 2.0


@dataclass
class _Entry:
    namespace: str
    name: str
    uid: str
    since: float  # monotonic time of the first record: the pod existed then
    turn: int  # the writer takes the lowest first; a failed entry goes to the back
    containers: set[str] = field(default_factory=set)
    written: frozenset[str] = frozenset()
    busy: bool = False  # a patch of this entry is in flight

    @property
    def dirty(self) -> bool:
        return not self.busy and self.containers != self.written


class DeliveryWriter:
    def __init__(
        self,
        api: NodeApi,
        node: str,
        *,
        backoff_s: float = BACKOFF_S,
        max_backoff_s: float = MAX_BACKOFF_S,
        workers: int = 4,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self.workers = workers
        self.node = node
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self._clock = clock
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._entries: dict[str, _Entry] = {}  # pod uid -> its record
        self._resume_at = 0.0  # after a failure: no patch before this
        self._failures = 0
        self._turns = itertools.count()
        self._stop_at: float | None = None
        self._threads: list[threading.Thread] = []
        self.writes = 0

    def start(self) -> None:
        # A few patches in flight at once: a burst of pods is recorded in a fraction of the
        # time one writer would take (each patch is a round trip), without a thread per pod.
        self._threads = [
            threading.Thread(target=self._run, name=f"delivered-writer-{n}", daemon=True)
            for n in range(self.workers)
        ]
        for thread in self._threads:
            thread.start()

    def stop(self, flush_s: float = 2.0) -> None:
        """Write what is queued for up to ``flush_s`` seconds, then end the threads."""
        with self._changed:
            self._stop_at = self._clock() + flush_s
            self._changed.notify_all()
        deadline = time.monotonic() + flush_s + 15  # a patch in flight has its own timeout
        for thread in self._threads:
            thread.join(timeout=max(deadline - time.monotonic(), 0))

    # -- the allocator's side ------------------------------------------------------------------

    def record(
        self, namespace: str, name: str, uid: str, container: str, recorded: Iterable[str]
    ) -> None:
        """Queue ``container`` of pod ``uid`` as delivered; ``recorded`` is what the pod's
        record held when the container was chosen."""
        with self._changed:
            entry = self._entries.get(uid)
            if entry is None:
                entry = self._entries[uid] = _Entry(
                    namespace, name, uid, self._clock(), next(self._turns)
                )
            entry.containers.update(recorded)
            entry.containers.add(container)
            self._changed.notify_all()

    def settle(self, snapshot: PodSnapshot) -> None:
        """Forget the entries of pods ``snapshot`` shows gone: seen deleted, or missing from a
        list started after the entry was made."""
        present = snapshot.uids()
        with self._changed:
            for uid, entry in list(self._entries.items()):
                if uid in snapshot.gone or (
                    uid not in present and snapshot.listed_at >= entry.since
                ):
                    del self._entries[uid]

    def waiting(self) -> int:
        """Pods whose record is not written yet."""
        with self._lock:
            return sum(1 for e in self._entries.values() if e.containers != e.written)

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Wait until every queued record is written (or dropped); False on timeout. A write
        waiting out a failure's backoff is tried at once (for tests and anyone who needs the
        record now)."""
        deadline = self._clock() + timeout_s
        with self._changed:
            self._resume_at = 0.0  # a caller waiting now wants the retry now
            self._changed.notify_all()
            while any(e.containers != e.written for e in self._entries.values()):
                left = deadline - self._clock()
                if left <= 0:
                    return False
                self._changed.wait(min(left, 0.05))
            return True

    # -- the writer thread ---------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            taken = self._next()
            if taken is None:
                return
            entry, containers = taken
            try:
                self._patch(entry, containers)
            except ClusterError as exc:
                self._failed(entry, exc)
            except Exception as exc:  # the writer must outlive any one failure
                log.exception("delivered record failed", extra={"pod": self._name(entry)})
                self._failed(entry, ClusterError(str(exc)))
            else:
                self._written(entry, containers)

    def _next(self) -> tuple[_Entry, frozenset[str]] | None:
        """The next record to write and its containers (taken under the lock: record() may
        add to them meanwhile), waiting for one; None once stopped and done."""
        with self._changed:
            while True:
                now = self._clock()
                dirty = [e for e in self._entries.values() if e.dirty]
                if self._stop_at is not None and (not dirty or now >= self._stop_at):
                    if dirty:
                        log.warning(
                            "stopping with delivered records unwritten",
                            extra={"pods": sorted(self._name(e) for e in dirty)},
                        )
                    return None
                if dirty and now >= self._resume_at:
                    entry = min(dirty, key=lambda e: e.turn)  # oldest first: fair in a burst
                    entry.busy = True
                    return entry, frozenset(entry.containers)
                wait = self._resume_at - now if dirty else None
                if self._stop_at is not None:
                    wait = min(wait if wait is not None else 1.0, max(self._stop_at - now, 0))
                self._changed.wait(wait)

    def _patch(self, entry: _Entry, containers: frozenset[str]) -> None:
        value = ann.encode_delivered(
            ann.Delivery(node=self.node, containers=sorted(containers), time=datetime.now(UTC))
        )
        # The UID precondition: a same-named replacement pod answers 409, never gets the record.
        self.api.annotate_pod(entry.namespace, entry.name, entry.uid, {ann.DELIVERED: value})

    def _written(self, entry: _Entry, containers: frozenset[str]) -> None:
        with self._changed:
            entry.busy = False
            entry.written = containers
            self.writes += 1
            if self._failures:
                log.info("delivered records written again", extra={"pod": self._name(entry)})
            self._failures = 0
            self._resume_at = 0.0
            self._changed.notify_all()

    def _failed(self, entry: _Entry, exc: ClusterError) -> None:
        with self._changed:
            entry.busy = False
            if exc.code in (404, 409):
                log.warning(
                    "pod is gone; delivery not recorded",
                    extra={"pod": self._name(entry), "error": str(exc)},
                )
                self._entries.pop(entry.uid, None)
            else:
                self._failures += 1
                delay = min(self.backoff_s * 2 ** min(self._failures - 1, 10), self.max_backoff_s)
                self._resume_at = self._clock() + delay
                entry.turn = next(self._turns)  # one pod the server refuses blocks no other
                # Once per outage at error level, then quietly until it is over.
                level = logging.ERROR if self._failures == 1 else logging.DEBUG
                log.log(
                    level,
                    "cannot record delivery yet; will retry",
                    extra={"pod": self._name(entry), "error": str(exc), "retry_in_s": delay},
                )
            self._changed.notify_all()

    @staticmethod
    def _name(entry: _Entry) -> str:
        return f"{entry.namespace}/{entry.name}"
