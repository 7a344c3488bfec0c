"""A device plugin on a test node, for the protocol tests: static backend (an inventory YAML),
an in-memory API server, every host path under the test's own directories.

The plugin's files (shim, preload file, CDI spec directory, stand-in device directory) live in
``files``; its sockets in a short directory, since unix socket paths are limited to 107 bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml
from kubelet import plugin_client
from memory_nodeapi import MemoryNodeApi
from vslice_core import annotations as ann
from vslice_core.model import Allocation, ContainerAllocation, GpuGrant
from vslice_node.agent.nodeagent import NodeAgent
from vslice_node.agent.settings import NodeAgentSettings
from vslice_node.deviceplugin.api import deviceplugin_pb2 as pb
from vslice_node.deviceplugin.api import deviceplugin_pb2_grpc as pb_grpc
from vslice_node.gpus.backends.static import StaticBackend

NODE = "gpu-node-1"
GPU_A = "GPU-6c7f0d8e-0000-4000-8000-00000000000a"
GPU_B = "GPU-6c7f0d8e-0000-4000-8000-00000000000b"
SLOTS = 4
GPU = {"model": "NVIDIA-A100-SXM4-80GB", "memory_mib": 81920, "slots": SLOTS}


def inventory(healthy_b: bool = True, extra: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """GPU_A (index 0) and GPU_B (index 1) on NODE, plus ``extra`` GPUs."""
    return {
        "nodes": [
            {
                "name": NODE,
                "gpus": [
                    {**GPU, "uuid": GPU_A, "index": 0, "numa": 0},
                    {**GPU, "uuid": GPU_B, "index": 1, "numa": 1, "healthy": healthy_b},
                    *({**GPU, **gpu} for gpu in extra),
                ],
            },
            {"name": "other-node", "gpus": []},
        ]
    }


@dataclass
class Lab:
    directory: Path
    inventory_file: Path
    cache_root: Path
    files: Path
    api: MemoryNodeApi
    plugin: NodeAgent

    def client(self) -> pb_grpc.DevicePluginStub:
        return plugin_client(self.directory / "vslice.sock")


def make_lab(sockets: Path, files: Path, **settings: Any) -> Lab:
    """A plugin (not started) whose settings are the test defaults overridden by ``settings``."""
    plugins = sockets / "device-plugins"
    plugins.mkdir()
    inventory_file = files / "inventory.yaml"
    inventory_file.write_text(yaml.safe_dump(inventory()))
    shim = files / "libvslice.so"
    shim.write_bytes(b"\x7fELF")
    values: dict[str, Any] = {
        "node_name": NODE,
        "backend": "static",
        "inventory": str(inventory_file),
        "device_plugin_dir": str(plugins),
        "cache_root": str(files / "containers"),
        "limits_root": str(files / "limits"),
        "shim_library": str(shim),
        "preload_file": str(files / "ld.so.preload"),
        "cdi_spec_dir": str(files / "cdi"),
        "kubelet_poll_seconds": 0.1,
        "api_wait_seconds": 2.0,
        # Served only when a test asks for it.
        "pod_resources_socket": str(sockets / "pod-resources.sock"),
        **settings,
    }
    api = MemoryNodeApi()
    api.put_node(NODE)
    backend = StaticBackend(inventory_file, NODE, poll_s=0.1)
    plugin = NodeAgent(NodeAgentSettings(**values), backend, api)
    return Lab(plugins, inventory_file, files / "containers", files, api, plugin)


def gpu_pod(
    name: str, created: str, grants: dict[str, list[GpuGrant]], bound: str | None = None
) -> dict[str, Any]:
    allocation = Allocation(
        node=NODE,
        containers=[ContainerAllocation(name=c, gpus=g) for c, g in grants.items()],
    )
    annotations = {ann.ALLOCATION: ann.encode_allocation(allocation)}
    if bound is not None:
        annotations[ann.BIND_TIME] = ann.encode_bind_time(datetime.fromisoformat(bound))
    return {
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "uid": f"uid-{name}",
            "creationTimestamp": created,
            "annotations": annotations,
        },
        "spec": {"nodeName": NODE, "containers": [{"name": c} for c in grants]},
        "status": {"phase": "Pending"},
    }


def grant(uuid: str, index: int, memory_mib: int = 30720, cores: int = 50) -> GpuGrant:
    return GpuGrant(uuid=uuid, index=index, memory_mib=memory_mib, cores=cores)


def allocate(client: pb_grpc.DevicePluginStub, *device_ids: str) -> pb.ContainerAllocateResponse:
    request = pb.AllocateRequest(
        container_requests=[pb.ContainerAllocateRequest(devices_ids=list(device_ids))]
    )
    response = client.Allocate(request, timeout=10)
    assert len(response.container_responses) == 1
    return response.container_responses[0]


def delivered(api: MemoryNodeApi, name: str) -> list[str]:
    value = api.pod("team-a", name)["metadata"]["annotations"][ann.DELIVERED]
    return ann.decode_delivered(value).containers
