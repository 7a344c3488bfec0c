"""Nodes ranked best-first for each node policy, kept sorted as usage changes.

The extender's fast path walks nodes in policy order and stops at the first that fits, so
the order must be ready before a decision, not sorted per decision.

Keys are ``(size, -load, name)`` for binpack and ``(load, name)`` for spread, where ``size``
is the memory of the node's largest GPU (MiB) and ``load`` the share of its GPU memory in use.
Binpack thus fills the nodes of the smallest GPUs first, the fullest first among nodes of one
size, and keeps the large GPUs whole for the slices only they can hold (docs/placement.md,
"Choosing the node"); on a fleet of one GPU size it is the plain ``(-load, name)`` order. Ties
go to the lexically smaller name.

Besides the full order, lists of the same order hold only the nodes that could take
a kind of request, so its walk does not visit the many that cannot:

- one per minimum number of idle GPUs (1 .. ``IDLE_LEVELS``): an exclusive or ``mutex``
  request for k GPUs walks the level-k list;
- for binpack, one per threshold of ``ROOM_LEVELS``, holding the nodes with at least that many
  MiB free on one open GPU: a request for M MiB per GPU walks the list of the largest
  threshold <= M. Binpack puts the fullest nodes first, so without these lists the walk of a
  common request starts with every node that is already full for it;
- within any binpack list, a GPU never gives more than its memory, so a walk for M MiB starts
  by binary search at the first node whose largest GPU has M MiB (the size in the key).

Updating one node costs a few binary searches and list moves per list it is in, independent of
the number of pods.

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
from dataclasses import dataclass

POLICIES = ("binpack", "spread")
IDLE_LEVELS = 8
# MiB free on one GPU that the binpack room lists require, one list per value. Steps of 1.5x
# and 1.33x, not 2x: measured at 5,000 nodes (benchmarks/placement.py), powers of two still
# walked ~300 T4 nodes with 4-6 GiB free per 6 GiB or 50 % request; each level costs a put
# one more list move (~1 us at 5,000 nodes), so finer steps stop paying off.
ROOM_LEVELS = (2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152, 65536)
# Below this share of the nodes, candidates are sorted directly instead of filtering a list.
# Sorting costs a Python key call per candidate (1.5-2 us), filtering the ranked list a set
# lookup in C per node passed (about 20 ns): measured through the extender's filter, sorting
# the 500 candidates kube-scheduler sends at 5,000 nodes cost 0.88 ms a call against 0.32 ms
# filtering, and the two break even near one candidate in 1,000 nodes (20 of 20,000).
_SMALL_CANDIDATE_SHARE = 500
# Below this share of the nodes, deferred changes are moved into the lists one by one instead
# of sorting them again (measured: at 5,000 nodes one move takes ~50 us, a sort ~35 ms).
_SMALL_CHANGE_SHARE = 10

# What a node is ranked by: (load, idle GPUs, its largest GPU's MiB, most MiB free on one GPU).
Entry = tuple[float, int, int, int]
# A list entry: binpack (size, -load, name), spread (load, name); the name is always last.
_Key = tuple[float, float, str] | tuple[float, str]


class NodeRanking:
    """Sorted node names per node policy, minimum of idle GPUs and (binpack) of free MiB on
    one GPU. Not thread-safe."""

    def __init__(self) -> None:
        self._entries: dict[str, Entry] = {}
        self._lists = _empty_lists()
        self._deferred = 0  # open defer() calls: while > 0 the lists are brought up lazily
        # Deferred changes: name -> its entry as the lists still hold it (None: not in them).
        self._pending: dict[str, Entry | None] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, name: str, load: float, idle: int, size: int = 0, room: int = 0) -> None:
        """Rank a node (replacing its previous rank): ``size`` is the MiB of its largest GPU,
        ``room`` the most MiB free on one of its open GPUs."""
        previous = self._entries.get(name)
        entry = (load, idle, size, room)
        if previous == entry:
            return
        self._entries[name] = entry
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

    def key(self, policy: str, name: str) -> _Key:
        load, _, size, _ = self._entries[name]
        return (size, -load, name) if policy == "binpack" else (load, name)

    def few(self, count: int) -> bool:
        """Whether that many candidates are few enough for :meth:`walk` to sort them directly
        instead of filtering a ranked list of every node."""
        return count * _SMALL_CANDIDATE_SHARE < len(self._entries)

    def walk(
        self,
        policy: str,
        names: Collection[str] | None = None,
        idle: int = 0,
        size: int = 0,
        room: int = 0,
    ) -> Iterator[str]:
        """Ranked names: only ``names`` when given, only nodes with >= ``idle`` idle GPUs; for
        binpack, only nodes whose largest GPU has >= ``size`` MiB, and some of those without
        a GPU with ``room`` MiB free are left out too (the lists hold levels of it)."""
        # A decision in the middle of a bulk load walks an up-to-date order, never a stale one.
        self._catch_up()
        binpack = policy == "binpack"
        if names is not None:
            wanted = set(names)
            if self.few(len(wanted)):
                ranks, floor = self._entries, size if binpack else 0
                known = [
                    n for n in wanted if n in ranks and ranks[n][1] >= idle and ranks[n][2] >= floor
                ]
                return iter(sorted(known, key=lambda n: self.key(policy, n)))
        ranked = self._list(binpack, idle, room)
        # All in C (no Python frame per node): a decision passes over hundreds of nodes. The
        # nodes of smaller GPUs are skipped by index, not by slicing (no copy per decision).
        start = bisect.bisect_left(ranked, (size,)) if binpack and size > 0 else 0
        keys = ranked if not start else map(ranked.__getitem__, range(start, len(ranked)))
        listed = map(_name, keys)
        if names is None:
            return listed
        return filter(wanted.__contains__, listed)

    def _list(self, binpack: bool, idle: int, room: int) -> list[_Key]:
        """The shortest list that holds every node with >= ``idle`` idle GPUs and (binpack)
        a GPU with >= ``room`` MiB free: an idle GPU has all its memory free, so the idle
        lists serve exclusive requests, the room lists the others."""
        level = bisect.bisect_right(ROOM_LEVELS, room) if binpack and idle <= 0 else 0
        if level:
            return self._lists.room[level - 1]
        by_idle = self._lists.binpack if binpack else self._lists.spread
        return by_idle[max(0, min(idle, IDLE_LEVELS))]

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
        for name, entry in self._entries.items():
            binpack, spread, idle, room = _placing(name, entry)
            for ranked in lists.binpack[:idle]:
                ranked.append(binpack)
            for ranked in lists.room[:room]:
                ranked.append(binpack)
            for ranked in lists.spread[:idle]:
                ranked.append(spread)
        for ranked in lists.all():
            ranked.sort()
        self._lists = lists

    def _move(self, name: str, listed: Entry | None) -> None:
        """Move a node in the lists from ``listed`` (its old entry) to its entry now."""
        lists = self._lists
        if listed is not None:
            binpack, spread, idle, room = _placing(name, listed)
            for ranked in lists.binpack[:idle]:
                _delete(ranked, binpack)
            for ranked in lists.room[:room]:
                _delete(ranked, binpack)
            for ranked in lists.spread[:idle]:
                _delete(ranked, spread)
        entry = self._entries.get(name)
        if entry is not None:
            binpack, spread, idle, room = _placing(name, entry)
            for ranked in lists.binpack[:idle]:
                bisect.insort(ranked, binpack)
            for ranked in lists.room[:room]:
                bisect.insort(ranked, binpack)
            for ranked in lists.spread[:idle]:
                bisect.insort(ranked, spread)


_name = operator.itemgetter(-1)  # of a list entry (..., name)


def _placing(name: str, entry: Entry) -> tuple[_Key, _Key, int, int]:
    """A node's binpack and spread keys and how many idle-level and room-level lists hold it
    (the first that many of each)."""
    load, idle, size, room = entry
    idle_lists = min(idle, IDLE_LEVELS) + 1
    return (size, -load, name), (load, name), idle_lists, bisect.bisect_right(ROOM_LEVELS, room)


@dataclass(slots=True)
class _Lists:
    """Every ranked list: per policy, index k holds the nodes with >= k idle GPUs; ``room``'s
    index k the nodes with >= ``ROOM_LEVELS[k]`` MiB free on one GPU, in binpack order."""

    binpack: list[list[_Key]]
    spread: list[list[_Key]]
    room: list[list[_Key]]

    def all(self) -> list[list[_Key]]:
        return [*self.binpack, *self.spread, *self.room]


def _empty_lists() -> _Lists:
    return _Lists(
        binpack=[[] for _ in range(IDLE_LEVELS + 1)],
        spread=[[] for _ in range(IDLE_LEVELS + 1)],
        room=[[] for _ in ROOM_LEVELS],
    )


def _delete(ranked: list[_Key], key: _Key) -> None:
    position = bisect.bisect_left(ranked, key)
    if position < len(ranked) and ranked[position] == key:
        del ranked[position]
