"""Building an RFC 6902 JSON Patch for a pod, with RFC 6901 pointer escaping.

Annotation and label keys contain ``/`` (``vslice.io/allocation``): in a pointer ``~`` is
written ``~0`` and ``/`` is written ``~1``, in that order, or the apiserver patches the
wrong path.
"""

from __future__ import annotations

import copy
from typing import Any

Path = tuple[str | int, ...]


def escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def pointer(path: Path) -> str:
    return "".join(f"/{escape(str(token))}" for token in path)


class PodPatch:
    """Records the operations that turn a pod into its mutated form.

    ``pod`` is a private copy with every recorded change applied, so later rules see the
    effect of earlier ones and the final patch applies cleanly to the original.
    """

    def __init__(self, pod: dict[str, Any]) -> None:
        self.pod = copy.deepcopy(pod)
        self.ops: list[dict[str, Any]] = []

    def set(self, path: Path, value: Any) -> None:
        """Set the value at ``path``, adding any missing parent objects first."""
        parent = self._parent(path)
        key = path[-1]
        if isinstance(parent, list):
            assert isinstance(key, int)
            if parent[key] == value:
                return
            parent[key] = value
            self.ops.append({"op": "replace", "path": pointer(path), "value": value})
            return
        if key in parent and parent[key] == value:
            return
        op = "replace" if key in parent else "add"
        parent[key] = copy.deepcopy(value)
        self.ops.append({"op": op, "path": pointer(path), "value": value})

    def remove(self, path: Path) -> None:
        """Remove the value at ``path`` if it is there (nothing to do otherwise)."""
        node: Any = self.pod
        for token in path[:-1]:
            if isinstance(node, dict):
                node = node.get(token)
            elif isinstance(node, list) and isinstance(token, int) and 0 <= token < len(node):
                node = node[token]  # a container of spec.containers, by position
            else:
                node = None
        if isinstance(node, dict) and path[-1] in node:
            del node[path[-1]]
            self.ops.append({"op": "remove", "path": pointer(path)})

    def append(self, path: Path, value: Any) -> None:
        """Append ``value`` to the list at ``path``, creating the list when missing."""
        parent = self._parent(path)
        key = path[-1]
        if not isinstance(parent, dict) or key not in parent or parent[key] is None:
            self.set(path, [value])
            return
        parent[key].append(copy.deepcopy(value))
        self.ops.append({"op": "add", "path": pointer((*path, "-")), "value": value})

    def _parent(self, path: Path) -> Any:
        node: Any = self.pod
        for depth, token in enumerate(path[:-1]):
            if isinstance(node, dict) and node.get(token) is None:
                node[token] = {}
                self.ops.append({"op": "add", "path": pointer(path[: depth + 1]), "value": {}})
            node = node[token]
        return node
