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

What lies below a uid directory was written by the pod's containers (the region directory is
theirs to write), so the removal is done by :func:`remove_tree`, which never follows a link and
holds at most two directories open however deep the tree: ``shutil.rmtree`` of Python 3.11
recurses once per level and a container's nest of a thousand directories raised
``RecursionError`` out of the sweep, every time, so no other pod's directory was swept again.
An entry of the root that is not a plain directory (a link, a file) is not vslice's: it is
left alone, not followed, and logged once.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
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
        self._strange: set[str] = set()  # root entries that are no directory, logged once

    def maybe_sweep(self, now: float) -> bool:
        """Sweep when due; whether it was."""
        if now < self._due:
            return False
        self._due = now + self.every_s
        self.sweep()
        return True

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
        try:
            root = os.open(self.root, _DIRECTORY)
        except OSError as exc:
            log.warning(f"cannot open the {self.what} root", extra={"error": str(exc)})
            return []
        try:
            return self._sweep(root, live, time.time() - self.grace_s)
        finally:
            os.close(root)

    def _sweep(self, root: int, live: set[str], oldest: float) -> list[Path]:
        removed = []
        strange: set[str] = set()
        with os.scandir(root) as listing:
            names = sorted(entry.name for entry in listing)
        for name in names:
            if name in live:
                continue
            try:
                info = os.stat(name, dir_fd=root, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if not stat.S_ISDIR(info.st_mode):
                strange.add(name)
                continue
            if info.st_mtime > oldest:
                continue
            try:
                remove_tree(root, name)
            except OSError as exc:
                log.warning(
                    f"cannot remove {self.what} of a pod that is gone",
                    extra={"pod_uid": name, "error": str(exc)},
                )
                continue
            removed.append(self.root / name)
            log.info(f"removed {self.what} of a pod that is gone", extra={"pod_uid": name})
        for name in sorted(strange - self._strange):
            log.warning(
                f"not a directory, left alone beside the {self.what}s",
                extra={"path": str(self.root / name)},
            )
        self._strange = strange
        return removed


_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


def _open_below(name: str, parent: int) -> int:
    # O_NOFOLLOW: a link put where a directory was opens nothing (ELOOP), so nothing outside
    # the tree is ever listed or unlinked.
    return os.open(name, _DIRECTORY | os.O_NOFOLLOW, dir_fd=parent)


def _clear(directory: int) -> list[str]:
    """Unlink every entry of ``directory`` but its subdirectories; their names."""
    with os.scandir(directory) as listing:
        entries = list(listing)
    below = []
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            below.append(entry.name)
        else:
            os.unlink(entry.name, dir_fd=directory)  # a link is removed, never followed
    return below


def _identity(fd: int) -> tuple[int, int]:
    info = os.fstat(fd)
    return info.st_dev, info.st_ino


def remove_tree(parent: int, name: str) -> None:
    """Remove the directory ``name`` of the directory open as ``parent``, with all it holds.

    Depth first without recursion: a stack of names, and only the current directory open
    (it is left through ``..``, checked to be the directory it was entered from, so a tree
    moved while it is removed stops the removal rather than letting it climb out). Raises
    ``OSError`` when something cannot be removed; what was removed stays removed.
    """
    current = _open_below(name, parent)
    try:
        pending = _clear(current)
        # For each directory entered below the top: its parent's pending names, the parent's
        # identity and its own name in the parent.
        stack: list[tuple[list[str], tuple[int, int], str]] = []
        while True:
            if pending:
                below = pending.pop()
                stack.append((pending, _identity(current), below))
                child = _open_below(below, current)
                os.close(current)
                current = child
                pending = _clear(current)
                continue
            if not stack:
                break
            pending, expected, emptied = stack.pop()
            up = os.open("..", _DIRECTORY, dir_fd=current)
            os.close(current)
            current = up
            if _identity(current) != expected:
                raise OSError(errno.ESTALE, "directory moved while being removed", emptied)
            os.rmdir(emptied, dir_fd=current)
    finally:
        os.close(current)
    os.rmdir(name, dir_fd=parent)


def remove_dir(root: Path, name: str) -> None:
    """Remove ``root/name`` and all it holds, as :func:`remove_tree` does (never following a
    link, no recursion, so a tenant's deep nest or planted link cannot stop it or redirect
    it); a link or file planted at ``name`` itself is unlinked, not followed, and a missing
    one is fine. Raises ``OSError`` when something cannot be removed."""
    parent = os.open(root, _DIRECTORY)
    try:
        try:
            info = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(info.st_mode):
            remove_tree(parent, name)
        else:
            os.unlink(name, dir_fd=parent)
    except FileNotFoundError:
        return  # removed meanwhile
    finally:
        os.close(parent)
