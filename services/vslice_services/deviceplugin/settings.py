"""Settings of ``vslice serve device-plugin`` (reference: docs/device-plugin.md).

Read like every service's settings (:mod:`vslice_services.settings`): ``VSLICE_<SETTING>``
variables over the ``--config`` YAML file over these defaults.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from vslice_services.settings import NodeServiceSettings

# sockaddr_un.sun_path holds 108 bytes including the terminating NUL.
MAX_SOCKET_PATH = 107


class DevicePluginSettings(NodeServiceSettings):
    """``vslice serve device-plugin``: the kubelet device plugin of one node."""

    listen: str = Field(
        default="0.0.0.0:9400",
        description='HTTP address of /healthz and /status, "HOST:PORT".',
    )
    backend: Literal["static", "nvml"] = Field(
        default="nvml",
        description="Where GPUs come from: nvml (real GPUs) or static (the inventory file).",
    )
    inventory: str = Field(
        default="",
        description="Inventory YAML (CLUSTER format) for the static backend; the entry named "
        "node_name is this node's.",
    )
    device_plugin_dir: str = Field(
        default="/var/lib/kubelet/device-plugins",
        description="The kubelet's device-plugin directory (kubelet.sock lives there).",
    )
    pod_resources_socket: str = Field(
        default="/var/lib/kubelet/pod-resources/kubelet.sock",
        description="The kubelet's PodResources API socket, asked on every Allocate which pods "
        "it has admitted and which containers already hold devices (matching then follows the "
        "kubelet's own record); empty or absent: match from the cluster's record alone.",
    )
    socket_name: str = Field(
        default="vslice.sock", description="File name of the plugin's socket in that directory."
    )
    resource_name: str = Field(
        default="nvidia.com/gpu", description="Extended resource the plugin advertises."
    )
    slots_per_gpu: int = Field(
        default=10, ge=1, le=1000, description="Slices per GPU on the nvml backend."
    )
    container_cache_root: str = Field(
        default="/run/vslice", description="Where those directories appear inside containers."
    )
    shim_library: str = Field(
        default="/usr/local/vslice/lib/libvslice.so",
        description="The shim on the host; mounted read-only at the same path in containers.",
    )
    preload_file: str = Field(
        default="/usr/local/vslice/ld.so.preload",
        description="Host file naming the shim, mounted as the container's /etc/ld.so.preload.",
    )
    context_overhead: str = Field(
        default="",
        description="Passed to containers as VSLICE_CONTEXT_OVERHEAD: device memory the shim "
        "charges per process for its CUDA context (e.g. 300m); empty: the shim's default (0).",
    )
    shim_log_level: str = Field(
        default="",
        description="Passed to containers as VSLICE_LOG_LEVEL (off|error|warn|info|debug); "
        "empty: the shim's default.",
    )
    annotate_every_seconds: float = Field(
        default=60.0,
        gt=0,
        description="The node's vslice.io/node-gpus annotation is rewritten at least this "
        "often (and at once when the inventory or health changes).",
    )
    kubelet_poll_seconds: float = Field(
        default=0.25,
        gt=0,
        le=2,
        description="How often the plugin checks for a kubelet restart (socket directory).",
    )
    api_wait_seconds: float = Field(
        default=10.0,
        gt=0,
        description="How long Allocate keeps retrying an unreachable API server.",
    )

    @field_validator("resource_name")
    @classmethod
    def _extended_resource(cls, value: str) -> str:
        domain, sep, name = value.partition("/")
        if not sep or not domain or not name or "." not in domain:
            raise ValueError(f"resource_name must be 'domain/name', got {value!r}")
        if domain == "kubernetes.io" or domain.endswith(".kubernetes.io"):
            raise ValueError(f"resource_name must not be in kubernetes.io, got {value!r}")
        return value

    @field_validator("socket_name")
    @classmethod
    def _plain_file_name(cls, value: str) -> str:
        if not value or "/" in value or value == "kubelet.sock":
            raise ValueError(
                f"socket_name must be a file name other than kubelet.sock, got {value!r}"
            )
        return value

    @property
    def shim_env(self) -> dict[str, str]:
        env = {
            "VSLICE_CONTEXT_OVERHEAD": self.context_overhead,
            "VSLICE_LOG_LEVEL": self.shim_log_level,
        }
        return {key: value for key, value in env.items() if value}

    @model_validator(mode="after")
    def _consistent(self) -> DevicePluginSettings:
        if self.backend == "static" and not self.inventory:
            raise ValueError("backend static needs inventory (a CLUSTER YAML file), got ''")
        socket_path = Path(self.device_plugin_dir) / self.socket_name
        if len(str(socket_path)) > MAX_SOCKET_PATH:
            raise ValueError(
                f"device_plugin_dir/socket_name must be at most {MAX_SOCKET_PATH} characters "
                f"(a unix socket path), got {str(socket_path)!r}"
            )
        return self
