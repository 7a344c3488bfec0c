"""Prometheus metrics of the containers' GPU slices, computed when scraped.

Per pod, container and GPU (labels ``namespace, pod, pod_uid, container, gpu, index``):

- ``vslice_container_gpu_memory_used_bytes`` / ``..._memory_limit_bytes`` (limit only when set)
- ``vslice_container_gpu_sm_limit_percent`` (only when set)
- ``vslice_container_gpu_sm_utilization_percent``: device busy time per wall time since the
  previous sample at least ``MIN_SAMPLE_S`` old (the shim's limiter measures busy time)
- ``vslice_container_gpu_busy_seconds_total``, ``..._throttled_seconds_total``,
  ``..._launches_total``: the limiter's counters, for ``rate()``

Per container: ``vslice_container_processes``. Per node: ``vslice_monitor_regions`` and
``vslice_monitor_unreadable_regions``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from vslice_node.monitor.regions import ContainerRegion, RegionReader

LABELS = ["namespace", "pod", "pod_uid", "container", "gpu", "index"]
CONTAINER_LABELS = ["namespace", "pod", "pod_uid", "container"]
MIN_SAMPLE_S = 1.0

UsageKey = tuple[str, str, int]  # pod uid, container, device index


@dataclass
class _Sample:
    busy_ns: int
    at: float
    percent: float | None = None


class Utilization:
    """Busy-time rate per device of each container, between samples ``MIN_SAMPLE_S`` apart."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._samples: dict[UsageKey, _Sample] = {}
        self._lock = threading.Lock()

    def observe(self, key: UsageKey, busy_ns: int) -> float | None:
        now = self._clock()
        with self._lock:
            previous = self._samples.get(key)
            if previous is None or busy_ns < previous.busy_ns:  # new, or a recreated region
                self._samples[key] = _Sample(busy_ns, now)
                return None
            elapsed = now - previous.at
            if elapsed < MIN_SAMPLE_S:
                return previous.percent
            percent = min(100.0, (busy_ns - previous.busy_ns) / (elapsed * 1e9) * 100.0)
            self._samples[key] = _Sample(busy_ns, now, percent)
            return percent

    def forget_except(self, live: set[UsageKey]) -> None:
        with self._lock:
            for key in set(self._samples) - live:
                del self._samples[key]


def _families() -> dict[str, GaugeMetricFamily | CounterMetricFamily]:
    def gauge(name: str, text: str, labels: list[str] = LABELS) -> GaugeMetricFamily:
        return GaugeMetricFamily(name, text, labels=labels)

    def counter(name: str, text: str) -> CounterMetricFamily:
        return CounterMetricFamily(name, text, labels=LABELS)

    return {
        "used": gauge("vslice_container_gpu_memory_used_bytes", "GPU memory the container holds"),
        "limit": gauge("vslice_container_gpu_memory_limit_bytes", "The container's memory slice"),
        "sm_limit": gauge("vslice_container_gpu_sm_limit_percent", "The container's SM slice"),
        "util": gauge(
            "vslice_container_gpu_sm_utilization_percent",
            "Device busy time of the container per wall time, percent",
        ),
        "busy": counter("vslice_container_gpu_busy_seconds", "Device busy time measured"),
        "throttled": counter(
            "vslice_container_gpu_throttled_seconds", "Time launches waited for the SM slice"
        ),
        "launches": counter("vslice_container_gpu_launches", "Kernel launches seen"),
        "processes": gauge(
            "vslice_container_processes", "Processes with a live slot", CONTAINER_LABELS
        ),
    }


class ContainerCollector(Collector):
    def __init__(
        self,
        reader: RegionReader,
        pod_names: Callable[[Collection[str]], Mapping[str, tuple[str, str]]] | None = None,
        utilization: Utilization | None = None,
    ) -> None:
        self.reader = reader
        self.pod_names = pod_names or (lambda _uids: {})
        self.utilization = utilization or Utilization()

    def collect(self) -> Iterator[Metric]:
        families = _families()
        read = list(self.reader.read())
        names = self.pod_names({region.file.pod_uid for region in read})
        live: set[UsageKey] = set()
        regions = 0
        for region in read:
            regions += 1
            namespace, pod = names.get(region.file.pod_uid, ("", ""))
            owner = [namespace, pod, region.file.pod_uid, region.file.container]
            families["processes"].add_metric(owner, len(region.snapshot.processes))
            live |= self._add_devices(families, region, owner)
        self.utilization.forget_except(live)
        yield from families.values()
        yield GaugeMetricFamily("vslice_monitor_regions", "Regions read", value=regions)
        yield GaugeMetricFamily(
            "vslice_monitor_unreadable_regions",
            "Region files that could not be read (see the log)",
            value=self.reader.unreadable,
        )

    def _add_devices(
        self,
        families: Mapping[str, GaugeMetricFamily | CounterMetricFamily],
        region: ContainerRegion,
        owner: list[str],
    ) -> set[UsageKey]:
        keys: set[UsageKey] = set()
        for device in region.snapshot.devices:
            labels = [*owner, device.uuid, str(device.index)]
            key = (region.file.pod_uid, region.file.container, device.index)
            keys.add(key)
            families["used"].add_metric(labels, device.memory_used)
            if device.memory_limit is not None:
                families["limit"].add_metric(labels, device.memory_limit)
            if device.sm_limit is not None:
                families["sm_limit"].add_metric(labels, device.sm_limit)
            percent = self.utilization.observe(key, device.busy_ns)
            if percent is not None:
                families["util"].add_metric(labels, percent)
            families["busy"].add_metric(labels, device.busy_ns / 1e9)
            families["throttled"].add_metric(labels, device.throttled_ns / 1e9)
            families["launches"].add_metric(labels, device.launches)
        return keys
