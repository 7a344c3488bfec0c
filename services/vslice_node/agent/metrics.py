"""The node agent's Prometheus metrics, served at ``GET /metrics`` on its HTTP listener.

Every series has the constant label ``node`` (:class:`vslice_node.metrics.NodeMetrics`).

- the device plugin's Allocate counter and histogram (:mod:`vslice_node.deviceplugin.metrics`)
  and the DRA driver's prepare/unprepare counters and histogram (:mod:`vslice_node.dra.metrics`);
- ``vslice_nodeagent_registered{path}``: 1 while the kubelet has the front door registered
  (``deviceplugin``: the last Register call succeeded and the kubelet has not restarted
  since; ``dra``: the kubelet's last NotifyRegistrationStatus accepted the driver), else 0;
- ``vslice_nodeagent_gpus{path}``: the GPUs this agent serves on that path.

Both gauges are read when scraped and name only the paths the node serves: ``dra`` only with
``dra_driver.enabled``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

DEVICE_PLUGIN = "deviceplugin"
DRA = "dra"


class PathState:
    """One front door as the gauges see it."""

    def __init__(self, registered: Callable[[], bool], gpus: Callable[[], int]) -> None:
        self.registered = registered
        self.gpus = gpus


class FrontDoorCollector(Collector):
    """``vslice_nodeagent_registered`` and ``vslice_nodeagent_gpus`` per served path."""

    def __init__(self, paths: Mapping[str, PathState]) -> None:
        self.paths = paths

    def collect(self) -> Iterator[GaugeMetricFamily]:
        registered = GaugeMetricFamily(
            "vslice_nodeagent_registered",
            "1 while the kubelet has this front door registered, else 0",
            labels=["path"],
        )
        gpus = GaugeMetricFamily(
            "vslice_nodeagent_gpus", "GPUs this agent serves on the path", labels=["path"]
        )
        for path, state in self.paths.items():
            registered.add_metric([path], 1 if state.registered() else 0)
            gpus.add_metric([path], state.gpus())
        yield registered
        yield gpus
