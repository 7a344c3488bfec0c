"""Where the node's GPUs come from: NVML on a real node, an inventory YAML in labs and tests.

Every backend answers the same three questions (:class:`GpuBackend`): which GPUs the node
has right now (with health), their ``/dev/nvidia<minor>`` numbers, and "wait until something
may have changed". The rest of the device plugin never knows which backend it runs on.
"""

from __future__ import annotations

from typing import Protocol

from vslice_core.errors import VsliceError
from vslice_core.model import NodeInventory


class BackendUnavailable(VsliceError):
    """The backend cannot start here (no driver, no library, no GPUs); the message says why."""


class GpuBackend(Protocol):
    name: str

    def inventory(self) -> NodeInventory:
        """The node's GPUs now, ``healthy`` reflecting what the backend last saw."""
        ...

    def minors(self) -> dict[str, int]:
        """GPU UUID -> minor number of its ``/dev/nvidia<minor>`` node."""
        ...

    def wait_for_change(self, timeout_s: float) -> None:
        """Block until the inventory may have changed, or ``timeout_s`` passed."""
        ...

    def close(self) -> None: ...
