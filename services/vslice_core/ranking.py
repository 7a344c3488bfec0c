"""Nodes ranked best-first for each node policy, kept sorted as usage changes.

The extender's fast path walks nodes in policy order and stops at the first that fits, so
the order must be ready before a decision, not sorted per decision. Besides the full order,
one list per minimum number of idle GPUs (1 .. ``IDLE_LEVELS``) holds only the nodes with at
least that many idle GPUs: an exclusive or ``mutex`` request for k GPUs walks the level-k
list and never visits the many nodes that cannot take it.

Keys are ``(-load, name)`` for binpack and ``(load, name)`` for spread, so ties go to the
lexically smaller name. Updating one node costs a few binary searches and list moves,
independent of the number of pods.
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Iterator

POLICIES = ("binpack", "spread")
IDLE_LEVELS = 8
# Below this share of the nodes, candidates are sorted directly instead of filtering a list.
_SMALL_CANDIDATE_SHARE = 8


class NodeRanking:
    """Sorted node names per node policy and per minimum of idle GPUs. Not thread-safe."""

    def __init__(self) -> None:
        self._entries: dict[str, tuple[float, int]] = {}  # name -> (load, idle GPUs)
        self._lists: dict[tuple[str, int], list[tuple[float, str]]] = {
            (policy, level): [] for policy in POLICIES for level in range(IDLE_LEVELS + 1)
        }

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, name: str, load: float, idle: int) -> None:
        """Rank a node (replacing its previous rank)."""
        if self._entries.get(name) == (load, idle):
            return
        self.remove(name)
        self._entries[name] = (load, idle)
        for level in range(min(idle, IDLE_LEVELS) + 1):
            bisect.insort(self._lists[("binpack", level)], (-load, name))
            bisect.insort(self._lists[("spread", level)], (load, name))

    def remove(self, name: str) -> None:
        entry = self._entries.pop(name, None)
        if entry is None:
            return
        load, idle = entry
        for level in range(min(idle, IDLE_LEVELS) + 1):
            _delete(self._lists[("binpack", level)], (-load, name))
            _delete(self._lists[("spread", level)], (load, name))

    def key(self, policy: str, name: str) -> tuple[float, str]:
        load = self._entries[name][0]
        return (-load if policy == "binpack" else load, name)

    def walk(
        self, policy: str, names: Collection[str] | None = None, idle: int = 0
    ) -> Iterator[str]:
        """Ranked names (only ``names`` when given, only nodes with >= ``idle`` idle GPUs)."""
        ranked = self._lists[(policy, max(0, min(idle, IDLE_LEVELS)))]
        if names is None:
            return (name for _, name in ranked)
        wanted = set(names)
        if len(wanted) * _SMALL_CANDIDATE_SHARE < len(self._entries):
            known = [n for n in wanted if n in self._entries and self._entries[n][1] >= idle]
            return iter(sorted(known, key=lambda n: self.key(policy, n)))
        return (name for _, name in ranked if name in wanted)


def _delete(ranked: list[tuple[float, str]], key: tuple[float, str]) -> None:
    position = bisect.bisect_left(ranked, key)
    if position < len(ranked) and ranked[position] == key:
        del ranked[position]
