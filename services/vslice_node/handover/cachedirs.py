"""Removing the region directories (and the limits directories) of pods that are gone.

Allocate creates ``<cache_root>/<pod uid>/<container>`` for every container it serves; nothing
in a container's life removes it. Every ``every_s`` the sweep lists the pods bound to this node
and deletes the uid directories of pods no longer there, once untouched for ``grace_s`` (a pod
object disappears only after the kubelet has stopped its containers, and the grace covers a
list taken just before an Allocate created a directory). Without an answer from the API server
nothing is deleted. The settings ``region_sweep_seconds`` / ``region_grace_seconds`` (10 s /
30 s) set both, so a deleted pod's region and its monitor metrics are gone within a minute.
The limits files under ``limits_root`` (same layout) are swept by a second sweeper alike.
Directories of prepared DRA claims (named by claim UID) are kept while the claim is prepared.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from vslice_core.errors import ClusterError

from vslice_node.nodeapi import NodeApi

log = logging.getLogger("vslice.deviceplugin.cachedirs")


class CacheSweeper:
    def __init__(
        self,
        root: Path,
        api: NodeApi,
        node: str,
        *,
        every_s: float = 60.0,
        grace_s: float = 300.0,
        what: str = "region directory",
        keep: Callable[[], set[str]] = set,
    ) -> None:
        self.root = root
        # Directories named by something other than a pod UID that must stay (the DRA path
        # names them after prepared claims, which it removes itself on unprepare).
        self.keep = keep
        self.what = what
        self.api = api
        self.node = node
        self.every_s = every_s
        self.grace_s = grace_s
        self._due = 0.0

    def maybe_sweep(self, now: float) -> None:
        if now >= self._due:
            self._due = now + self.every_s
            self.sweep()

    def sweep(self) -> list[Path]:
        """Delete stale uid directories; the ones deleted."""
        if not self.root.is_dir():
            return []
        try:
            live = {
                str((pod.get("metadata") or {}).get("uid", ""))
                for pod in self.api.pods_on_node(self.node)
            }
        except ClusterError as exc:
            log.info("cache sweep skipped: no pod list", extra={"error": str(exc)})
            return []
        live |= self.keep()
        oldest = time.time() - self.grace_s
        removed = []
        for entry in self.root.iterdir():
            if entry.name in live or not entry.is_dir() or entry.stat().st_mtime > oldest:
                continue
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
            log.info(f"removed {self.what} of a pod that is gone", extra={"pod_uid": entry.name})
        return removed
