"""The DRA driver's Prometheus metrics (served by the node agent at ``GET /metrics``).

- ``vslice_dra_prepares_total{result}``: one per claim in a NodePrepareResources call;
  ``result`` is ``prepared`` or ``error`` (the claim's answer carries an error, or the whole
  call failed, in which case every claim of it counts);
- ``vslice_dra_unprepares_total{result}``: the same for NodeUnprepareResources, ``unprepared``
  or ``error``;
- ``vslice_dra_prepare_seconds``: the time to answer one NodePrepareResources call (all its
  claims), whatever the result.

The node agent adds the ``node`` label when it serves them (:mod:`vslice_node.metrics`).
"""

from __future__ import annotations

from typing import Literal

from prometheus_client import CollectorRegistry, Histogram

from vslice_node.metrics import LATENCY_BUCKETS, result_counter

PrepareResult = Literal["prepared", "error"]
UnprepareResult = Literal["unprepared", "error"]


class DraMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        # A private registry by default: a servicer built without the agent (tests) counts
        # all the same, and nothing ever lands in prometheus_client's global registry.
        registry = registry if registry is not None else CollectorRegistry()
        self.prepares = result_counter(
            "vslice_dra_prepares",
            "Claims the kubelet asked to prepare, by result",
            ("prepared", "error"),
            registry,
        )
        self.unprepares = result_counter(
            "vslice_dra_unprepares",
            "Claims the kubelet asked to unprepare, by result",
            ("unprepared", "error"),
            registry,
        )
        self.prepare_seconds = Histogram(
            "vslice_dra_prepare_seconds",
            "Time to answer one NodePrepareResources call",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )

    def prepared(self, result: PrepareResult, claims: int = 1) -> None:
        if claims:
            self.prepares.labels(result).inc(claims)

    def unprepared(self, result: UnprepareResult, claims: int = 1) -> None:
        if claims:
            self.unprepares.labels(result).inc(claims)
