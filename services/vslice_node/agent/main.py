"""``vslice serve device-plugin``: load settings, pick the backend, serve until SIGTERM.

HTTP: ``GET /healthz`` answers 200 while the plugin's own gRPC server is up (with or without a
kubelet: a node being set up has none yet), 503 otherwise; ``GET /status`` tells the kubelet
link's state ("waiting for kubelet", "registered", ...), device counts and whether the node
annotation is current; ``GET /metrics`` serves the agent's Prometheus metrics
(:mod:`vslice_node.agent.metrics`). /status names claims and pods of every tenant: with
``client_ca_file`` set, /status and /metrics answer only a client certificate whose common name
is in ``client_names`` (the scraping Prometheus, an operator) and 403 to anyone else, while
/healthz stays open to probes.
"""

from __future__ import annotations

import logging
from pathlib import Path

from vslice_core.errors import InvalidRequest
from vslice_serving.httpserve import (
    HttpService,
    Response,
    configure_logging,
    run_until_signal,
    serving_tls,
)
from vslice_serving.settings import load_settings

from vslice_node.agent.nodeagent import NodeAgent
from vslice_node.agent.settings import NodeAgentSettings
from vslice_node.gpus.backends import BackendUnavailable, GpuBackend
from vslice_node.handover.memorybackend import MemoryBackendUnavailable
from vslice_node.nodeapi import ConnectingNodeApi, NodeApi

log = logging.getLogger("vslice.deviceplugin")


STATUS = ("GET", "/status")
METRICS = ("GET", "/metrics")
# Guarded together: /status names pods and claims, and one rule for both is simpler to
# configure than telling the two apart.
GUARDED = frozenset({STATUS, METRICS})


def make_backend(settings: NodeAgentSettings) -> GpuBackend:
    if settings.backend == "static":
        from vslice_node.gpus.backends.static import StaticBackend

        return StaticBackend(Path(settings.inventory), settings.node_name)
    from vslice_node.gpus.backends.nvml import NvmlBackend

    return NvmlBackend(settings.node_name, settings.slots_per_gpu)


def connect_api(settings: NodeAgentSettings) -> NodeApi:
    def connect() -> NodeApi:
        from vslice_kube.nodestate import NodeState

        return NodeState.connect(settings.kubeconfig)

    return ConnectingNodeApi(connect)


def http_service(settings: NodeAgentSettings, plugin: NodeAgent) -> HttpService:
    def healthz(_: bytes) -> Response:
        if plugin.endpoint.serving:
            return Response.text("ok")
        return Response.text("device plugin socket not served", 503)

    def status(_: bytes) -> Response:
        return Response.json(plugin.status())

    def metrics(_: bytes) -> Response:
        body, content_type = plugin.metrics.exposition()
        return Response(200, body, content_type)

    routes = {("GET", "/healthz"): healthz, STATUS: status, METRICS: metrics}
    tls, client_auth = serving_tls(settings, GUARDED)
    return HttpService(settings.listen_address, routes, tls=tls, client_auth=client_auth)


def serve(config_path: str | None) -> int:
    """Run the device plugin; the exit status (2 for bad settings or inventory)."""
    # An InvalidRequest here reaches `vslice serve`, which prints it and exits 2.
    settings = load_settings(NodeAgentSettings, config_path)
    configure_logging("device-plugin", settings.log_level)
    try:
        backend = make_backend(settings)
    except (InvalidRequest, BackendUnavailable) as exc:
        log.error("cannot start the GPU backend", extra={"error": str(exc)})
        return 2
    try:
        plugin = NodeAgent(settings, backend, connect_api(settings))
    except MemoryBackendUnavailable as exc:
        log.error("cannot use the memory backend asked for", extra={"error": str(exc)})
        return 2
    http = http_service(settings, plugin)
    log.info(
        "device plugin starting",
        extra={
            "node": settings.node_name,
            "backend": backend.name,
            "listen": settings.listen,
            "tls": bool(settings.tls_cert_file),
            "client_certificates": bool(settings.client_ca_file),
        },
    )
    plugin.start()
    return run_until_signal([http], cleanups=[plugin.stop])
