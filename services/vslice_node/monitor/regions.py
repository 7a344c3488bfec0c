"""Finding and reading the containers' shared regions on this node.

The device plugin gives each container the host directory ``<cache_root>/<pod uid>/<container>``
and the shim keeps its region there as ``vslice.cache``; so the path alone says whose region it
is. Reading goes through the shim's own reader (``vslice_shim.open_region``), which validates
magic, version and size and never takes the region's lock. An unreadable region is reported
once per file and problem, and the others are still read.

Containers come and go while a scrape walks the tree: the device plugin removes a pod's
directory when the pod is deleted. A directory or file that vanishes between listing and
reading is a region that is gone, not an unreadable one, and never fails the scrape.

Everything in a container's directory is the container's to write, so it is hostile input
(docs/security.md): whatever sits at ``vslice.cache`` (a link, a FIFO, a device node, a
directory, a file truncated in a loop) is handed to the reader, which refuses all but a
regular file of a region's size without following or blocking, and is counted as unreadable.
The pod and container directories above it are the node's own; an entry there that is not a
plain directory is skipped without being followed.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from vslice_shim import RegionError, RegionSnapshot, open_region

from vslice_node.handover.container import REGION_FILE

log = logging.getLogger("vslice.monitor.regions")


@dataclass(frozen=True)
class RegionFile:
    pod_uid: str
    container: str
    path: Path


@dataclass(frozen=True)
class ContainerRegion:
    file: RegionFile
    snapshot: RegionSnapshot


def _entries(directory: Path) -> list[os.DirEntry[str]]:
    """The entries of ``directory`` by name; none when it vanished or is no directory now."""
    try:
        with os.scandir(directory) as listing:
            return sorted(listing, key=lambda entry: entry.name)
    except (FileNotFoundError, NotADirectoryError):
        return []


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)
    except FileNotFoundError:
        return False


def find_regions(cache_root: Path) -> list[RegionFile]:
    """Every ``<pod uid>/<container>/vslice.cache`` under ``cache_root``, sorted.

    Written out rather than globbed: ``Path.glob`` raises when a directory it is scanning is
    removed under it, which a pod deletion does at any moment.
    """
    found: list[RegionFile] = []
    for pod in _entries(cache_root):
        if not _is_dir(pod):
            continue
        for container in _entries(Path(pod.path)):
            if not _is_dir(container):
                continue
            path = Path(container.path) / REGION_FILE
            try:
                os.lstat(path)  # whatever it is: the reader decides, without following it
            except OSError:
                continue
            found.append(RegionFile(pod.name, container.name, path))
    return found


def _vanished(exc: RegionError) -> bool:
    cause = exc.__cause__
    return isinstance(cause, OSError) and cause.errno in (errno.ENOENT, errno.ENOTDIR)


class RegionReader:
    """Reads every region under ``cache_root``; remembers which problems it already logged."""

    def __init__(self, cache_root: Path) -> None:
        self.cache_root = cache_root
        self.unreadable = 0
        self._reported: set[tuple[Path, str]] = set()

    def read(self) -> Iterator[ContainerRegion]:
        unreadable = 0
        found = find_regions(self.cache_root)
        for region_file in found:
            try:
                with open_region(region_file.path) as region:
                    snapshot = region.snapshot()
            except RegionError as exc:
                if _vanished(exc):
                    continue  # removed since it was listed: the container is gone
                unreadable += 1
                self._report(region_file.path, exc)
                continue
            yield ContainerRegion(region_file, snapshot)
        # Kept while the file is there: a region its container truncates in a loop is short,
        # then foreign, then fine, and would otherwise log at every scrape.
        listed = {region_file.path for region_file in found}
        self._reported = {key for key in self._reported if key[0] in listed}
        self.unreadable = unreadable

    def _report(self, path: Path, exc: RegionError) -> None:
        key = (path, exc.field or str(exc))
        if key not in self._reported:
            self._reported.add(key)
            log.warning("region unreadable", extra={"path": str(path), "error": str(exc)})
