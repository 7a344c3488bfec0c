"""The node's ``vslice.io/node-gpus`` annotation: the GPU inventory the extender schedules on.

Written together with the node's fixed facts (``extra``: ``vslice.io/memory-backend``, which
``vslice top`` shows), in one patch.

Written when the plugin starts, at once when the inventory or a GPU's health changes, and at
least every ``every_s`` otherwise (so a value someone overwrote heals). After a failed write
(API server unreachable) it retries with capped exponential backoff.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from vslice_core import annotations as ann
from vslice_core.errors import ClusterError
from vslice_core.model import NodeInventory

from vslice_node.nodeapi import NodeApi

log = logging.getLogger("vslice.deviceplugin")

MAX_ANNOTATE_BACKOFF_S = 30.0


class InventoryAnnotation:
    """Writes ``vslice.io/node-gpus`` when the inventory changed or the last write is old;
    after a failure, retries with capped exponential backoff."""

    def __init__(
        self, api: NodeApi, node: str, every_s: float, extra: Mapping[str, str] | None = None
    ) -> None:
        self.api = api
        self.node = node
        self.every_s = every_s
        self.extra = dict(extra or {})
        self.written: str | None = None
        self.last_error = ""
        self._due = 0.0
        self._backoff = 1.0

    def maybe_write(self, inventory: NodeInventory, now: float) -> None:
        value = ann.encode_node_gpus(inventory)
        changed = value != self.written
        # A change is written at once, unless a failure put us into backoff.
        if now < self._due and (self.last_error or not changed):
            return
        try:
            self.api.annotate_node(self.node, {**self.extra, ann.NODE_GPUS: value})
        except ClusterError as exc:
            self.last_error = str(exc)
            self._due = now + self._backoff
            log.warning(
                "cannot write the node's GPU inventory; will retry",
                extra={"error": str(exc), "retry_in_s": self._backoff},
            )
            self._backoff = min(self._backoff * 2, MAX_ANNOTATE_BACKOFF_S)
            return
        if changed:
            log.info("node GPU inventory written", extra={"gpus": len(inventory.gpus)})
        self.written, self.last_error = value, ""
        self._due, self._backoff = now + self.every_s, 1.0

    @property
    def state(self) -> str:
        if self.last_error:
            return f"failing: {self.last_error}"
        return "written" if self.written else "not yet written"
