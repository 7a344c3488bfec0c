"""The device plugin assembled: backend -> device board -> gRPC endpoint, plus the loop that
keeps the board, the node's inventory annotation and pending delivery records current.

Threads: the endpoint's kubelet link, the refresh loop, and gRPC's workers. Locks, in the only
order they may nest: none nest. The board, the allocator and the endpoint status each guard
their own state and never call out while holding their lock (the allocator calls the API
server under its lock, which takes no vslice lock).
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import HealthServicer

from vslice_services.deviceplugin.allocator import Allocator
from vslice_services.deviceplugin.api import deviceplugin_pb2_grpc as pb_grpc
from vslice_services.deviceplugin.backends import GpuBackend
from vslice_services.deviceplugin.board import DeviceBoard
from vslice_services.deviceplugin.cachedirs import CacheSweeper
from vslice_services.deviceplugin.delivery import Layout, ensure_preload_file
from vslice_services.deviceplugin.devices import virtual_devices
from vslice_services.deviceplugin.endpoint import PluginEndpoint
from vslice_services.deviceplugin.inventory_annotation import InventoryAnnotation
from vslice_services.deviceplugin.nodeapi import NodeApi
from vslice_services.deviceplugin.podresources import PodResourcesClient
from vslice_services.deviceplugin.servicer import DevicePluginServicer
from vslice_services.deviceplugin.settings import DevicePluginSettings

log = logging.getLogger("vslice.deviceplugin")


class DevicePlugin:
    def __init__(self, settings: DevicePluginSettings, backend: GpuBackend, api: NodeApi) -> None:
        self.settings = settings
        self.backend = backend
        self.board = DeviceBoard(virtual_devices(backend.inventory().gpus))
        layout = Layout(
            cache_root=Path(settings.cache_root),
            container_cache_root=settings.container_cache_root,
            shim_library=settings.shim_library,
            preload_file=settings.preload_file,
        )
        self.layout = layout
        self.shim_state = "not checked"
        self.pod_resources = (
            PodResourcesClient(settings.pod_resources_socket, settings.resource_name)
            if settings.pod_resources_socket
            else None
        )
        self.allocator = Allocator(
            settings.node_name,
            api,
            layout,
            backend.minors,
            api_wait_s=settings.api_wait_seconds,
            shim_env=settings.shim_env,
            kubelet_view=self.pod_resources.view if self.pod_resources else lambda: None,
        )
        self.annotation = InventoryAnnotation(
            api, settings.node_name, settings.annotate_every_seconds
        )
        self.sweeper = CacheSweeper(Path(settings.cache_root), api, settings.node_name)
        self.servicer = DevicePluginServicer(self.board, self.allocator)
        self.endpoint = PluginEndpoint(
            Path(settings.device_plugin_dir),
            settings.socket_name,
            settings.resource_name,
            self._add_servicer,
            poll_s=settings.kubelet_poll_seconds,
        )
        self._stop = threading.Event()
        self._refresher = threading.Thread(target=self._refresh_loop, name="refresh", daemon=True)

    def _add_servicer(self, server: grpc.Server) -> None:
        pb_grpc.add_DevicePluginServicer_to_server(  # type: ignore[no-untyped-call]
            self.servicer, server
        )
        # The standard gRPC health service, for probes on the plugin's socket.
        health = HealthServicer()
        for service in ("", "v1beta1.DevicePlugin"):
            health.set(service, health_pb2.HealthCheckResponse.SERVING)
        health_pb2_grpc.add_HealthServicer_to_server(health, server)

    def start(self) -> None:
        self.shim_state = ensure_preload_file(self.layout)
        if self.shim_state != "ok":
            log.error("shim not ready on this node", extra={"error": self.shim_state})
        # The kubelet link never waits for the API server: the first refresh runs in the loop.
        self.endpoint.start()
        self._refresher.start()

    def stop(self) -> None:
        self._stop.set()
        self.board.close()
        self.endpoint.stop()
        self._refresher.join(timeout=10)
        self.backend.close()
        if self.pod_resources is not None:
            self.pod_resources.close()

    def refresh(self) -> None:
        """One pass: backend -> board, inventory annotation, delivery records, stale dirs."""
        inventory = self.backend.inventory()
        self.board.update(virtual_devices(inventory.gpus))
        self.annotation.maybe_write(inventory, time.monotonic())
        self.allocator.retry_deliveries()
        self.sweeper.maybe_sweep(time.monotonic())

    def _refresh_loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.refresh()
                self.backend.wait_for_change(1.0)
            except Exception:  # the loop must outlive any single failure
                log.exception("refresh failed")
                self._stop.wait(1.0)

    def status(self) -> dict[str, object]:
        _, devices = self.board.snapshot()
        return {
            "node": self.settings.node_name,
            "backend": self.backend.name,
            "resource": self.settings.resource_name,
            "kubelet": self.endpoint.status.as_dict(),
            "serving": self.endpoint.serving,
            "devices": len(devices),
            "unhealthy_devices": sum(1 for d in devices if not d.healthy),
            "inventory_annotation": self.annotation.state,
            "shim": self.shim_state,
            "pod_resources": self.pod_resources.state if self.pod_resources else "not used",
        }
