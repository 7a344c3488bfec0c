"""Device plugin re-registration after a kubelet restart wipes the device-plugins directory.

Runs the real ``vslice serve device-plugin`` (static backend, default polling settings) as a
process and plays the kubelet with a gRPC Registration server on ``kubelet.sock``. Each round
does what a restarting kubelet does: its server goes away, every file in the directory is
deleted, and (after ``--restart-delay`` seconds, the kubelet's own start-up time) a new
``kubelet.sock`` is served. Like the kubelet, the fake dials the plugin back on Register and
opens ListAndWatch. Measured per round: time from the wipe to the first device list over the
new registration, and from the new ``kubelet.sock`` to that list.

Run: ``.venv/bin/python benchmarks/deviceplugin_reregister.py`` (options: --rounds,
--restart-delay). The last line is ``deviceplugin_reregister rounds=<n> wipe_p50_s=<x>
wipe_max_s=<y> socket_p50_s=<z> socket_max_s=<w>``.
Target (DESIGN.md): re-registered within 5 s of the wipe.
"""

from __future__ import annotations

import argparse
import queue
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent import futures
from pathlib import Path

import grpc
import yaml
from vslice_node.deviceplugin.api import deviceplugin_pb2 as pb
from vslice_node.deviceplugin.api import deviceplugin_pb2_grpc as pb_grpc

NODE = "bench-node"


class Registration(pb_grpc.RegistrationServicer):
    """Like the kubelet: on Register, dial the plugin back and open ListAndWatch. The time
    recorded is when the first device list arrives (a registration that actually works)."""

    def __init__(self, directory: Path, calls: queue.Queue[float]) -> None:
        self.directory = directory
        self.calls = calls

    def Register(self, request: pb.RegisterRequest, context: grpc.ServicerContext) -> pb.Empty:
        threading.Thread(target=self._dial_back, args=(request.endpoint,), daemon=True).start()
        return pb.Empty()

    def _dial_back(self, endpoint: str) -> None:
        with grpc.insecure_channel(f"unix://{self.directory / endpoint}") as channel:
            try:
                grpc.channel_ready_future(channel).result(timeout=2)
                stream = pb_grpc.DevicePluginStub(channel).ListAndWatch(pb.Empty(), timeout=5)
                next(stream)
                self.calls.put(time.monotonic())
                stream.cancel()
            except (grpc.FutureTimeoutError, grpc.RpcError):
                pass  # a registration whose endpoint is gone does not count


def kubelet(directory: Path, calls: queue.Queue[float]) -> grpc.Server:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_RegistrationServicer_to_server(Registration(directory, calls), server)
    server.add_insecure_port(f"unix://{directory / 'kubelet.sock'}")
    server.start()
    return server


def start_plugin(work: Path, plugins: Path) -> subprocess.Popen[bytes]:
    inventory = work / "inventory.yaml"
    gpus = [
        {"uuid": f"GPU-{i}", "model": "NVIDIA-A100-SXM4-80GB", "memory_mib": 81920, "slots": 10}
        for i in range(8)
    ]
    inventory.write_text(yaml.safe_dump({"nodes": [{"name": NODE, "gpus": gpus}]}))
    config = work / "device-plugin.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "listen": "127.0.0.1:0",
                "node_name": NODE,
                "backend": "static",
                "inventory": str(inventory),
                "device_plugin_dir": str(plugins),
                "cache_root": str(work / "containers"),
                "shim_library": str(work / "libvslice.so"),
                "preload_file": str(work / "ld.so.preload"),
                "cdi_spec_dir": str(work / "cdi"),
                "kubeconfig": str(work / "no-kubeconfig"),
                "log_level": "warning",
            }
        )
    )
    vslice = str(Path(sys.executable).parent / "vslice")
    return subprocess.Popen(
        [vslice, "serve", "device-plugin", "--config", str(config)], stderr=subprocess.DEVNULL
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--restart-delay", type=float, default=0.5)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="vsbench-", dir="/tmp"))
    plugins = work / "dp"
    plugins.mkdir()
    calls: queue.Queue[float] = queue.Queue()
    server = kubelet(plugins, calls)
    plugin = start_plugin(work, plugins)
    from_wipe: list[float] = []
    from_socket: list[float] = []
    try:
        calls.get(timeout=30)  # first registration
        for _ in range(args.rounds):
            server.stop(grace=0).wait()
            for entry in plugins.iterdir():
                entry.unlink()
            wiped = time.monotonic()
            time.sleep(args.restart_delay)
            server = kubelet(plugins, calls)
            served = time.monotonic()
            registered = calls.get(timeout=30)
            from_wipe.append(registered - wiped)
            from_socket.append(registered - served)
            time.sleep(0.3)
            while not calls.empty():  # a round must never see another round's registration
                calls.get_nowait()
    finally:
        server.stop(grace=0)
        plugin.send_signal(signal.SIGTERM)
        plugin.wait(timeout=15)
        shutil.rmtree(work, ignore_errors=True)
    for name, values in (("wipe", from_wipe), ("socket", from_socket)):
        print(
            f"{name:>6}: p50 {statistics.median(values):.3f} s  max {max(values):.3f} s  "
            f"(n={len(values)})"
        )
    print(
        f"deviceplugin_reregister rounds={args.rounds} "
        f"wipe_p50_s={statistics.median(from_wipe):.3f} wipe_max_s={max(from_wipe):.3f} "
        f"socket_p50_s={statistics.median(from_socket):.3f} "
        f"socket_max_s={max(from_socket):.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
