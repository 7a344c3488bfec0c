"""The device board: the current list of virtual devices and their health, shared by the
backend (which updates it) and every ListAndWatch stream (which waits for changes).

Each change bumps ``version``; a stream remembers the version it last sent and blocks on the
board's condition until a newer one exists, so health changes reach the kubelet at once.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from vslice_node.deviceplugin.devices import VirtualDevice


class DeviceBoard:
    def __init__(self, devices: Sequence[VirtualDevice] = ()) -> None:
        self._changed = threading.Condition()
        self._devices: tuple[VirtualDevice, ...] = tuple(devices)
        self._version = 0
        self._closed = False

    def snapshot(self) -> tuple[int, tuple[VirtualDevice, ...]]:
        with self._changed:
            return self._version, self._devices

    def update(self, devices: Sequence[VirtualDevice]) -> bool:
        """Publish ``devices``; True when they differ from what streams last saw."""
        new = tuple(devices)
        with self._changed:
            if new == self._devices:
                return False
            self._devices = new
            self._version += 1
            self._changed.notify_all()
            return True

    def wait_newer(
        self, version: int, timeout_s: float
    ) -> tuple[int, tuple[VirtualDevice, ...]] | None:
        """The devices once newer than ``version``; None on timeout or when closed."""
        with self._changed:
            self._changed.wait_for(lambda: self._version > version or self._closed, timeout_s)
            if self._version > version and not self._closed:
                return self._version, self._devices
            return None

    def close(self) -> None:
        """Wake every waiting stream so it can end."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    @property
    def closed(self) -> bool:
        with self._changed:
            return self._closed
