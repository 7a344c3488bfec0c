"""``vslice serve monitor``: serve /metrics (Prometheus text format) and /healthz until SIGTERM."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from pathlib import Path

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from vslice_serving.httpserve import HttpService, Response, configure_logging, run_until_signal
from vslice_serving.settings import load_settings

from vslice_node.handover.checkpoint import prepared_claims
from vslice_node.monitor.collector import ContainerCollector
from vslice_node.monitor.nodegpus import NodeGpuCollector, start_nvml
from vslice_node.monitor.podnames import PodNames
from vslice_node.monitor.regions import RegionReader
from vslice_node.monitor.settings import MonitorSettings
from vslice_node.nodeapi import ConnectingNodeApi, NodeApi

log = logging.getLogger("vslice.monitor")


def connect_api(settings: MonitorSettings) -> NodeApi:
    def connect() -> NodeApi:
        from vslice_kube.nodestate import NodeState

        return NodeState.connect(settings.kubeconfig)

    return ConnectingNodeApi(connect)


def no_names(_uids: Collection[str]) -> Mapping[str, tuple[str, str]]:
    """Pod names when the monitor may not ask the API server: none (uids only)."""
    return {}


def metrics_service(
    settings: MonitorSettings,
    pod_names: Callable[[Collection[str]], Mapping[str, tuple[str, str]]],
) -> tuple[HttpService, list[Callable[[], None]]]:
    """The HTTP service and the cleanups it needs at shutdown."""
    registry = CollectorRegistry()
    registry.register(ContainerCollector(RegionReader(Path(settings.cache_root)), pod_names))
    cleanups: list[Callable[[], None]] = []
    nvml = start_nvml() if settings.backend == "nvml" else None
    if nvml is not None:
        registry.register(NodeGpuCollector(nvml))
        cleanups.append(nvml.nvmlShutdown)

    def metrics(_: bytes) -> Response:
        return Response(200, generate_latest(registry), CONTENT_TYPE_LATEST)

    return HttpService(settings.listen_address, {("GET", "/metrics"): metrics}), cleanups


def serve(config_path: str | None) -> int:
    """Run the monitor; the exit status (2 for bad settings)."""
    # An InvalidRequest here reaches `vslice serve`, which prints it and exits 2.
    settings = load_settings(MonitorSettings, config_path)
    configure_logging("monitor", settings.log_level)
    pod_names: Callable[[Collection[str]], Mapping[str, tuple[str, str]]] = no_names
    cleanups: list[Callable[[], None]] = []
    if settings.pod_names:
        checkpoint = Path(settings.dra_checkpoint)
        names = PodNames(
            connect_api(settings),
            settings.node_name,
            settings.pod_names_every_seconds,
            claims=lambda: prepared_claims(checkpoint),
        )
        names.start()
        pod_names = names
        cleanups.append(names.stop)
    http, more = metrics_service(settings, pod_names)
    log.info(
        "monitor starting", extra={"listen": settings.listen, "cache_root": settings.cache_root}
    )
    return run_until_signal([http], cleanups=[*cleanups, *more])
