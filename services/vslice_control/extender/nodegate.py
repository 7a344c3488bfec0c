"""The node gate: binds of one replica to one node share that node's lock.

The node lock (``vslice.io/node-lock``, see :mod:`vslice_kube.nodelock`) keeps other replicas
out while this one books on the node. Inside one replica the ledger already books atomically,
so binds to the same node need not wait for each other; they only need the lock to be held,
and the node's pods re-read (``catch_up``) once when the lock comes from another holder,
before any of them books. So:

- the first bind to arrive takes the lock (and catches up); binds arriving while it is held
  join at once and run side by side;
- the last bind to leave releases it, so an idle replica never keeps other replicas out;
- after half its TTL the lock is renewed: new binds wait until the current ones are done,
  then one of them takes the lock again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

from vslice_kube.nodelock import Held


class NodeLocks(Protocol):
    def lock_node(self, node: str) -> Held: ...

    def unlock_node(self, held: Held) -> None: ...


@dataclass
class _Gate:
    changed: threading.Condition = field(default_factory=threading.Condition)
    held: Held | None = None
    inside: int = 0
    busy: bool = False  # one thread is taking, renewing or releasing the lock


class NodeGates:
    def __init__(self, locks: NodeLocks) -> None:
        self._locks = locks
        self._gates: dict[str, _Gate] = {}
        self._guard = threading.Lock()

    @contextmanager
    def entered(self, node: str, catch_up: Callable[[], None]) -> Iterator[None]:
        """Run the block while this replica holds the node's lock (raises what locking raises)."""
        with self._guard:
            gate = self._gates.setdefault(node, _Gate())
        must_take, stale = self._join(gate)
        if must_take:
            self._take(node, gate, stale, catch_up)
        try:
            yield
        finally:
            self._leave(gate)

    def _join(self, gate: _Gate) -> tuple[bool, Held | None]:
        """Join a fresh lock, or become the one thread that takes (or renews) it: then
        ``(True, lease to release first)``."""
        with gate.changed:
            while True:
                held = gate.held
                if not gate.busy and held is not None and time.monotonic() < held.renew_after:
                    gate.inside += 1
                    return False, None
                if not gate.busy and gate.inside == 0:
                    gate.busy, gate.held = True, None
                    return True, held
                gate.changed.wait()

    def _take(
        self, node: str, gate: _Gate, stale: Held | None, catch_up: Callable[[], None]
    ) -> None:
        held = None
        try:
            if stale is not None:
                self._locks.unlock_node(stale)
            held = self._locks.lock_node(node)
            if held.others_since:
                catch_up()
        except BaseException:
            if held is not None:
                self._locks.unlock_node(held)
            self._settle(gate, None, joined=False)
            raise
        self._settle(gate, held, joined=True)

    def _leave(self, gate: _Gate) -> None:
        with gate.changed:
            gate.inside -= 1
            if gate.inside or gate.busy or gate.held is None:
                return
            # The last one out releases; newcomers wait for that, then take it afresh.
            release, gate.held, gate.busy = gate.held, None, True
        try:
            self._locks.unlock_node(release)
        finally:
            self._settle(gate, None, joined=False)

    @staticmethod
    def _settle(gate: _Gate, held: Held | None, *, joined: bool) -> None:
        with gate.changed:
            gate.held, gate.busy = held, False
            gate.inside += int(joined)
            gate.changed.notify_all()
