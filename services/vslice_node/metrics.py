"""What every Prometheus endpoint of the node shares (the node agent's and the monitor's).

Each service collects into a registry of its own and serves it through :class:`NodeLabelled`,
which gives every series the constant label ``node`` (the Kubernetes node name) and leaves
out the ``*_created`` samples prometheus_client adds to counters and histograms (vslice
exports none, docs/monitor.md). Doing both at the door keeps the front doors' own metrics
free of the node's name, and keeps the result independent of the process-wide
``disable_created_metrics`` switch, which another service in the same process may or may not
have thrown.

The module stands beside the node's layers, not in one: the two front doors and the monitor
may all import it, and it imports nothing of vslice.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

# Seconds. The node's calls wait for the API server (a pod list, a claim read, retried for up
# to ``api_wait_seconds``), so the buckets reach further than the extender's.
LATENCY_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)


def result_counter(
    name: str, documentation: str, results: Iterable[str], registry: CollectorRegistry
) -> Counter:
    """A counter by ``result`` with every result present from the start at 0: ``rate()`` and
    the dashboard need the zero, and a result seen for the first time would otherwise look
    like a series that appeared, not one that rose."""
    counter = Counter(name, documentation, ["result"], registry=registry)
    for result in results:
        counter.labels(result)
    return counter


# Types whose families carry a ``<name>_created`` sample in prometheus_client.
_WITH_CREATED = frozenset({"counter", "histogram", "summary", "gaugehistogram"})


class NodeLabelled(Collector):
    """``inner``'s metrics with ``node="<node>"`` on every sample and no ``*_created``."""

    def __init__(self, inner: Collector, node: str) -> None:
        self.inner = inner
        self.node = node

    def collect(self) -> Iterator[Metric]:
        for family in self.inner.collect():
            created = f"{family.name}_created" if family.type in _WITH_CREATED else None
            labelled = Metric(family.name, family.documentation, family.type, family.unit)
            labelled.samples = [
                sample._replace(labels={**sample.labels, "node": self.node})
                for sample in family.samples
                if sample.name != created
            ]
            yield labelled


class NodeMetrics:
    """A registry whose exposition labels every series with the node's name."""

    def __init__(self, node: str) -> None:
        self.node = node
        self.registry = CollectorRegistry()  # what the parts register into
        self._served = CollectorRegistry()
        self._served.register(NodeLabelled(self.registry, node))

    def exposition(self) -> tuple[bytes, str]:
        """The Prometheus text format and its content type, for ``GET /metrics``."""
        return generate_latest(self._served), CONTENT_TYPE_LATEST
