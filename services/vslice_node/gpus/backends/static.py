"""The static backend: the node's GPUs from an inventory YAML (DESIGN.md's CLUSTER format).

Used by the local lab and by tests, and on machines without a driver. The file is re-read when
its modification time changes, so editing ``healthy: false`` into it flips the GPU's devices
to Unhealthy in ListAndWatch within a second. A file that turns unreadable or invalid keeps the
last good inventory in force and is reported once per change.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from vslice_core.cluster import load_cluster
from vslice_core.errors import InvalidRequest
from vslice_core.model import NodeInventory

log = logging.getLogger("vslice.deviceplugin.static")


def read_inventory(path: Path, node: str) -> NodeInventory:
    """The inventory of ``node`` in the file; errors name the file and the known nodes."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise InvalidRequest(
            f"inventory {path}: cannot read: {exc.strerror}", field="inventory", value=str(path)
        ) from exc
    try:
        cluster = load_cluster(text)
    except InvalidRequest as exc:
        raise InvalidRequest(
            f"inventory {path}: {exc}", field="inventory", value=str(path)
        ) from exc
    for entry in cluster.nodes:
        if entry.name == node:
            return entry.inventory()
    known = ", ".join(entry.name for entry in cluster.nodes) or "none"
    raise InvalidRequest(
        f"inventory {path} has no node {node!r}; nodes in the file: {known}",
        field="node_name",
        value=node,
    )


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return (stat.st_mtime_ns, stat.st_size)


class StaticBackend:
    name = "static"

    def __init__(self, path: Path, node: str, *, poll_s: float = 0.5) -> None:
        self.path = path
        self.node = node
        self.poll_s = poll_s
        self._stamp = _stamp(path)
        self._current = read_inventory(path, node)  # a bad file at start is a startup error
        self._stop = threading.Event()

    def inventory(self) -> NodeInventory:
        stamp = _stamp(self.path)
        if stamp != self._stamp:
            self._stamp = stamp
            try:
                self._current = read_inventory(self.path, self.node)
                log.info("inventory reloaded", extra={"gpus": len(self._current.gpus)})
            except InvalidRequest as exc:
                log.error(
                    "inventory unusable; keeping the last good one", extra={"error": str(exc)}
                )
        return self._current

    def minors(self) -> dict[str, int]:
        return {gpu.uuid: gpu.index for gpu in self._current.gpus}

    def wait_for_change(self, timeout_s: float) -> None:
        self._stop.wait(min(timeout_s, self.poll_s))

    def close(self) -> None:
        self._stop.set()
