"""Play the kubelet's side of the device-plugin API against the deployed device plugin.

Serves Registration on <dir>/kubelet.sock like the kubelet does, waits for the plugin to
register, then calls its ListAndWatch and prints what it advertised as one JSON line. Runs with
the vslice virtualenv's Python (grpcio and the generated API are there).
"""

from __future__ import annotations

import json
import sys
import threading
from concurrent import futures
from pathlib import Path

import grpc
from vslice_node.deviceplugin.api import deviceplugin_pb2 as api
from vslice_node.deviceplugin.api import deviceplugin_pb2_grpc as rpc


class Kubelet(rpc.RegistrationServicer):
    def __init__(self) -> None:
        self.request: api.RegisterRequest | None = None
        self.registered = threading.Event()

    def Register(self, request: api.RegisterRequest, context: object) -> api.Empty:
        self.request = request
        self.registered.set()
        return api.Empty()


def main(directory: str, timeout: float) -> int:
    socket = Path(directory) / "kubelet.sock"
    socket.unlink(missing_ok=True)
    kubelet = Kubelet()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    rpc.add_RegistrationServicer_to_server(kubelet, server)
    server.add_insecure_port(f"unix://{socket}")
    server.start()
    try:
        if not kubelet.registered.wait(timeout) or kubelet.request is None:
            print(json.dumps({"registered": False}))
            return 1
        request = kubelet.request
        endpoint = Path(directory) / request.endpoint
        with grpc.insecure_channel(f"unix://{endpoint}") as channel:
            stream = rpc.DevicePluginStub(channel).ListAndWatch(api.Empty(), timeout=timeout)
            first = next(iter(stream))
            devices = [(d.ID, d.health) for d in first.devices]
        print(
            json.dumps(
                {
                    "registered": True,
                    "version": request.version,
                    "resource_name": request.resource_name,
                    "endpoint": request.endpoint,
                    "devices": len(devices),
                    "healthy": sum(1 for _, health in devices if health == "Healthy"),
                }
            )
        )
        return 0
    finally:
        server.stop(0)
        socket.unlink(missing_ok=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 30.0))
