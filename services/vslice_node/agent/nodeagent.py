"""The device plugin assembled: backend -> device board -> gRPC endpoint, plus the loop that
keeps the board, the node's inventory annotation and its CDI spec file current.

Threads: the endpoint's kubelet link, the refresh loop, gRPC's workers, the allocator's pod
view (list and watch of the node's pods) and its delivered-record writer. Locks, in the only
order they may nest: none nest. The board, the allocator, the pod view, the writer and the
endpoint status each guard their own state and never call out while holding their lock: no
API server or kubelet call is made under any of them.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import HealthServicer
from vslice_core import annotations as ann
from vslice_core.dra.devices import split
from vslice_core.model import NodeInventory

from vslice_node.agent.dranode import DraNode
from vslice_node.agent.groups import CdiSettings, DriverSettings, HandoverSettings
from vslice_node.agent.metrics import DEVICE_PLUGIN, DRA, FrontDoorCollector, PathState
from vslice_node.agent.settings import NodeAgentSettings
from vslice_node.deviceplugin.allocator import Allocator
from vslice_node.deviceplugin.api import deviceplugin_pb2_grpc as pb_grpc
from vslice_node.deviceplugin.board import DeviceBoard
from vslice_node.deviceplugin.devices import virtual_devices
from vslice_node.deviceplugin.endpoint import PluginEndpoint
from vslice_node.deviceplugin.metrics import AllocationMetrics
from vslice_node.deviceplugin.podresources import PodResourcesClient
from vslice_node.deviceplugin.proofs import ProofCheck
from vslice_node.deviceplugin.servicer import DevicePluginServicer
from vslice_node.gpus.backends import GpuBackend
from vslice_node.gpus.inventory_annotation import InventoryAnnotation
from vslice_node.handover.cachedirs import CacheSweeper
from vslice_node.handover.container import (
    Handover,
    Layout,
    cdi_spec,
    ensure_preload_file,
    gpu_edits,
    shared_edits,
)
from vslice_node.handover.driver import Driver
from vslice_node.handover.edits import Edits, MountSpec
from vslice_node.handover.files import remove_orphan_specs
from vslice_node.handover.hostfiles import HostFiles, device_numbers
from vslice_node.handover.memorybackend import (
    Backend,
    BackendChoice,
    choose_backend,
    probe_driver,
    runs_cgroup_v2,
)
from vslice_node.handover.memoryhook import MemoryHook
from vslice_node.handover.specfile import SpecFile
from vslice_node.metrics import NodeMetrics
from vslice_node.nodeapi import NodeApi

log = logging.getLogger("vslice.deviceplugin")


def handover_of(
    handover: HandoverSettings,
    driver: DriverSettings,
    cdi: CdiSettings,
    memory: Backend = "shim",
) -> Handover:
    """How this node hands GPUs to containers, from the handover and driver settings (and the
    CDI kind the node-wide spec is written under), with the memory backend chosen at start."""
    layout = Layout(
        cache_root=Path(handover.cache_root),
        container_cache_root=handover.container_cache_root,
        shim_library=handover.shim_library,
        preload_file=handover.preload_file,
        limits_root=Path(handover.limits_root),
    )
    files = Driver(
        libraries=tuple(driver.libraries),
        container_dir=driver.container_dir,
        env=dict(driver.env),
        mounts=tuple(MountSpec(m.container_path, m.host_path, m.read_only) for m in driver.mounts),
        dev_dir=driver.host_dev_dir,
    )
    hook = MemoryHook(
        program=handover.memory_limit_hook,
        nvml_library=driver.nvml_library,
        spec_dir=Path(cdi.spec_dir),
        env=dict(driver.host_env),
    )
    return Handover(
        layout=layout,
        driver=files,
        shim_env=handover.shim_env,
        injection=handover.injection,
        cdi_kind=cdi.kind,
        driver_cdi_devices=tuple(driver.cdi_devices),
        memory_hook=hook if memory == "driver" else None,
    )


def memory_backend_of(settings: NodeAgentSettings) -> BackendChoice:
    """The node's memory backend (docs/shim.md "Two memory backends"); raises
    MemoryBackendUnavailable where ``driver`` is asked for and cannot be had."""
    handover, driver = settings.handover, settings.driver
    return choose_backend(
        handover.memory_backend,
        handover.injection,
        runs_cgroup_v2(),
        lambda: probe_driver(handover.memory_limit_hook, driver.nvml_library, driver.host_env),
    )


class NodeAgent:
    def __init__(self, settings: NodeAgentSettings, backend: GpuBackend, api: NodeApi) -> None:
        self.settings = settings
        self.backend = backend
        plugin, dra = settings.device_plugin, settings.dra_driver
        self.metrics = NodeMetrics(settings.node_name)
        self.board = DeviceBoard(virtual_devices(self.extender_inventory().gpus))
        self.memory = memory_backend_of(settings)
        log.info("memory backend chosen", extra=self.memory.as_dict())
        self.handover = handover_of(
            settings.handover, settings.driver, settings.cdi, self.memory.backend
        )
        self.layout = self.handover.layout
        self.shim_state = "not checked"
        self.host_files = HostFiles()
        self.spec_file = SpecFile(
            Path(settings.cdi.spec_dir), settings.cdi.kind, settings.node_name
        )
        self.pod_resources = (
            PodResourcesClient(plugin.pod_resources_socket, plugin.resource_name)
            if plugin.pod_resources_socket
            else None
        )
        self.allocator = Allocator(
            settings.node_name,
            api,
            self.handover,
            backend.minors,
            api_wait_s=plugin.api_wait_seconds,
            kubelet_view=self.pod_resources.view if self.pod_resources else lambda: None,
            proofs=ProofCheck(plugin.allocation_key_file),
        )
        self.annotation = InventoryAnnotation(
            api,
            settings.node_name,
            plugin.annotate_every_seconds,
            extra={ann.MEMORY_BACKEND: self.memory.backend},
        )
        self.sweeper = CacheSweeper(
            Path(settings.handover.cache_root),
            api,
            settings.node_name,
            every_s=settings.handover.region_sweep_seconds,
            grace_s=settings.handover.region_grace_seconds,
        )
        # Limits files go with their pods, on the same schedule as the region directories.
        self.limits_sweeper = CacheSweeper(
            Path(settings.handover.limits_root),
            api,
            settings.node_name,
            every_s=settings.handover.region_sweep_seconds,
            grace_s=settings.handover.region_grace_seconds,
            what="limits directory",
        )
        self.dra = (
            DraNode(
                dra,
                node_name=settings.node_name,
                kubeconfig=settings.kubeconfig,
                cdi_spec_dir=Path(settings.cdi.spec_dir),
                inventory=self.dra_inventory,
                handover=self.handover,
                metrics_registry=self.metrics.registry,
            )
            if dra.enabled
            else None
        )
        if self.dra is not None:
            # Region and limits directories of prepared claims are named by claim UID: they
            # go when the kubelet unprepares the claim, not when no pod has that UID.
            self.sweeper.keep = self.limits_sweeper.keep = self.dra.checkpoint.uids
        self.servicer = DevicePluginServicer(
            self.board, self.allocator, AllocationMetrics(self.metrics.registry)
        )
        self.endpoint = PluginEndpoint(
            Path(plugin.dir),
            plugin.socket_name,
            plugin.resource_name,
            self._add_servicer,
            poll_s=plugin.kubelet_poll_seconds,
        )
        self.metrics.registry.register(FrontDoorCollector(self._paths()))
        self._stop = threading.Event()
        self._refresher = threading.Thread(target=self._refresh_loop, name="refresh", daemon=True)

    def _paths(self) -> dict[str, PathState]:
        """The front doors this node serves, for the registration and GPU gauges."""
        paths = {
            DEVICE_PLUGIN: PathState(
                lambda: self.endpoint.status.is_registered,
                lambda: len(self.extender_inventory().gpus),
            )
        }
        dra = self.dra
        if dra is not None:
            paths[DRA] = PathState(
                lambda: dra.server.registered, lambda: len(self.dra_inventory().gpus)
            )
        return paths

    @property
    def dra_gpus(self) -> list[int] | None:
        """GPU indices on the DRA path: none without ``dra``, else the setting (None: all)."""
        dra = self.settings.dra_driver
        return dra.gpus if dra.enabled else []

    def extender_inventory(self) -> NodeInventory:
        """The GPUs on the device-plugin path: advertised to the kubelet and in the node
        annotation the extender reads. The CDI spec lists every GPU (claims name them too)."""
        return split(self.backend.inventory(), self.dra_gpus)[0]

    def dra_inventory(self) -> NodeInventory:
        return split(self.backend.inventory(), self.dra_gpus)[1]

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
        self.spec_file.remove_stale(keep_current=self.handover.injection == "cdi")
        # Before registering: the kubelet must never hand out a device whose CDI name the
        # runtime cannot resolve yet.
        self.sync_node_files()
        # Before the kubelet link: the pod view starts listing while registration runs. It
        # never waits for the API server (until its first list, Allocate lists for itself).
        self.allocator.start()
        # The kubelet link never waits for the API server: the first refresh runs in the loop.
        self.endpoint.start()
        if self.dra is not None:
            self.dra.start()
        self._refresher.start()

    def stop(self) -> None:
        self._stop.set()
        self.board.close()
        if self.dra is not None:
            self.dra.stop()
        self.endpoint.stop()
        # After the endpoint: no Allocate comes any more, and queued delivered records get
        # their chance to be written before the process ends.
        self.allocator.stop()
        self._refresher.join(timeout=10)
        self.backend.close()
        if self.pod_resources is not None:
            self.pod_resources.close()

    def refresh(self) -> None:
        """One pass: backend -> board, host files and CDI spec, inventory annotation, stale
        dirs. (Delivered records have their own writer, which retries by itself.)"""
        inventory, on_dra = split(self.backend.inventory(), self.dra_gpus)
        self.board.update(virtual_devices(inventory.gpus))
        self.sync_node_files()
        self.annotation.maybe_write(inventory, time.monotonic())
        if self.dra is not None:
            self.dra.publisher.maybe_publish(on_dra, time.monotonic())
        self.sweeper.maybe_sweep(time.monotonic())
        swept = self.limits_sweeper.maybe_sweep(time.monotonic())
        if swept and self.handover.memory_hook is not None:
            # On the limits sweep's schedule: a container's hook spec goes with its limits.
            remove_orphan_specs(self.handover.memory_hook.spec_dir, self.layout.limits_root)

    def sync_node_files(self) -> None:
        """Check the host files GPU containers need; in CDI mode, rewrite the spec on change.

        Runs once in start() before the refresh loop, then only in the loop: the spec file
        has a single writer."""
        minors = self.backend.minors()
        gpus = [gpu_edits(self.handover, minor) for minor in minors.values()]
        edits = sum(gpus, Edits()) + shared_edits(self.handover)
        # The shim's own files are checked (and reported) by ensure_preload_file.
        shim = {self.layout.shim_library, self.layout.preload_file}
        self.host_files.check(p for p in edits.host_paths() if p not in shim)
        if self.handover.injection != "cdi":
            return
        numbers = device_numbers(d.host_path for d in edits.devices)
        document = cdi_spec(self.handover, self.settings.node_name, minors, numbers)
        self.spec_file.update(document if minors else None)

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
            "resource": self.settings.device_plugin.resource_name,
            "kubelet": self.endpoint.status.as_dict(),
            "serving": self.endpoint.serving,
            "devices": len(devices),
            "unhealthy_devices": sum(1 for d in devices if not d.healthy),
            "inventory_annotation": self.annotation.state,
            "shim": self.shim_state,
            "memory_backend": self.memory.as_dict(),
            "host_files": self.host_files.state,
            "injection": self.handover.injection,
            "cdi_spec": (
                {"path": str(self.spec_file.path), "state": self.spec_file.state}
                if self.handover.injection == "cdi"
                else "not used"
            ),
            "pod_resources": self.pod_resources.state if self.pod_resources else "not used",
            "pod_view": self.allocator.view.state,
            # Allocate and GetPreferredAllocation calls the view could not answer alone.
            "pod_lists_on_allocate": self.allocator.fresh_lists,
            "delivered_records_waiting": self.allocator.deliveries.waiting(),
            "allocation_proof": self.allocator.proofs.state,
            "dra": self.dra.status() if self.dra is not None else "not used",
        }
