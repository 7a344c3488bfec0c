"""Nodes ranked best-first for each node policy, kept sorted as usage changes.

The extender's fast path walks nodes in policy order and stops at the first that fits, so
the order must be ready before a decision, not sorted per decision. Besides the full order,
one list per minimum number of idle GPUs (1 .. ``IDLE_LEVELS``) holds only the nodes with at
least that many idle GPUs: an exclusive or ``mutex`` request for k GPUs walks the level-k
list and never visits the many nodes that cannot take it.

Keys are ``(-load, name)`` for binpack and ``(load, name)`` for spread, so ties go to the
lexically smaller name. Updating one node costs a few binary searches and list moves,
independent of the number of pods.

A bulk load (every node and bound pod of a first list) moves each node once per recorded pod,
and each move shifts lists as long as the cluster. Between :meth:`NodeRanking.defer` and
:meth:`NodeRanking.resume` a change only notes the node's new rank and every list is sorted
once, afterwards (a decision meanwhile brings the lists up to date first: it moves the few
nodes changed since, or sorts again when many did). Keys are unique (one per node and list), so
the lists are exactly the ones the moves one by one would have left.
"""

from __future__ import annotations

import bisect
import operator
from collections.abc import Collection, Iterator

POLICIES = ("binpack", "spread")
IDLE_LEVELS = 8
# Below this share of the nodes, candidates are sorted directly instead of filtering a list.
_SMALL_CANDIDATE_SHARE = 8
# Below this share of the nodes, deferred changes are moved into the lists one by one instead
# of sorting them again (measured: at 5,000 nodes one move takes ~50 us, a sort ~35 ms).
_SMALL_CHANGE_SHARE = 10

_Entry = tuple[float, int]  # (load, idle GPUs)


class NodeRanking:
    """Sorted node names per node policy and per minimum of idle GPUs. Not thread-safe."""

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}  # name -> (load, idle GPUs)
        self._lists = _empty_lists()
        self._deferred = 0  # open defer() calls: while > 0 the lists are brought up lazily
        # Deferred changes: name -> its entry as the lists still hold it (None: not in them).
        self._pending: dict[str, _Entry | None] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, name: str, load: float, idle: int) -> None:
        """Rank a node (replacing its previous rank)."""
        previous = self._entries.get(name)
        if previous == (load, idle):
            return
        self._entries[name] = (load, idle)
        if self._deferred:
            self._pending.setdefault(name, previous)
        else:
            self._move(name, previous)

    def remove(self, name: str) -> None:
        entry = self._entries.pop(name, None)
        if entry is None:
            return
        if self._deferred:
            self._pending.setdefault(name, entry)
        else:
            self._move(name, entry)

    def defer(self) -> None:
        """Stop moving nodes per change until the matching :meth:`resume` (calls nest)."""
        self._deferred += 1

    def resume(self) -> None:
        """End one :meth:`defer`; the last one brings every list up to date."""
        self._deferred = max(0, self._deferred - 1)
        if not self._deferred:
            self._catch_up()

    def key(self, policy: str, name: str) -> tuple[float, str]:
        load = self._entries[name][0]
        return (-load if policy == "binpack" else load, name)

    def few(self, count: int) -> bool:
        """Whether that many candidates are few enough for :meth:`walk` to sort them directly
        instead of filtering a ranked list of every node."""
        return count * _SMALL_CANDIDATE_SHARE < len(self._entries)

    def walk(
        self, policy: str, names: Collection[str] | None = None, idle: int = 0
    ) -> Iterator[str]:
        """Ranked names (only ``names`` when given, only nodes with >= ``idle`` idle GPUs)."""
        # A decision in the middle of a bulk load walks an up-to-date order, never a stale one.
        self._catch_up()
        ranked = self._lists[(policy, max(0, min(idle, IDLE_LEVELS)))]
        if names is None:
            return map(_name, ranked)
        wanted = set(names)
        if self.few(len(wanted)):
            known = [n for n in wanted if n in self._entries and self._entries[n][1] >= idle]
            return iter(sorted(known, key=lambda n: self.key(policy, n)))
        # Both in C (no Python frame per node): a decision passes over hundreds of nodes.
        return filter(wanted.__contains__, map(_name, ranked))

    def _catch_up(self) -> None:
        """Apply the deferred changes to the lists: move the nodes, or sort anew if many."""
        if not self._pending:
            return
        pending, self._pending = self._pending, {}
        if len(pending) * _SMALL_CHANGE_SHARE < len(self._entries):
            for name, listed in pending.items():
                self._move(name, listed)
            return
        lists = _empty_lists()
        for name, (load, idle) in self._entries.items():
            binpack, spread = (-load, name), (load, name)
            for level in range(min(idle, IDLE_LEVELS) + 1):
                lists[("binpack", level)].append(binpack)
                lists[("spread", level)].append(spread)
        for ranked in lists.values():
            ranked.sort()
        self._lists = lists

    def _move(self, name: str, listed: _Entry | None) -> None:
        """Move a node in the lists from ``listed`` (its old entry) to its entry now."""
        if listed is not None:
            load, idle = listed
            for level in range(min(idle, IDLE_LEVELS) + 1):
                _delete(self._lists[("binpack", level)], (-load, name))
                _delete(self._lists[("spread", level)], (load, name))
        entry = self._entries.get(name)
        if entry is not None:
            load, idle = entry
            binpack, spread = (-load, name), (load, name)
            for level in range(min(idle, IDLE_LEVELS) + 1):
                bisect.insort(self._lists[("binpack", level)], binpack)
                bisect.insort(self._lists[("spread", level)], spread)


_name = operator.itemgetter(1)  # of a list entry (key, name)


def _empty_lists() -> dict[tuple[str, int], list[tuple[float, str]]]:
    return {(policy, level): [] for policy in POLICIES for level in range(IDLE_LEVELS + 1)}


def _delete(ranked: list[tuple[float, str]], key: tuple[float, str]) -> None:
    position = bisect.bisect_left(ranked, key)
    if position < len(ranked) and ranked[position] == key:
        del ranked[position]
