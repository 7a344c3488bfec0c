"""The extender's Prometheus metrics, on a registry of its own (served at ``GET /metrics``).

- ``vslice_gpu_allocated_memory_mib``, ``vslice_gpu_allocated_cores``,
  ``vslice_gpu_allocated_slots`` ``{node, gpu}``: read from the ledger at scrape time;
- ``vslice_extender_decisions_total{verb, result, reason}``: ``result`` is ``fit``, ``nofit``,
  ``bound``, ``failed`` or ``invalid``; ``reason`` the first engine reason code or error kind;
- ``vslice_extender_filter_seconds``, ``vslice_extender_bind_seconds``: latency histograms.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from vslice_core.ledger import Ledger

_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class _LedgerCollector(Collector):
    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger

    def collect(self) -> Iterator[GaugeMetricFamily]:
        families = {
            "memory_mib": GaugeMetricFamily(
                "vslice_gpu_allocated_memory_mib",
                "MiB of GPU memory promised to slices",
                labels=["node", "gpu"],
            ),
            "cores": GaugeMetricFamily(
                "vslice_gpu_allocated_cores",
                "Percent of the GPU's SMs promised to slices",
                labels=["node", "gpu"],
            ),
            "slots": GaugeMetricFamily(
                "vslice_gpu_allocated_slots", "Slices placed on the GPU", labels=["node", "gpu"]
            ),
        }
        for node in self._ledger.node_names():
            for uuid, usage in sorted(self._ledger.gpu_usage(node).items()):
                for field, family in families.items():
                    family.add_metric([node, uuid], getattr(usage, field))
        yield from families.values()


class ExtenderMetrics:
    def __init__(self, ledger: Ledger) -> None:
        disable_created_metrics()  # type: ignore[no-untyped-call]  # *_created is noise here
        self.registry = CollectorRegistry()
        self.registry.register(_LedgerCollector(ledger))
        self.decisions = Counter(
            "vslice_extender_decisions",
            "Extender answers by verb, result and reason",
            ["verb", "result", "reason"],
            registry=self.registry,
        )
        self.filter_seconds = Histogram(
            "vslice_extender_filter_seconds",
            "Time to answer a filter call",
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.bind_seconds = Histogram(
            "vslice_extender_bind_seconds",
            "Time to answer a bind call",
            buckets=_BUCKETS,
            registry=self.registry,
        )

    def decided(self, verb: str, result: str, reason: str = "") -> None:
        self.decisions.labels(verb, result, reason or "none").inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
