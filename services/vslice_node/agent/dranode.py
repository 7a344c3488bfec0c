"""vslice's DRA driver on one node, inside the node agent (``vslice serve device-plugin`` with
``dra: true``): the kubelet plugin's sockets, the claim preparer with its checkpoint, and the
ResourceSlice publisher. It shares the device plugin's GPU backend, handover (shim, limits,
regions, driver files) and node-wide CDI spec, so a slice looks the same to a container on
either path."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry
from vslice_core.dra import DRIVER
from vslice_core.model import NodeInventory

from vslice_node.agent.groups import DraDriverSettings
from vslice_node.dra.metrics import DraMetrics
from vslice_node.dra.prepare import ClaimPreparer
from vslice_node.dra.publisher import SlicePublisher
from vslice_node.dra.server import DRA_SOCKET_NAME, DRAPluginServer
from vslice_node.handover.checkpoint import Checkpoint
from vslice_node.handover.container import Handover


class LazyDraApi:
    """Connects to the API server at the first call (the node agent starts before it is
    reachable on a node being set up) and again after a failed connect."""

    def __init__(self, kubeconfig: str | None) -> None:
        self.kubeconfig = kubeconfig
        self._api: Any = None

    def _target(self) -> Any:
        if self._api is None:
            from vslice_kube.dra import DraApi

            self._api = DraApi.connect(self.kubeconfig)
        return self._api

    def resource_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        found: dict[str, Any] | None = self._target().resource_claim(namespace, name)
        return found

    def resource_slice(self, name: str) -> dict[str, Any] | None:
        found: dict[str, Any] | None = self._target().resource_slice(name)
        return found

    def put_resource_slice(self, body: Any, resource_version: str | None) -> None:
        self._target().put_resource_slice(body, resource_version)

    def node_uid(self, name: str) -> str | None:
        uid: str | None = self._target().node_uid(name)
        return uid


def driver_dir(settings: DraDriverSettings) -> Path:
    return Path(settings.kubelet_plugins_dir) / DRIVER


class DraNode:
    """The DRA front door, built from its own settings group and the little it shares with
    the rest of the agent: the node's name, API access, the CDI spec directory (claims name
    the node-wide spec's devices), the GPUs on the DRA path and the handover."""

    def __init__(
        self,
        settings: DraDriverSettings,
        *,
        node_name: str,
        kubeconfig: str,
        cdi_spec_dir: Path,
        inventory: Callable[[], NodeInventory],
        handover: Handover,
        metrics_registry: CollectorRegistry | None = None,
    ) -> None:
        api = LazyDraApi(kubeconfig or None)
        self.checkpoint = Checkpoint(driver_dir(settings) / "checkpoint.json")
        self.preparer = ClaimPreparer(
            node_name,
            inventory,
            api,
            handover,
            cdi_spec_dir,
            self.checkpoint,
        )
        self.publisher = SlicePublisher(api, node_name, every_s=settings.publish_seconds)
        socket = Path(settings.socket or driver_dir(settings) / DRA_SOCKET_NAME)
        self.server = DRAPluginServer(
            self.preparer,
            driver_name=DRIVER,
            registry_dir=Path(settings.kubelet_plugins_registry),
            dra_socket=socket,
            metrics=DraMetrics(metrics_registry),
        )

    def start(self) -> None:
        self.server.dra_socket.parent.mkdir(parents=True, exist_ok=True)
        self.server.registration_socket.parent.mkdir(parents=True, exist_ok=True)
        self.server.start()

    def stop(self) -> None:
        self.server.stop()

    def status(self) -> dict[str, object]:
        return {
            "driver": DRIVER,
            "kubelet": self.server.state.as_dict(),
            "resource_slice": self.publisher.state,
            "prepared_claims": len(self.checkpoint.uids()),
        }


__all__ = ["DraNode"]
