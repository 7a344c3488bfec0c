"""The node gate: binds of one replica to one node share one hold of the node's lock."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from vslice_control.extender.nodegate import NodeGates
from vslice_core.errors import ClusterError
from vslice_kube.nodelock import Held


class CountingLocks:
    """Node locks kept in memory that count how often they are taken and released."""

    def __init__(self, *, others_since: bool = True, renew_after: float = 60.0) -> None:
        self.taken = 0
        self.released = 0
        self.holding = False
        self.others_since = others_since
        self.renew_after = renew_after
        self.fail = False
        self._lock = threading.Lock()

    def lock_node(self, node: str) -> Held:
        with self._lock:
            if self.fail:
                raise ClusterError("lock refused", code=500)
            assert not self.holding, "taken twice without a release"
            self.holding = True
            self.taken += 1
        return Held(node, "v", self.others_since, renew_after=time.monotonic() + self.renew_after)

    def unlock_node(self, held: Held) -> None:
        with self._lock:
            assert self.holding
            self.holding = False
            self.released += 1


def test_binds_arriving_together_share_one_hold_and_the_last_releases_it() -> None:
    locks = CountingLocks()
    gates = NodeGates(locks)
    catch_ups: list[str] = []
    inside = threading.Barrier(4, timeout=5)

    def bind() -> None:
        with gates.entered("n1", lambda: catch_ups.append("n1")):
            inside.wait()  # all four are inside at the same time

    with ThreadPoolExecutor(4) as pool:
        for future in [pool.submit(bind) for _ in range(4)]:
            future.result()
    assert (locks.taken, locks.released, locks.holding) == (1, 1, False)
    assert catch_ups == ["n1"]


def test_a_lock_from_this_replica_needs_no_catch_up() -> None:
    gates = NodeGates(CountingLocks(others_since=False))
    catch_ups: list[str] = []
    with gates.entered("n1", lambda: catch_ups.append("n1")):
        pass
    assert catch_ups == []


def test_an_old_hold_is_renewed_between_binds() -> None:
    locks = CountingLocks(renew_after=0.0)
    gates = NodeGates(locks)
    first_inside, release_first = threading.Event(), threading.Event()

    def long_bind() -> None:
        with gates.entered("n1", lambda: None):
            first_inside.set()
            release_first.wait(5)

    thread = threading.Thread(target=long_bind)
    thread.start()
    first_inside.wait(5)
    release_first.set()
    with gates.entered("n1", lambda: None):  # waits for the first, then takes it anew
        assert locks.holding
    thread.join(5)
    assert (locks.taken, locks.released, locks.holding) == (2, 2, False)


def test_a_failed_lock_lets_the_next_bind_try_again() -> None:
    locks = CountingLocks()
    gates = NodeGates(locks)
    locks.fail = True
    with pytest.raises(ClusterError), gates.entered("n1", lambda: None):
        pass
    locks.fail = False
    with gates.entered("n1", lambda: None):
        assert locks.holding
    assert (locks.taken, locks.released) == (1, 1)


def test_a_failed_catch_up_releases_the_lock() -> None:
    locks = CountingLocks()
    gates = NodeGates(locks)

    def broken() -> None:
        raise ClusterError("list failed", code=503)

    with pytest.raises(ClusterError), gates.entered("n1", broken):
        pass
    assert (locks.taken, locks.released, locks.holding) == (1, 1, False)
