"""The extender's Prometheus metrics, on a registry of its own (served at ``GET /metrics``).

- ``vslice_gpu_allocated_memory_mib``, ``vslice_gpu_allocated_cores``,
  ``vslice_gpu_allocated_slots`` ``{node, gpu}``: read from the ledger at scrape time;
- ``vslice_gpu_overbooked{node, gpu}`` (1 per GPU whose counted usage exceeds it),
  ``vslice_node_blocked{node}`` (pods whose unreadable allocation blocks the node),
  ``vslice_gpu_refused{node, gpu, owner}`` (1 per GPU refused as claimed by another node):
  read at scrape time;
- ``vslice_extender_decisions_total{verb, result, reason}``: ``result`` is ``fit``, ``nofit``,
  ``bound``, ``failed`` or ``invalid`` (verb ``hold``: ``expired``, reason ``no_bind`` or
  ``no_pod``); ``reason`` the first engine reason code or error kind;
- ``vslice_extender_state_problems_total{kind}``: problems reported (``unproven``,
  ``unreadable``, ``overbooked``, ``duplicate_gpu``), once each;
- ``vslice_extender_filter_seconds``, ``vslice_extender_bind_seconds``: latency histograms.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

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


Refused = Callable[[], dict[str, dict[str, str]]]
"""``{node: {gpu uuid: owner node}}`` (``NodeFeed.refused``)."""


class _LedgerCollector(Collector):
    def __init__(self, ledger: Ledger, refused: Refused) -> None:
        self._ledger = ledger
        self.refused = refused

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
        yield from self._problems()

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


class ExtenderMetrics:
    def __init__(self, ledger: Ledger, refused: Refused = dict) -> None:
        disable_created_metrics()  # type: ignore[no-untyped-call]  # *_created is noise here
        self.registry = CollectorRegistry()
        self._collector = _LedgerCollector(ledger, refused)
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

    def count_refused(self, refused: Refused) -> None:
        """Where the refused-GPU gauge reads from (the node feed, made after the metrics)."""
        self._collector.refused = refused

    def problem(self, kind: str) -> None:
        self.problems.labels(kind).inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
