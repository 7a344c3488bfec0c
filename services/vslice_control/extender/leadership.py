"""The leader gate: with leader election, only the active replica binds, without node locks.

The node gate (:mod:`vslice_control.extender.nodegate`) lets several replicas bind side by
side at the cost of two extra API writes per bind (take and release the node's lock). With a
Lease (:class:`vslice_kube.lease.LeaderLease`) only one replica binds at a time, so a bind is
just its Binding write. Two things keep that safe:

- a bind starts only while this replica's Lease is valid with time to spare
  (:meth:`LeaderLease.active`), so no standby can take over while it runs;
- at the start of every term, before the first bind, every bound pod is re-read from the API
  server and fed to the ledger (``catch_up_all``): the previous holder's last binds may not
  have reached this replica's watch yet, and booking past them would double-book.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol

from vslice_kube.nodelock import LockBusy


class Leadership(Protocol):
    def active(self) -> bool: ...

    @property
    def term(self) -> int: ...


class NotActive(LockBusy):
    """This replica does not hold the Lease: the scheduler retries (and reaches the active one)."""


class LeaderGate:
    def __init__(self, lease: Leadership, catch_up_all: Callable[[], None], identity: str) -> None:
        self._lease = lease
        self._catch_up_all = catch_up_all
        self._identity = identity
        self._caught_up_term = 0
        self._guard = threading.Lock()

    @contextmanager
    def entered(self, node: str, catch_up: Callable[[], None]) -> Iterator[None]:
        """Run the block as the active replica (``catch_up`` for one node is not needed: the
        term's full catch-up covers every node)."""
        del node, catch_up
        self._check()
        term = self._lease.term
        if term != self._caught_up_term:
            with self._guard:  # one catch-up per term; the binds behind it wait for it
                if term != self._caught_up_term:
                    self._catch_up_all()
                    self._caught_up_term = term
        # The catch-up took time: the Lease must still be ours, in the term it caught up for
        # (lost and won back meanwhile, another replica may have bound in between).
        self._check()
        if self._lease.term != term:
            raise NotActive(f"replica {self._identity} changed terms while catching up: retry")
        yield

    def prepare(self) -> None:
        """Catch up for the current term now (when the Lease is won, from a thread of its
        own), so the term's first bind does not wait for the re-read of every bound pod."""
        term = self._lease.term
        with self._guard:
            if term != self._caught_up_term and self._lease.active():
                self._catch_up_all()
                self._caught_up_term = term

    def _check(self) -> None:
        if not self._lease.active():
            raise NotActive(
                f"replica {self._identity} is not the active extender (leader election): "
                "retry; the active replica binds"
            )
