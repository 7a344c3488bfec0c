"""The kubelet's side of the device-plugin API, for protocol tests.

A real gRPC Registration server on ``<dir>/kubelet.sock``. Like the kubelet, on each Register
it dials the plugin's endpoint back and opens ListAndWatch; a registration counts as done when
the first device list has arrived over that stream (a Register whose endpoint cannot be reached
is recorded as failed). The stream stays open, as the kubelet's does, and keeps the latest
device list. The kubelet's own logic (admission, its checkpoint) is not reproduced.

``PodResources`` serves the kubelet's PodResources ``List`` on its own socket, answering with
whatever the test says the kubelet has admitted.
"""

from __future__ import annotations

import queue
import threading
import time
from concurrent import futures
from pathlib import Path

import grpc
from vslice_node.deviceplugin.api import deviceplugin_pb2 as pb
from vslice_node.deviceplugin.api import deviceplugin_pb2_grpc as pb_grpc
from vslice_node.deviceplugin.api import podresources_pb2 as pr
from vslice_node.deviceplugin.api import podresources_pb2_grpc as pr_grpc


class Kubelet(pb_grpc.RegistrationServicer):
    """The kubelet's Registration service on ``<directory>/kubelet.sock``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.requests: queue.Queue[tuple[float, pb.RegisterRequest]] = queue.Queue()
        self.failed: queue.Queue[tuple[pb.RegisterRequest, str]] = queue.Queue()
        self.devices: list[pb.Device] = []
        self._streams: list[grpc.Future] = []
        self._lock = threading.Lock()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb_grpc.add_RegistrationServicer_to_server(self, self.server)
        self.server.add_insecure_port(f"unix://{directory / 'kubelet.sock'}")
        self.server.start()

    def Register(self, request: pb.RegisterRequest, context: grpc.ServicerContext) -> pb.Empty:
        threading.Thread(target=self._dial_back, args=(request,), daemon=True).start()
        return pb.Empty()

    def _dial_back(self, request: pb.RegisterRequest) -> None:
        channel = grpc.insecure_channel(f"unix://{self.directory / request.endpoint}")
        first = True
        try:
            grpc.channel_ready_future(channel).result(timeout=2)
            stream = pb_grpc.DevicePluginStub(channel).ListAndWatch(pb.Empty())
            with self._lock:
                self._streams.append(stream)
            for response in stream:
                self.devices = list(response.devices)
                if first:
                    self.requests.put((time.monotonic(), request))
                    first = False
        except grpc.FutureTimeoutError:
            self.failed.put((request, "endpoint not reachable"))
        except grpc.RpcError as error:
            if first:
                self.failed.put((request, str(error.code())))
        finally:
            channel.close()

    def next_registration(self, timeout_s: float = 10) -> tuple[float, pb.RegisterRequest]:
        """(monotonic time the first device list arrived, request) of the next registration."""
        return self.requests.get(timeout=timeout_s)

    def stop(self) -> None:
        self.server.stop(grace=0).wait()
        with self._lock:
            for stream in self._streams:
                stream.cancel()


def plugin_client(socket: Path, timeout_s: float = 10) -> pb_grpc.DevicePluginStub:
    """A DevicePlugin client on the plugin's socket, once it accepts connections."""
    channel = grpc.insecure_channel(f"unix://{socket}")
    grpc.channel_ready_future(channel).result(timeout=timeout_s)
    return pb_grpc.DevicePluginStub(channel)


class PodResources(pr_grpc.PodResourcesListerServicer):
    """The kubelet's PodResources API on ``socket``. ``admit`` lists a pod the way the kubelet
    does while admitting it (no devices yet); ``serve`` records devices given to a container."""

    def __init__(self, socket: Path) -> None:
        self.pods: dict[tuple[str, str], dict[str, dict[str, list[str]]]] = {}
        self.calls = 0
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        pr_grpc.add_PodResourcesListerServicer_to_server(self, self.server)  # type: ignore[no-untyped-call]
        self.server.add_insecure_port(f"unix://{socket}")
        self.server.start()

    def admit(self, namespace: str, pod: str, *containers: str) -> None:
        self.pods[(namespace, pod)] = {name: {} for name in containers}

    def serve(self, namespace: str, pod: str, container: str, resource: str, *ids: str) -> None:
        self.pods.setdefault((namespace, pod), {}).setdefault(container, {})[resource] = list(ids)

    def List(
        self, request: pr.ListPodResourcesRequest, context: grpc.ServicerContext
    ) -> pr.ListPodResourcesResponse:
        self.calls += 1
        return pr.ListPodResourcesResponse(
            pod_resources=[
                pr.PodResources(
                    name=name,
                    namespace=namespace,
                    containers=[
                        pr.ContainerResources(
                            name=container,
                            devices=[
                                pr.ContainerDevices(resource_name=r, device_ids=ids)
                                for r, ids in devices.items()
                            ],
                        )
                        for container, devices in containers.items()
                    ],
                )
                for (namespace, name), containers in self.pods.items()
            ]
        )

    def stop(self) -> None:
        self.server.stop(grace=0).wait()
