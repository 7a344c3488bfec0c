"""``vslice serve monitor``: serve /metrics (Prometheus text format) and /healthz until SIGTERM.

The series name every tenant's pods (``namespace``, ``pod``): with ``client_ca_file`` set,
/metrics answers only a client certificate whose common name is in ``client_names`` (the
scraping Prometheus, an operator) and 403 to anyone else; /healthz stays open to probes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from prometheus_client.registry import Collector
from vslice_serving.httpserve import (
    HttpService,
    Response,
    configure_logging,
    run_until_signal,
    serving_tls,
)
from vslice_serving.settings import load_settings

from vslice_node.handover.checkpoint import prepared_claims
from vslice_node.handover.memoryhook import MARK_FILE, marked_backend
from vslice_node.metrics import NodeMetrics
from vslice_node.monitor.collector import ContainerCollector, Idleness, no_pods
from vslice_node.monitor.idlereclaim import IdleReclaimer, IdleSettings
from vslice_node.monitor.nodegpus import NodeGpuCollector, start_nvml
from vslice_node.monitor.podnames import PodLookup, PodNames
from vslice_node.monitor.regions import RegionReader
from vslice_node.monitor.settings import MonitorSettings
from vslice_node.nodeapi import ConnectingNodeApi, NodeApi

log = logging.getLogger("vslice.monitor")


def connect_api(settings: MonitorSettings) -> NodeApi:
    def connect() -> NodeApi:
        from vslice_kube.nodestate import NodeState

        return NodeState.connect(settings.kubeconfig)

    return ConnectingNodeApi(connect)


METRICS = ("GET", "/metrics")
# The routes that name tenants' pods, so the ones a client certificate guards.
GUARDED = frozenset({METRICS})

# Pod names when the monitor may not ask the API server: none (uids only), nothing left out.
no_names = no_pods


def metrics_service(
    settings: MonitorSettings,
    pods: PodLookup,
    idleness: Idleness | None = None,
    more: Sequence[Collector] = (),
) -> tuple[HttpService, list[Callable[[], None]]]:
    """The HTTP service and the cleanups it needs at shutdown."""
    served = NodeMetrics(settings.node_name)
    reader = RegionReader(Path(settings.cache_root))
    limits_root = Path(settings.limits_root)

    def backend_of(owner: str, container: str) -> str:
        mark = limits_root / owner / container / MARK_FILE
        try:
            return marked_backend(mark.read_text(errors="replace"))
        except OSError:
            return marked_backend(None)

    served.registry.register(
        ContainerCollector(
            reader, pods, idleness=idleness, hami=settings.hami_metrics, backend_of=backend_of
        )
    )
    for collector in more:
        served.registry.register(collector)
    cleanups: list[Callable[[], None]] = []
    nvml = start_nvml() if settings.backend == "nvml" else None
    if nvml is not None:
        served.registry.register(NodeGpuCollector(nvml, hami=settings.hami_metrics))
        cleanups.append(nvml.nvmlShutdown)

    def metrics(_: bytes) -> Response:
        body, content_type = served.exposition()
        return Response(200, body, content_type)

    tls, client_auth = serving_tls(settings, GUARDED)
    http = HttpService(
        settings.listen_address, {METRICS: metrics}, tls=tls, client_auth=client_auth
    )
    return http, cleanups


def idle_reclaimer(
    settings: MonitorSettings, api: NodeApi, names: PodNames, idleness: Idleness
) -> IdleReclaimer:
    return IdleReclaimer(
        api,
        names.latest,
        RegionReader(Path(settings.cache_root)),
        idleness,
        IdleSettings(
            idle_after_s=settings.idle_after_seconds,
            grace_s=settings.idle_grace_seconds,
            reclaim=settings.idle_reclaim,
            every_s=settings.idle_check_every_seconds,
        ),
    )


def serve(config_path: str | None) -> int:
    """Run the monitor; the exit status (2 for bad settings)."""
    # An InvalidRequest here reaches `vslice serve`, which prints it and exits 2.
    settings = load_settings(MonitorSettings, config_path)
    configure_logging("monitor", settings.log_level)
    pod_names: PodLookup = no_names
    cleanups: list[Callable[[], None]] = []
    idleness = Idleness()
    collectors: list[Collector] = []
    if settings.pod_names:
        checkpoint = Path(settings.dra_checkpoint)
        api = connect_api(settings)
        names = PodNames(
            api,
            settings.node_name,
            settings.pod_names_every_seconds,
            claims=lambda: prepared_claims(checkpoint),
        )
        names.start()
        pod_names = names
        cleanups.append(names.stop)
        # Idle slices need the pods' names and the API (the opt-in, events, evictions).
        reclaimer = idle_reclaimer(settings, api, names, idleness)
        reclaimer.start()
        collectors.append(reclaimer.metrics)
        cleanups.append(reclaimer.stop)
    http, more = metrics_service(settings, pod_names, idleness, collectors)
    log.info(
        "monitor starting",
        extra={
            "listen": settings.listen,
            "cache_root": settings.cache_root,
            "tls": bool(settings.tls_cert_file),
            "client_certificates": bool(settings.client_ca_file),
        },
    )
    return run_until_signal([http], cleanups=[*cleanups, *more])
