"""The extender's Prometheus metrics, on a registry of its own (served at ``GET /metrics``).

Base units only (docs/extender.md, Metrics): memory in bytes, a GPU's SMs as a ratio (a slice
of 25 % is 0.25; sums across GPUs may exceed 1), counts without a unit. What the ledger holds
is read at scrape time, so the series of a released pod or a removed node are simply gone.

Per GPU, labels ``node, gpu`` (the UUID), ``index`` (on the node), ``model``, ``path``:
``vslice_gpu_memory_capacity_bytes``, ``vslice_gpu_slots_capacity``,
``vslice_gpu_allocated_memory_bytes``, ``vslice_gpu_allocated_cores_ratio``,
``vslice_gpu_allocated_slots``. The ledger only knows the GPUs nodes advertise for the
extender path (``vslice.io/node-gpus`` or HAMi's register annotation); GPUs a node publishes
for DRA are kube-scheduler's to allocate and never reach it. ``path`` is therefore always
``"extender"``: it is there so these series join the node agent's, which carry both paths.

Per namespace with a vslice quota (label ``namespace``), counted as the bind enforces it
(:meth:`vslice_core.ledger.Ledger.quotas`: recorded, unproven and held slices alike):
``vslice_quota_{memory_used_bytes, cores_used_ratio, slices_used}`` always, and the
``..._limit`` series of the limits the namespace's quota sets.

State problems, read at scrape time: ``vslice_gpu_overbooked{node, gpu}``,
``vslice_node_blocked{node}``, ``vslice_gpu_refused{node, gpu, owner}``.

The process: ``vslice_extender_decisions_total{verb, result, reason}`` (``result`` ``fit``,
``nofit``, ``bound``, ``failed`` or ``invalid``; verb ``hold``: ``expired``, reason
``no_bind`` or ``no_pod``), ``vslice_extender_state_problems_total{kind}``, the histograms
``vslice_extender_filter_seconds`` and ``vslice_extender_bind_seconds``, and the gauges
``vslice_extender_synced`` (1 once every watch has listed) and ``vslice_extender_leader`` (1
while this replica holds the Lease, always 1 without leader election).

``hami=True`` (setting ``hami_metrics``) adds the series HAMi's scheduler exports and its
dashboards query, with HAMi's names, labels and units (see :class:`_HamiFamilies`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from vslice_core.ledger import GpuView, Ledger

BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
"""Latency histogram buckets (the webhook uses the same, so the two compare directly)."""

MIB = 1024 * 1024
PERCENT = 100  # cores are percent of one GPU's SMs in the ledger; a ratio in the metrics
PATH = "extender"
HAMI_ZONE = "vGPU"  # the constant zone label HAMi's scheduler puts on all its series

Refused = Callable[[], dict[str, dict[str, str]]]
"""``{node: {gpu uuid: owner node}}`` (``NodeFeed.refused``)."""
PodNames = Callable[[], Mapping[str, str]]
"""``{pod uid: pod name}`` of the pods with a recorded allocation (``PodFeed.names``)."""

_GPU_LABELS = ["node", "gpu", "index", "model", "path"]


def _no_names() -> Mapping[str, str]:
    return {}


@dataclass(frozen=True, slots=True)
class _Gpu:
    node: str
    view: GpuView

    @property
    def labels(self) -> list[str]:
        return [self.node, self.view.uuid, str(self.view.index), self.view.model, PATH]


class _LedgerCollector(Collector):
    def __init__(self, ledger: Ledger, refused: Refused, hami: bool) -> None:
        self._ledger = ledger
        self.refused = refused
        self.pod_names: PodNames = _no_names
        self._hami = hami

    def collect(self) -> Iterator[GaugeMetricFamily]:
        gpus = [
            _Gpu(node, view)
            for node in self._ledger.node_names()
            for view in self._ledger.gpus(node)
        ]
        yield from self._gpus(gpus)
        yield from self._quotas()
        yield from self._problems()
        if self._hami:
            hami = _HamiFamilies()
            for gpu in gpus:
                hami.add_gpu(gpu)
            hami.add_pods(self._ledger, self.pod_names())
            yield from hami.families()

    @staticmethod
    def _gpus(gpus: list[_Gpu]) -> Iterator[GaugeMetricFamily]:
        def family(name: str, text: str) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, text, labels=_GPU_LABELS)

        memory = family("vslice_gpu_memory_capacity_bytes", "Memory of the GPU")
        slots = family("vslice_gpu_slots_capacity", "Most slices the GPU may hold at once")
        memory_used = family(
            "vslice_gpu_allocated_memory_bytes", "Bytes of GPU memory promised to slices"
        )
        cores_used = family(
            "vslice_gpu_allocated_cores_ratio",
            "Share of the GPU's SMs promised to slices (0.25 = a quarter of the GPU)",
        )
        slots_used = family("vslice_gpu_allocated_slots", "Slices placed on the GPU")
        for gpu in gpus:
            labels, view = gpu.labels, gpu.view
            memory.add_metric(labels, view.memory_mib * MIB)
            slots.add_metric(labels, view.slots)
            memory_used.add_metric(labels, view.used.memory_mib * MIB)
            cores_used.add_metric(labels, view.used.cores / PERCENT)
            slots_used.add_metric(labels, view.used.slots)
        yield from (memory, slots, memory_used, cores_used, slots_used)

    def _quotas(self) -> Iterator[GaugeMetricFamily]:
        def family(name: str, text: str) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, text, labels=["namespace"])

        memory_limit = family("vslice_quota_memory_limit_bytes", "GPU memory the quota allows")
        memory_used = family("vslice_quota_memory_used_bytes", "GPU memory counted against it")
        cores_limit = family(
            "vslice_quota_cores_limit_ratio", "GPU SMs the quota allows (1.0 = one whole GPU)"
        )
        cores_used = family("vslice_quota_cores_used_ratio", "GPU SMs counted against it")
        slices_limit = family("vslice_quota_slices_limit", "GPU slices the quota allows")
        slices_used = family("vslice_quota_slices_used", "GPU slices counted against it")
        for namespace, quota in self._ledger.quotas().items():
            labels, limits, used = [namespace], quota.limits, quota.used
            memory_used.add_metric(labels, used.memory_mib * MIB)
            cores_used.add_metric(labels, used.cores / PERCENT)
            slices_used.add_metric(labels, used.gpus)
            # A dimension the quota leaves open has no limit series (not a 0 or +Inf one).
            if limits.memory_mib is not None:
                memory_limit.add_metric(labels, limits.memory_mib * MIB)
            if limits.cores is not None:
                cores_limit.add_metric(labels, limits.cores / PERCENT)
            if limits.gpus is not None:
                slices_limit.add_metric(labels, limits.gpus)
        yield from (memory_limit, memory_used, cores_limit, cores_used, slices_limit, slices_used)

    def _problems(self) -> Iterator[GaugeMetricFamily]:
        over = GaugeMetricFamily(
            "vslice_gpu_overbooked",
            "1 for a GPU whose counted usage exceeds its memory, cores or slots",
            labels=["node", "gpu"],
        )
        for node, gpus in self._ledger.overbooked().items():
            for uuid in gpus:
                over.add_metric([node, uuid], 1)
        blocked = GaugeMetricFamily(
            "vslice_node_blocked",
            "Pods whose unreadable allocation keeps new slices off the node",
            labels=["node"],
        )
        for node, blocks in self._ledger.blocked_nodes().items():
            blocked.add_metric([node], len(blocks))
        refused = GaugeMetricFamily(
            "vslice_gpu_refused",
            "1 for a GPU refused because another node claims the same UUID",
            labels=["node", "gpu", "owner"],
        )
        for node, owners in self.refused().items():
            for uuid, owner in owners.items():
                refused.add_metric([node, uuid, owner], 1)
        yield from (over, blocked, refused)


class _HamiFamilies:
    """HAMi's scheduler series (``hami_metrics``), in HAMi's units, which are not base units.

    Per GPU, labels ``nodeid, deviceuuid, deviceidx, devicetype, zone`` (``zone`` is always
    ``vGPU``, as HAMi's scheduler registers it):

    - ``GPUDeviceMemoryLimit``: the GPU's memory, bytes;
    - ``GPUDeviceCoreLimit``: the GPU's cores, percent (100 for a whole GPU);
    - ``GPUDeviceMemoryAllocated`` (plus label ``devicecores``, the GPU's cores as HAMi's
      current scheduler writes it): memory promised to slices, bytes;
    - ``GPUDeviceCoreAllocated``: cores promised, percent;
    - ``GPUDeviceSharedNum``: slices placed (HAMi: containers sharing the GPU).

    Per container and GPU, ``vGPUPodsDeviceAllocated{podnamespace, nodename, podname,
    containeridx, deviceuuid, deviceusedcore, zone}``: the container's memory on that GPU,
    bytes; ``deviceusedcore`` its cores in percent, ``containeridx`` its position in the
    pod's allocation. Only pods the pod watch has shown with their allocation are named, so
    slices held between a filter and the bind's annotation reaching the watch are not listed.
    """

    def __init__(self) -> None:
        gpu = ["nodeid", "deviceuuid", "deviceidx", "devicetype", "zone"]
        self.memory_limit = GaugeMetricFamily(
            "GPUDeviceMemoryLimit", "Device memory limit for a certain GPU", labels=gpu
        )
        self.core_limit = GaugeMetricFamily(
            "GPUDeviceCoreLimit", "Device memory core limit for a certain GPU", labels=gpu
        )
        self.memory_allocated = GaugeMetricFamily(
            "GPUDeviceMemoryAllocated",
            "Device memory allocated for a certain GPU",
            labels=["nodeid", "deviceuuid", "deviceidx", "devicecores", "devicetype", "zone"],
        )
        self.core_allocated = GaugeMetricFamily(
            "GPUDeviceCoreAllocated", "Device core allocated for a certain GPU", labels=gpu
        )
        self.shared = GaugeMetricFamily(
            "GPUDeviceSharedNum", "Number of containers sharing this GPU", labels=gpu
        )
        self.pods = GaugeMetricFamily(
            "vGPUPodsDeviceAllocated",
            "vGPU Allocated from pods",
            labels=[
                "podnamespace",
                "nodename",
                "podname",
                "containeridx",
                "deviceuuid",
                "deviceusedcore",
                "zone",
            ],
        )

    def add_gpu(self, gpu: _Gpu) -> None:
        view = gpu.view
        labels = [gpu.node, view.uuid, str(view.index), view.model, HAMI_ZONE]
        self.memory_limit.add_metric(labels, view.memory_mib * MIB)
        self.core_limit.add_metric(labels, view.cores)
        self.memory_allocated.add_metric(
            [gpu.node, view.uuid, str(view.index), str(view.cores), view.model, HAMI_ZONE],
            view.used.memory_mib * MIB,
        )
        self.core_allocated.add_metric(labels, view.used.cores)
        self.shared.add_metric(labels, view.used.slots)

    def add_pods(self, ledger: Ledger, names: Mapping[str, str]) -> None:
        # Summed per label set: two pods of one name can hold slices at once (a StatefulSet
        # pod replaced while the old one still counts), and a scrape with a duplicate series
        # is refused whole by Prometheus.
        values: dict[tuple[str, ...], float] = {}
        for uid, namespace, allocation in ledger.allocations():
            name = names.get(uid)
            if name is None:
                continue
            for position, container in enumerate(allocation.containers):
                for grant in container.gpus:
                    key = (
                        namespace,
                        allocation.node,
                        name,
                        str(position),
                        grant.uuid,
                        str(grant.cores),
                        HAMI_ZONE,
                    )
                    values[key] = values.get(key, 0) + grant.memory_mib * MIB
        for labels, value in sorted(values.items()):
            self.pods.add_metric(list(labels), value)

    def families(self) -> Iterator[GaugeMetricFamily]:
        yield self.memory_limit
        yield self.core_limit
        yield self.memory_allocated
        yield self.core_allocated
        yield self.shared
        yield self.pods


class ExtenderMetrics:
    def __init__(self, ledger: Ledger, refused: Refused = dict, *, hami: bool = False) -> None:
        disable_created_metrics()  # type: ignore[no-untyped-call]  # *_created is noise here
        self.registry = CollectorRegistry()
        self._collector = _LedgerCollector(ledger, refused, hami)
        self.registry.register(self._collector)
        self.problems = Counter(
            "vslice_extender_state_problems",
            "Problems with the cluster's state reported, by kind (each once)",
            ["kind"],
            registry=self.registry,
        )
        self.decisions = Counter(
            "vslice_extender_decisions",
            "Extender answers by verb, result and reason",
            ["verb", "result", "reason"],
            registry=self.registry,
        )
        self.filter_seconds = Histogram(
            "vslice_extender_filter_seconds",
            "Time to answer a filter call",
            buckets=BUCKETS,
            registry=self.registry,
        )
        self.bind_seconds = Histogram(
            "vslice_extender_bind_seconds",
            "Time to answer a bind call",
            buckets=BUCKETS,
            registry=self.registry,
        )
        self.synced = Gauge(
            "vslice_extender_synced",
            "1 once the nodes, pods and quotas have each been listed (decisions start), else 0",
            registry=self.registry,
        )
        self.leader = Gauge(
            "vslice_extender_leader",
            "1 while this replica may bind: it holds the Lease, or runs without leader election",
            registry=self.registry,
        )
        self.leader.set(1)  # without leader election every replica binds

    def decided(self, verb: str, result: str, reason: str = "") -> None:
        self.decisions.labels(verb, result, reason or "none").inc()

    def count_refused(self, refused: Refused) -> None:
        """Where the refused-GPU gauge reads from (the node feed, made after the metrics)."""
        self._collector.refused = refused

    def name_pods(self, names: PodNames) -> None:
        """Where HAMi's per-pod series read pod names from (the pod feed, made after)."""
        self._collector.pod_names = names

    def follow(self, synced: Callable[[], bool], leader: Callable[[], bool]) -> None:
        """Read the two state gauges from these at every scrape (the same answers /readyz
        gives, so the gauges and the probe never disagree)."""
        self.synced.set_function(lambda: float(synced()))
        self.leader.set_function(lambda: float(leader()))

    def problem(self, kind: str) -> None:
        self.problems.labels(kind).inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
