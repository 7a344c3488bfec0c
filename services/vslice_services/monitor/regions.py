"""Finding and reading the containers' shared regions on this node.

The device plugin gives each container the host directory ``<cache_root>/<pod uid>/<container>``
and the shim keeps its region there as ``vslice.cache``; so the path alone says whose region it
is. Reading goes through the shim's own reader (``vslice_shim.open_region``), which validates
magic, version and size and never takes the region's lock. An unreadable region is reported
once per file and problem, and the others are still read.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from vslice_shim import RegionError, RegionSnapshot, open_region

from vslice_services.deviceplugin.delivery import REGION_FILE

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


def find_regions(cache_root: Path) -> list[RegionFile]:
    """Every ``<pod uid>/<container>/vslice.cache`` under ``cache_root``, sorted."""
    if not cache_root.is_dir():
        return []
    return [
        RegionFile(path.parent.parent.name, path.parent.name, path)
        for path in sorted(cache_root.glob(f"*/*/{REGION_FILE}"))
        if path.is_file()
    ]


class RegionReader:
    """Reads every region under ``cache_root``; remembers which problems it already logged."""

    def __init__(self, cache_root: Path) -> None:
        self.cache_root = cache_root
        self.unreadable = 0
        self._reported: set[tuple[Path, str]] = set()

    def read(self) -> Iterator[ContainerRegion]:
        unreadable = 0
        seen: set[tuple[Path, str]] = set()
        for found in find_regions(self.cache_root):
            try:
                with open_region(found.path) as region:
                    snapshot = region.snapshot()
            except RegionError as exc:
                unreadable += 1
                key = (found.path, str(exc))
                seen.add(key)
                if key not in self._reported:
                    log.warning(
                        "region unreadable", extra={"path": str(found.path), "error": str(exc)}
                    )
                continue
            yield ContainerRegion(found, snapshot)
        self._reported = seen  # a problem that went away and comes back is logged again
        self.unreadable = unreadable
