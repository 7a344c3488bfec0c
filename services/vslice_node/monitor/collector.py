"""Prometheus metrics of the containers' GPU slices, computed when scraped.

Per pod, container and GPU (labels ``namespace, pod, pod_uid, container, gpu, index``; the
monitor adds ``node`` to every series, see :mod:`vslice_node.metrics`):

- ``vslice_container_gpu_memory_used_bytes`` / ``..._memory_limit_bytes`` (limit only when set)
- ``vslice_container_gpu_sm_limit_ratio``: the compute slice, 0..1 (only when set)
- ``vslice_container_gpu_sm_utilization_ratio``: device busy time per wall time since the
  previous sample at least ``MIN_SAMPLE_S`` old, 0..1 (the shim's limiter measures busy time)
- ``vslice_container_gpu_busy_seconds_total``, ``..._throttled_seconds_total``,
  ``..._launches_total``: the limiter's counters, for ``rate()``
- ``vslice_container_gpu_idle_seconds``: seconds since this monitor last saw the launches
  counter change (since it first saw the region when the counter never moved). The monitor
  keeps no state across restarts: after one, idle time counts from the restart.

Per container: ``vslice_container_processes``, and ``vslice_container_memory_backend``
(label ``backend``: ``driver`` where the driver holds the container's memory at its slice,
as the hook's mark in its limits directory says; ``shim`` otherwise). Per node:
``vslice_monitor_regions`` (region files read) and ``vslice_monitor_unreadable_regions``.

Regions whose pods ended or are gone (:class:`vslice_node.monitor.podnames.PodView`) are read
but not exported, and their samples are forgotten.

The shim's region does not count refused allocations (only the shim's log does), so there is
no refusals counter.

With ``hami`` the collector adds, beside these, the per-container series HAMi's vGPU monitor
exports and HAMi's dashboards query, with HAMi's names, labels and units (labels
``podnamespace, podname, ctrname, vdeviceid, deviceuuid, zone="vGPU"``):
``vGPU_device_memory_usage_in_bytes``, ``vGPU_device_memory_limit_in_bytes`` (bytes),
``Device_utilization_desc_of_container`` (percent, 0..100) and
``Device_last_kernel_of_container`` (seconds since the last launch; only once the container
launched a kernel, as HAMi does).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from vslice_node.monitor.podnames import PodLookup, PodView
from vslice_node.monitor.regions import ContainerRegion, RegionReader

LABELS = ["namespace", "pod", "pod_uid", "container", "gpu", "index"]
CONTAINER_LABELS = ["namespace", "pod", "pod_uid", "container"]
HAMI_LABELS = ["podnamespace", "podname", "ctrname", "vdeviceid", "deviceuuid", "zone"]
HAMI_ZONE = "vGPU"  # the constant HAMi's monitor puts on every series it exports
MIN_SAMPLE_S = 1.0

UsageKey = tuple[str, str, int]  # pod uid, container, device index


@dataclass
class _Sample:
    busy_ns: int
    at: float
    ratio: float | None = None


class Utilization:
    """Busy-time rate per device of each container, between samples ``MIN_SAMPLE_S`` apart."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._samples: dict[UsageKey, _Sample] = {}
        self._lock = threading.Lock()

    def observe(self, key: UsageKey, busy_ns: int) -> float | None:
        """Busy time per wall time, 0..1; None until two samples are far enough apart."""
        now = self._clock()
        with self._lock:
            previous = self._samples.get(key)
            if previous is None or busy_ns < previous.busy_ns:  # new, or a recreated region
                self._samples[key] = _Sample(busy_ns, now)
                return None
            elapsed = now - previous.at
            if elapsed < MIN_SAMPLE_S:
                return previous.ratio
            ratio = min(1.0, (busy_ns - previous.busy_ns) / (elapsed * 1e9))
            self._samples[key] = _Sample(busy_ns, now, ratio)
            return ratio

    def forget_except(self, live: set[UsageKey]) -> None:
        with self._lock:
            for key in set(self._samples) - live:
                del self._samples[key]


class Idleness:
    """Seconds since each container's launches counter on a device last changed, as seen here.

    The region records how many kernels were launched, not when: the time of the change is
    the scrape that first saw the new count, so the value is exact to a scrape interval and
    starts over when the monitor restarts.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._changed: dict[UsageKey, tuple[int, float]] = {}  # launches, when first seen
        self._lock = threading.Lock()

    def observe(self, key: UsageKey, launches: int) -> float:
        """Seconds since the count last changed."""
        now = self._clock()
        return now - self.changed_at(key, launches, now)

    def changed_at(self, key: UsageKey, launches: int, now: float | None = None) -> float:
        """The clock when this count was first seen (``now`` when it is new)."""
        seen = self._clock() if now is None else now
        with self._lock:
            previous = self._changed.get(key)
            if previous is None or previous[0] != launches:
                self._changed[key] = (launches, seen)
                return seen
            return previous[1]

    def forget_except(self, live: set[UsageKey]) -> None:
        with self._lock:
            for key in set(self._changed) - live:
                del self._changed[key]


Family = GaugeMetricFamily | CounterMetricFamily


def _families(hami: bool) -> dict[str, Family]:
    def gauge(name: str, text: str, labels: list[str] = LABELS) -> GaugeMetricFamily:
        return GaugeMetricFamily(name, text, labels=labels)

    def counter(name: str, text: str) -> CounterMetricFamily:
        return CounterMetricFamily(name, text, labels=LABELS)

    families: dict[str, Family] = {
        "used": gauge("vslice_container_gpu_memory_used_bytes", "GPU memory the container holds"),
        "limit": gauge("vslice_container_gpu_memory_limit_bytes", "The container's memory slice"),
        "sm_limit": gauge(
            "vslice_container_gpu_sm_limit_ratio", "The container's SM slice, 0..1 of the GPU"
        ),
        "util": gauge(
            "vslice_container_gpu_sm_utilization_ratio",
            "Device busy time of the container per wall time, 0..1",
        ),
        "idle": gauge(
            "vslice_container_gpu_idle_seconds",
            "Seconds since the container's kernel launch count last changed (as seen by this "
            "monitor since it started)",
        ),
        "busy": counter("vslice_container_gpu_busy_seconds", "Device busy time measured"),
        "throttled": counter(
            "vslice_container_gpu_throttled_seconds", "Time launches waited for the SM slice"
        ),
        "launches": counter("vslice_container_gpu_launches", "Kernel launches seen"),
        "processes": gauge(
            "vslice_container_processes", "Processes with a live slot", CONTAINER_LABELS
        ),
        "backend": gauge(
            "vslice_container_memory_backend",
            "1 for what holds the container's GPU memory at its slice: driver or shim",
            [*CONTAINER_LABELS, "backend"],
        ),
    }
    if hami:
        families |= {
            "hami_used": gauge(
                "vGPU_device_memory_usage_in_bytes", "vGPU device usage", HAMI_LABELS
            ),
            "hami_limit": gauge(
                "vGPU_device_memory_limit_in_bytes", "vGPU device limit", HAMI_LABELS
            ),
            "hami_util": gauge(
                "Device_utilization_desc_of_container",
                "Container device utilization description",
                HAMI_LABELS,
            ),
            "hami_last_kernel": gauge(
                "Device_last_kernel_of_container",
                "Container device last kernel description",
                HAMI_LABELS,
            ),
        }
    return families


def no_pods(_uids: Collection[str]) -> PodView:
    """What is known of the pods without the API server: nothing (uids only, all exported)."""
    return PodView()


class ContainerCollector(Collector):
    def __init__(
        self,
        reader: RegionReader,
        pods: PodLookup | None = None,
        utilization: Utilization | None = None,
        idleness: Idleness | None = None,
        *,
        hami: bool = False,
        backend_of: Callable[[str, str], str] = lambda _uid, _container: "shim",
    ) -> None:
        self.reader = reader
        self.backend_of = backend_of  # (pod uid, container) -> "driver" | "shim"
        self.pods = pods or no_pods
        self.utilization = utilization or Utilization()
        self.idleness = idleness or Idleness()
        self.hami = hami

    def collect(self) -> Iterator[Metric]:
        families = _families(self.hami)
        read = list(self.reader.read())
        view = self.pods({region.file.pod_uid for region in read})
        live: set[UsageKey] = set()
        for region in read:
            if region.file.pod_uid in view.ended:
                continue  # the pod finished or is gone: its last values are no use
            namespace, pod = view.names.get(region.file.pod_uid, ("", ""))
            owner = [namespace, pod, region.file.pod_uid, region.file.container]
            families["processes"].add_metric(owner, len(region.snapshot.processes))
            backend = self.backend_of(region.file.pod_uid, region.file.container)
            families["backend"].add_metric([*owner, backend], 1)
            live |= self._add_devices(families, region, owner)
        self.utilization.forget_except(live)
        self.idleness.forget_except(live)
        yield from families.values()
        yield GaugeMetricFamily("vslice_monitor_regions", "Regions read", value=len(read))
        yield GaugeMetricFamily(
            "vslice_monitor_unreadable_regions",
            "Region files that could not be read (see the log)",
            value=self.reader.unreadable,
        )

    def _add_devices(
        self, families: Mapping[str, Family], region: ContainerRegion, owner: list[str]
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
                families["sm_limit"].add_metric(labels, device.sm_limit / 100)
            ratio = self.utilization.observe(key, device.busy_ns)
            if ratio is not None:
                families["util"].add_metric(labels, ratio)
            idle = self.idleness.observe(key, device.launches)
            families["idle"].add_metric(labels, idle)
            families["busy"].add_metric(labels, device.busy_ns / 1e9)
            families["throttled"].add_metric(labels, device.throttled_ns / 1e9)
            families["launches"].add_metric(labels, device.launches)
            if self.hami:
                namespace, pod, _, container = owner
                hami = [namespace, pod, container, str(device.index), device.uuid, HAMI_ZONE]
                families["hami_used"].add_metric(hami, device.memory_used)
                if device.memory_limit is not None:
                    families["hami_limit"].add_metric(hami, device.memory_limit)
                if ratio is not None:
                    families["hami_util"].add_metric(hami, ratio * 100)
                if device.launches:
                    families["hami_last_kernel"].add_metric(hami, idle)
        return keys
