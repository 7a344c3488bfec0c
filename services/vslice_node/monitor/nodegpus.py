"""Whole-GPU metrics from NVML (the ``nvml`` backend), next to the per-container ones.

Labels ``gpu`` (UUID) and ``index``: ``vslice_gpu_memory_used_bytes``,
``vslice_gpu_memory_total_bytes``, ``vslice_gpu_utilization_percent`` (the driver's SM busy
percentage over its last sample period). Comparing the per-container sums with these shows
memory the slices do not account for (other processes, driver overhead).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

log = logging.getLogger("vslice.monitor.nvml")


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def start_nvml() -> Any | None:
    """The initialised pynvml module, or None (logged) when NVML is not usable here."""
    try:
        import pynvml
    except ImportError:
        log.warning("node GPU metrics off: nvidia-ml-py is not installed (extra 'nvml')")
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        log.warning("node GPU metrics off: NVML cannot start", extra={"error": str(exc)})
        return None
    return pynvml


class NodeGpuCollector(Collector):
    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self._no_utilization = False

    def _utilization(self, handle: Any) -> int | None:
        """The driver's SM busy percent; None (said once) where the driver cannot tell."""
        if self._no_utilization:
            return None
        try:
            return int(self.nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
        except self.nvml.NVMLError as exc:
            absent = (self.nvml.NVML_ERROR_NOT_SUPPORTED, self.nvml.NVML_ERROR_FUNCTION_NOT_FOUND)
            if getattr(exc, "value", None) in absent:
                self._no_utilization = True  # never coming: ask no more
            log.warning("GPU utilization unavailable", extra={"error": str(exc)})
            return None

    def collect(self) -> Iterator[Metric]:
        labels = ["gpu", "index"]
        used = GaugeMetricFamily("vslice_gpu_memory_used_bytes", "GPU memory in use", labels=labels)
        total = GaugeMetricFamily("vslice_gpu_memory_total_bytes", "GPU memory", labels=labels)
        busy = GaugeMetricFamily(
            "vslice_gpu_utilization_percent", "SM busy percent (driver sample)", labels=labels
        )
        try:
            count = int(self.nvml.nvmlDeviceGetCount())
        except self.nvml.NVMLError as exc:
            log.warning("reading NVML failed", extra={"error": str(exc)})
            count = 0
        for index in range(count):
            try:
                handle = self.nvml.nvmlDeviceGetHandleByIndex(index)
                gpu = [_text(self.nvml.nvmlDeviceGetUUID(handle)), str(index)]
                memory = self.nvml.nvmlDeviceGetMemoryInfo(handle)
            except self.nvml.NVMLError as exc:
                log.warning("reading NVML failed", extra={"index": index, "error": str(exc)})
                continue
            used.add_metric(gpu, int(memory.used))
            total.add_metric(gpu, int(memory.total))
            percent = self._utilization(handle)
            if percent is not None:
                busy.add_metric(gpu, percent)
        yield from (used, total, busy)
