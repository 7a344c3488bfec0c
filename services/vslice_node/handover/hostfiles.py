"""The host files GPU containers need: device nodes and driver files, checked and described.

A missing one is not a reason to stop the plugin: the NVIDIA container toolkit or a driver
install may create it later, and the plugin must keep serving the kubelet meanwhile. It is
reported instead: one log line per path when it goes missing, and on /status until it is back.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterable

from vslice_node.handover.cdispec import DeviceNumbers

log = logging.getLogger("vslice.deviceplugin")


def device_numbers(paths: Iterable[str]) -> dict[str, DeviceNumbers]:
    """Type and numbers of each path that is a character or block device (links followed)."""
    found = {}
    for path in paths:
        try:
            info = os.stat(path)
        except OSError:
            continue
        if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode):
            kind = "c" if stat.S_ISCHR(info.st_mode) else "b"
            found[path] = DeviceNumbers(kind, os.major(info.st_rdev), os.minor(info.st_rdev))
    return found


class HostFiles:
    """Remembers which needed host files are missing; logs each one once as it goes missing."""

    def __init__(self) -> None:
        self.missing: list[str] = []

    def check(self, paths: Iterable[str]) -> list[str]:
        missing = [path for path in dict.fromkeys(paths) if not os.path.exists(path)]
        for path in missing:
            if path not in self.missing:
                log.warning("host file for GPU containers missing", extra={"path": path})
        self.missing = missing
        return missing

    @property
    def state(self) -> str:
        return f"missing: {', '.join(self.missing)}" if self.missing else "ok"
