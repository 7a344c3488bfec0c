"""The device plugin's Prometheus metrics (served by the node agent at ``GET /metrics``).

- ``vslice_deviceplugin_allocations_total{result}``: one per container the kubelet asks
  Allocate for; ``result`` is ``allocated``, ``refused`` (only a pod without a valid
  allocation proof, or one that would shadow vslice's files, could match), ``no_pending``
  (no pod waits for a slice of that size) or ``error`` (unknown device IDs, API server
  unreachable, the node's files not written, anything unexpected);
- ``vslice_deviceplugin_allocate_seconds``: the time to answer one container, whatever the
  result (a container waits for this before it starts).

The node agent adds the ``node`` label when it serves them (:mod:`vslice_node.metrics`).
"""

from __future__ import annotations

from typing import Final, Literal

from prometheus_client import CollectorRegistry, Histogram

from vslice_node.metrics import LATENCY_BUCKETS, result_counter

AllocationResult = Literal["allocated", "refused", "no_pending", "error"]
RESULTS: Final[tuple[AllocationResult, ...]] = ("allocated", "refused", "no_pending", "error")


class AllocationMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        # A private registry by default: a servicer built without the agent (tests) counts
        # all the same, and nothing ever lands in prometheus_client's global registry.
        registry = registry if registry is not None else CollectorRegistry()
        self.allocations = result_counter(
            "vslice_deviceplugin_allocations",
            "Containers the kubelet asked Allocate for, by result",
            RESULTS,
            registry,
        )
        self.allocate_seconds = Histogram(
            "vslice_deviceplugin_allocate_seconds",
            "Time to answer Allocate for one container",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )

    def counted(self, result: AllocationResult) -> None:
        self.allocations.labels(result).inc()
