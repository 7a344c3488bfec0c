"""GPU health from NVML XID events, with the driver library played by a stand-in.

No driver exists here and the shim's fake NVML has no event API, so the NVML calls the
backend makes are answered by :class:`Driver`, which follows NVML's documented behaviour:
``nvmlEventSetWait`` blocks up to its timeout and then fails with NVML_ERROR_TIMEOUT, an event
carries the device handle and the XID in ``eventData``. Errors are pynvml's own classes.
"""

from __future__ import annotations

import queue
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pynvml
from memory_nodeapi import MemoryNodeApi
from vslice_node.agent.nodeagent import NodeAgent
from vslice_node.agent.settings import NodeAgentSettings
from vslice_node.gpus.backends.nvml import NvmlBackend

UUIDS = ["GPU-11111111-0000-4000-8000-000000000000", "GPU-11111111-0000-4000-8000-000000000001"]


@dataclass
class Memory:
    total: int
    used: int = 0
    free: int = 0


@dataclass
class Event:
    device: int
    eventType: int
    eventData: int


class Driver:
    """The NVML entry points the backend calls, over two 80 GiB GPUs."""

    NVMLError = pynvml.NVMLError
    NVML_ERROR_TIMEOUT = pynvml.NVML_ERROR_TIMEOUT
    nvmlEventTypeXidCriticalError = pynvml.nvmlEventTypeXidCriticalError

    def __init__(self) -> None:
        self.events: queue.Queue[Event] = queue.Queue()
        self.registered: list[tuple[int, int]] = []
        self.shut_down = False

    def nvmlInit(self) -> None: ...

    def nvmlShutdown(self) -> None:
        self.shut_down = True

    def nvmlDeviceGetCount(self) -> int:
        return len(UUIDS)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return UUIDS[handle]

    def nvmlDeviceGetName(self, handle: int) -> str:
        return "NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Memory:
        return Memory(total=81559 * 1024 * 1024)

    def nvmlDeviceGetNumaNodeId(self, handle: int) -> int:
        return handle

    def nvmlDeviceGetMinorNumber(self, handle: int) -> int:
        return 4 + handle

    def nvmlEventSetCreate(self) -> str:
        return "event-set"

    def nvmlDeviceRegisterEvents(self, handle: int, types: int, events: Any) -> None:
        self.registered.append((handle, types))

    def nvmlEventSetWait(self, events: Any, timeout_ms: int) -> Event:
        try:
            return self.events.get(timeout=timeout_ms / 1000)
        except queue.Empty:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT) from None

    def nvmlEventSetFree(self, events: Any) -> None: ...

    def xid(self, device: int, xid: int) -> None:
        self.events.put(Event(device, pynvml.nvmlEventTypeXidCriticalError, xid))


def test_the_backend_describes_each_gpu_and_watches_critical_xids() -> None:
    driver = Driver()
    backend = NvmlBackend("node-1", slots=8, nvml=driver)
    gpus = backend.inventory().gpus
    assert [(g.uuid, g.model, g.memory_mib, g.slots, g.numa) for g in gpus] == [
        (UUIDS[0], "NVIDIA-H100-80GB-HBM3", 81559, 8, 0),
        (UUIDS[1], "NVIDIA-H100-80GB-HBM3", 81559, 8, 1),
    ]
    assert backend.minors() == {UUIDS[0]: 4, UUIDS[1]: 5}
    xid_events = pynvml.nvmlEventTypeXidCriticalError
    assert driver.registered == [(0, xid_events), (1, xid_events)]


def test_an_application_xid_leaves_the_gpu_healthy_and_a_hardware_xid_does_not() -> None:
    driver = Driver()
    backend = NvmlBackend("node-1", slots=8, nvml=driver)
    driver.xid(1, 13)  # graphics engine exception: a faulting program
    backend.wait_for_change(1.0)
    assert [g.healthy for g in backend.inventory().gpus] == [True, True]
    driver.xid(1, 79)  # fallen off the bus
    backend.wait_for_change(1.0)
    assert [g.healthy for g in backend.inventory().gpus] == [True, False]
    backend.wait_for_change(0.05)  # nothing more: a timeout is not a change
    assert [g.healthy for g in backend.inventory().gpus] == [True, False]
    backend.close()
    assert driver.shut_down


def test_an_xid_turns_that_gpus_devices_unhealthy_on_the_plugins_board(tmp_path: Path) -> None:
    driver = Driver()
    settings = NodeAgentSettings(
        node_name="node-1",
        backend="nvml",
        slots_per_gpu=2,
        device_plugin_dir=str(tmp_path / "dp"),
        cache_root=str(tmp_path / "containers"),
        limits_root=str(tmp_path / "limits"),
        cdi_spec_dir=str(tmp_path / "cdi"),
    )
    plugin = NodeAgent(settings, NvmlBackend("node-1", 2, nvml=driver), MemoryNodeApi())
    driver.xid(0, 48)  # double-bit ECC error
    plugin.backend.wait_for_change(1.0)
    plugin.refresh()
    _, devices = plugin.board.snapshot()
    assert [(d.id, d.health) for d in devices] == [
        (f"{UUIDS[0]}::0", "Unhealthy"),
        (f"{UUIDS[0]}::1", "Unhealthy"),
        (f"{UUIDS[1]}::0", "Healthy"),
        (f"{UUIDS[1]}::1", "Healthy"),
    ]
