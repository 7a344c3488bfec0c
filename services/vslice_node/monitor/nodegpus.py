"""Whole-GPU metrics from NVML (the ``nvml`` backend), next to the per-container ones.

Labels ``gpu`` (UUID) and ``index`` (and ``node``, added by the monitor):
``vslice_gpu_memory_used_bytes``, ``vslice_gpu_memory_total_bytes``,
``vslice_gpu_utilization_ratio`` (the driver's SM busy share over its last sample period,
0..1). Comparing the per-container sums with these shows memory the slices do not account for
(other processes, driver overhead).

With ``hami`` also HAMi's host series, with HAMi's names, labels and units (labels
``deviceidx, deviceuuid, devicetype, zone="vGPU"``; ``devicetype`` is ``NVIDIA-<model>``):
``HostGPUMemoryUsage`` (bytes in use) and ``HostCoreUtilization`` (percent, 0..100).
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


HAMI_HOST_LABELS = ["deviceidx", "deviceuuid", "devicetype", "zone"]
HAMI_ZONE = "vGPU"


class NodeGpuCollector(Collector):
    def __init__(self, nvml: Any, *, hami: bool = False) -> None:
        self.nvml = nvml
        self.hami = hami
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

    def _model(self, handle: Any) -> str:
        """HAMi's ``devicetype``: ``NVIDIA-`` and the driver's model name ("" unknown)."""
        try:
            return f"NVIDIA-{_text(self.nvml.nvmlDeviceGetName(handle))}"
        except self.nvml.NVMLError:
            return ""

    def collect(self) -> Iterator[Metric]:
        labels = ["gpu", "index"]
        used = GaugeMetricFamily("vslice_gpu_memory_used_bytes", "GPU memory in use", labels=labels)
        total = GaugeMetricFamily("vslice_gpu_memory_total_bytes", "GPU memory", labels=labels)
        busy = GaugeMetricFamily(
            "vslice_gpu_utilization_ratio", "SM busy share, 0..1 (driver sample)", labels=labels
        )
        hami_used = GaugeMetricFamily(
            "HostGPUMemoryUsage", "GPU device memory usage", labels=HAMI_HOST_LABELS
        )
        hami_busy = GaugeMetricFamily(
            "HostCoreUtilization", "GPU core utilization", labels=HAMI_HOST_LABELS
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
                busy.add_metric(gpu, percent / 100)
            if self.hami:
                host = [gpu[1], gpu[0], self._model(handle), HAMI_ZONE]
                hami_used.add_metric(host, int(memory.used))
                if percent is not None:
                    hami_busy.add_metric(host, percent)
        yield from (used, total, busy)
        if self.hami:
            yield from (hami_used, hami_busy)
