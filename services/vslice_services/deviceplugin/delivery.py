"""What a container is handed at start: environment, mounts and device nodes.

A pure function of the container's grants and the node's file layout, so the exact answer the
kubelet receives is unit-tested without gRPC.

Layout (documented in docs/device-plugin.md):

- the shim library is mounted read-only at the same path it has on the host;
- ``/etc/ld.so.preload`` comes read-only from a host file naming the shim, so every process
  of the container loads it, whatever its entry point;
- each container gets its own host directory ``<cache_root>/<pod uid>/<container>``, mounted
  read-write at ``<container_cache_root>/<pod uid>/<container>``; the shim creates its region
  file ``vslice.cache`` there (``CUDA_DEVICE_MEMORY_SHARED_CACHE``), and the monitor finds
  it on the host under the same relative path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from vslice_core.model import GpuGrant

REGION_FILE = "vslice.cache"
CONTROL_DEVICES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")


@dataclass(frozen=True)
class Layout:
    """Where the shim and the shared regions live, on the host and inside containers."""

    cache_root: Path
    container_cache_root: str = "/run/vslice"
    shim_library: str = "/usr/local/vslice/lib/libvslice.so"
    preload_file: str = "/usr/local/vslice/ld.so.preload"

    def host_cache_dir(self, pod_uid: str, container: str) -> Path:
        return self.cache_root / pod_uid / container

    def container_cache_dir(self, pod_uid: str, container: str) -> PurePosixPath:
        return PurePosixPath(self.container_cache_root) / pod_uid / container


def ensure_preload_file(layout: Layout) -> str:
    """Write the preload file (naming the shim) when missing; a state line for /status.

    Both host paths are bind-mounted into every GPU container, so a missing one makes the
    container fail to start; this says so at start instead of at the first pod.
    """
    preload = Path(layout.preload_file)
    if not preload.exists():
        try:
            preload.parent.mkdir(parents=True, exist_ok=True)
            preload.write_text(layout.shim_library + "\n")
        except OSError as exc:
            return f"cannot write {preload}: {exc.strerror}"
    if not Path(layout.shim_library).exists():
        return f"shim library {layout.shim_library} missing: GPU containers cannot start"
    return "ok"


@dataclass(frozen=True)
class MountSpec:
    container_path: str
    host_path: str
    read_only: bool


@dataclass(frozen=True)
class DeviceNodeSpec:
    container_path: str
    host_path: str
    permissions: str = "rw"


@dataclass(frozen=True)
class Delivery:
    envs: dict[str, str] = field(default_factory=dict)
    mounts: list[MountSpec] = field(default_factory=list)
    devices: list[DeviceNodeSpec] = field(default_factory=list)


def environment(grants: Sequence[GpuGrant], region_path: PurePosixPath) -> dict[str, str]:
    """The shim's variables; index ``i`` is the i-th visible GPU, in the order granted."""
    envs = {
        "NVIDIA_VISIBLE_DEVICES": ",".join(grant.uuid for grant in grants),
        "CUDA_DEVICE_MEMORY_SHARED_CACHE": str(region_path),
    }
    if grants:
        # The unsuffixed SM limit applies to any GPU without its own; grants of one
        # container normally share one cores value.
        envs["CUDA_DEVICE_SM_LIMIT"] = str(grants[0].cores)
    for i, grant in enumerate(grants):
        envs[f"CUDA_DEVICE_MEMORY_LIMIT_{i}"] = f"{grant.memory_mib}m"
        envs[f"CUDA_DEVICE_SM_LIMIT_{i}"] = str(grant.cores)
    return envs


def device_nodes(grants: Sequence[GpuGrant], minors: Mapping[str, int]) -> list[DeviceNodeSpec]:
    """``/dev/nvidia<minor>`` per granted GPU plus the driver's control nodes."""
    nodes = [f"/dev/nvidia{minors.get(grant.uuid, grant.index)}" for grant in grants]
    return [DeviceNodeSpec(path, path) for path in [*nodes, *CONTROL_DEVICES]]


def delivery(
    grants: Sequence[GpuGrant],
    pod_uid: str,
    container: str,
    layout: Layout,
    minors: Mapping[str, int],
    shim_env: Mapping[str, str] | None = None,
) -> Delivery:
    """Everything the container gets; ``shim_env`` adds node-wide shim settings
    (``VSLICE_CONTEXT_OVERHEAD``, ``VSLICE_LOG_LEVEL``)."""
    cache_dir = layout.container_cache_dir(pod_uid, container)
    mounts = [
        MountSpec(layout.shim_library, layout.shim_library, True),
        MountSpec("/etc/ld.so.preload", layout.preload_file, True),
        MountSpec(str(cache_dir), str(layout.host_cache_dir(pod_uid, container)), False),
    ]
    return Delivery(
        envs={**(shim_env or {}), **environment(grants, cache_dir / REGION_FILE)},
        mounts=mounts,
        devices=device_nodes(grants, minors),
    )
