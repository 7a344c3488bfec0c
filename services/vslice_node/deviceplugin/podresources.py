"""The kubelet's PodResources API: which pods it has admitted and what devices they hold.

The device plugin asks it on every Allocate and GetPreferredAllocation (see pending.py for how
the answer is used). The API is optional: without the socket, or when the kubelet does not
answer within a short timeout, the plugin matches from the cluster's record alone. Problems
are logged once per change of state, not once per call.
"""

from __future__ import annotations

import logging
import os
import threading

import grpc

from vslice_node.deviceplugin.api import podresources_pb2 as pb
from vslice_node.deviceplugin.api import podresources_pb2_grpc as pb_grpc
from vslice_node.deviceplugin.pending import KubeletView

log = logging.getLogger("vslice.deviceplugin.podresources")


def kubelet_view(response: pb.ListPodResourcesResponse, resource_name: str) -> KubeletView:
    """The containers holding devices of ``resource_name``, per pod the kubelet lists."""
    pods: dict[tuple[str, str], frozenset[str]] = {}
    for pod in response.pod_resources:
        served = frozenset(
            container.name
            for container in pod.containers
            if any(d.resource_name == resource_name and d.device_ids for d in container.devices)
        )
        pods[(pod.namespace, pod.name)] = served
    return KubeletView(pods)


class PodResourcesClient:
    """``List`` over the kubelet's pod-resources socket; ``view()`` is None when unavailable."""

    def __init__(self, socket_path: str, resource_name: str, timeout_s: float = 2.0) -> None:
        self.socket_path = socket_path
        self.resource_name = resource_name
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._channel: grpc.Channel | None = None
        self.state = "not asked yet"

    def view(self) -> KubeletView | None:
        if not os.path.exists(self.socket_path):
            self._note(f"unavailable: no socket at {self.socket_path}")
            return None
        stub = pb_grpc.PodResourcesListerStub(self._connected())  # type: ignore[no-untyped-call]
        try:
            response = stub.List(pb.ListPodResourcesRequest(), timeout=self.timeout_s)
        except grpc.RpcError as exc:
            self._reset()  # a restarted kubelet has a new socket: dial again next time
            self._note(f"unavailable: {exc.code().name}: {exc.details()}")
            return None
        self._note("ok")
        return kubelet_view(response, self.resource_name)

    def close(self) -> None:
        self._reset()

    def _connected(self) -> grpc.Channel:
        with self._lock:
            if self._channel is None:
                self._channel = grpc.insecure_channel(f"unix://{self.socket_path}")
            return self._channel

    def _reset(self) -> None:
        with self._lock:
            channel, self._channel = self._channel, None
        if channel is not None:
            channel.close()

    def _note(self, state: str) -> None:
        if state != self.state:
            level = logging.INFO if state == "ok" else logging.WARNING
            log.log(level, "kubelet pod-resources API " + state, extra={"socket": self.socket_path})
            self.state = state
