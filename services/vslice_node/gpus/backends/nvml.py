"""The NVML backend: the node's real GPUs through pynvml (package ``nvidia-ml-py``, the
``nvml`` extra), and their health from NVML's XID events.

Kept thin on purpose: it only reads identity (UUID, name, memory, minor number, NUMA node) and
waits for critical XID events. A critical XID marks the GPU Unhealthy until the plugin restarts
(a GPU that reported one needs a reset), except the XIDs that an application causes on its own
(listed in ``APPLICATION_XIDS``), which say nothing about the hardware.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from vslice_core.model import Gpu, NodeInventory

from vslice_node.gpus.backends import BackendUnavailable

log = logging.getLogger("vslice.deviceplugin.nvml")

# 13 graphics engine exception, 31 memory page fault, 43 GPU stopped processing,
# 45 preemptive cleanup, 68 video processor exception, 109 context switch timeout:
# raised by a faulting application, the GPU itself is fine.
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlBackend:
    name = "nvml"

    def __init__(self, node: str, slots: int, nvml: Any = None) -> None:
        """``nvml`` is the pynvml module (imported here when not given)."""
        if nvml is None:
            try:
                import pynvml
            except ImportError as exc:
                raise BackendUnavailable(
                    "backend nvml needs the nvidia-ml-py package: pip install 'vslice[nvml]'"
                ) from exc
            nvml = pynvml
        self._nvml: Any = nvml
        self.node = node
        self.slots = slots
        self._lock = threading.Lock()
        self._unhealthy: set[str] = set()
        try:
            nvml.nvmlInit()
            self._handles = self._read_handles()
        except nvml.NVMLError as exc:
            raise BackendUnavailable(f"NVML cannot start: {exc}") from exc
        self._gpus = [self._gpu(index, handle) for index, handle in enumerate(self._handles)]
        self._events = self._register_events()

    def _read_handles(self) -> list[Any]:
        count = self._nvml.nvmlDeviceGetCount()
        return [self._nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]

    def _gpu(self, index: int, handle: Any) -> Gpu:
        memory = self._nvml.nvmlDeviceGetMemoryInfo(handle)
        return Gpu(
            uuid=_text(self._nvml.nvmlDeviceGetUUID(handle)),
            model=_text(self._nvml.nvmlDeviceGetName(handle)).replace(" ", "-"),
            memory_mib=int(memory.total) // (1024 * 1024),
            slots=self.slots,
            index=index,
            numa=self._numa(handle),
        )

    def _numa(self, handle: Any) -> int:
        try:
            return max(0, int(self._nvml.nvmlDeviceGetNumaNodeId(handle)))
        except (self._nvml.NVMLError, AttributeError):
            return 0  # older drivers, or a single-socket machine

    def _minor(self, handle: Any, index: int) -> int:
        try:
            return int(self._nvml.nvmlDeviceGetMinorNumber(handle))
        except self._nvml.NVMLError:
            return index

    def _register_events(self) -> Any:
        try:
            events = self._nvml.nvmlEventSetCreate()
            for handle in self._handles:
                self._nvml.nvmlDeviceRegisterEvents(
                    handle, self._nvml.nvmlEventTypeXidCriticalError, events
                )
            return events
        except self._nvml.NVMLError as exc:
            log.warning("XID events unavailable; health not watched", extra={"error": str(exc)})
            return None

    def inventory(self) -> NodeInventory:
        with self._lock:
            gpus = [
                gpu.model_copy(update={"healthy": gpu.uuid not in self._unhealthy})
                for gpu in self._gpus
            ]
        return NodeInventory(name=self.node, gpus=gpus)

    def minors(self) -> dict[str, int]:
        return {
            gpu.uuid: self._minor(handle, gpu.index)
            for gpu, handle in zip(self._gpus, self._handles, strict=True)
        }

    def wait_for_change(self, timeout_s: float) -> None:
        if self._events is None:
            threading.Event().wait(timeout_s)
            return
        try:
            data = self._nvml.nvmlEventSetWait(self._events, int(timeout_s * 1000))
        except self._nvml.NVMLError as exc:
            if getattr(exc, "value", None) != self._nvml.NVML_ERROR_TIMEOUT:
                log.warning("waiting for NVML events failed", extra={"error": str(exc)})
                threading.Event().wait(timeout_s)
            return
        self._on_xid(data)

    def _on_xid(self, data: Any) -> None:
        xid = int(data.eventData)
        uuid = _text(self._nvml.nvmlDeviceGetUUID(data.device))
        if xid in APPLICATION_XIDS:
            log.info("application XID; GPU stays healthy", extra={"gpu": uuid, "xid": xid})
            return
        log.error("critical XID; GPU marked unhealthy", extra={"gpu": uuid, "xid": xid})
        with self._lock:
            self._unhealthy.add(uuid)

    def close(self) -> None:
        try:
            if self._events is not None:
                self._nvml.nvmlEventSetFree(self._events)
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError as exc:
            log.warning("NVML shutdown failed", extra={"error": str(exc)})
