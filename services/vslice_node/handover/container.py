"""What a container is handed at start, and how: in the Allocate response or through CDI.

Pure functions of the container's grants, the node's file layout and the driver, so the exact
answer the kubelet receives and the exact CDI spec are unit-tested without gRPC. The edits fall
in two groups, computed once each:

- node-wide (:func:`shared_edits`): the shim library and ``/etc/ld.so.preload``, the driver's
  control device nodes, libraries, environment and mounts; plus one device node per GPU
  (:func:`gpu_edits`). Identical for every container, so with ``injection: cdi`` they live in
  the node's CDI spec file (:func:`cdi_spec`) and the response only names CDI devices;
- per container (:func:`container_edits`): the limits the shim enforces and the container's
  own region directory. They differ for every container started on the same GPU, which a
  static spec cannot express, so they always travel in the response. On a node with the
  driver-enforced memory backend they also hold the hook that sets the container's limit in
  the driver; the response cannot carry a hook, so it names the container's own CDI device
  instead (:mod:`vslice_node.handover.memoryhook`).

With ``injection: mounts`` (runtimes without CDI) all of it goes into the response.

Layout (documented in docs/device-plugin.md):

- the shim library is mounted read-only at the same path it has on the host;
- ``/etc/ld.so.preload`` comes read-only from a host file naming the shim, so every process
  of the container loads it, whatever its entry point;
- each container gets its own host directory ``<cache_root>/<pod uid>/<container>``, mounted
  read-write at ``<container_cache_root>/<pod uid>/<container>``; the shim creates its region
  file ``vslice.cache`` there (``CUDA_DEVICE_MEMORY_SHARED_CACHE``), and the monitor finds
  it on the host under the same relative path. The region holds usage only;
- each container's limits are written (by the allocator, before Allocate answers) into
  ``<limits_root>/<pod uid>/<container>/limits`` (:func:`limits_text`), a separate host
  directory mounted read-only at :data:`CONTAINER_LIMITS_DIR`, where the shim looks first
  (``/run/vslice-limits/limits``, shim/src/shim.h ``VS_LIMITS_PATH``). The limits also stay in
  the environment (HAMi-compatible names, for tools that read them), but with the file in
  force the shim lets the environment only lower a limit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from vslice_core.model import GpuGrant

from vslice_node.handover import cdispec
from vslice_node.handover.driver import Driver
from vslice_node.handover.edits import Edits, MountSpec
from vslice_node.handover.memoryhook import (
    CONTAINER_KIND,
    MARK_FILE,
    MemoryHook,
    container_device,
    hook_edits,
)

REGION_FILE = "vslice.cache"
PRELOAD_PATH = "/etc/ld.so.preload"
LIMITS_FILE = "limits"
# Fixed: the shim looks here before any variable (shim/src/shim.h VS_LIMITS_PATH).
CONTAINER_LIMITS_DIR = "/run/vslice-limits"
LIMITS_VERSION = "1"

Injection = Literal["cdi", "mounts"]


@dataclass(frozen=True)
class Layout:
    """Where the shim and the shared regions live, on the host and inside containers."""

    cache_root: Path
    container_cache_root: str = "/run/vslice"
    shim_library: str = "/usr/local/vslice/lib/libvslice.so"
    preload_file: str = "/usr/local/vslice/ld.so.preload"
    limits_root: Path = Path("/var/lib/vslice/limits")

    def host_cache_dir(self, pod_uid: str, container: str) -> Path:
        return self.cache_root / pod_uid / container

    def host_limits_dir(self, pod_uid: str, container: str) -> Path:
        return self.limits_root / pod_uid / container

    def container_cache_dir(self, pod_uid: str, container: str) -> PurePosixPath:
        return PurePosixPath(self.container_cache_root) / pod_uid / container


@dataclass(frozen=True)
class Handover:
    """How this node hands GPUs to containers: file layout, driver, shim settings and mode.

    ``shim_env`` holds node-wide shim settings (``VSLICE_CONTEXT_OVERHEAD``,
    ``VSLICE_LOG_LEVEL``); ``driver_cdi_devices`` are templates of further CDI device names
    given per granted GPU (``{uuid}``, ``{index}`` filled in), for a driver that has a CDI
    spec of its own. ``memory_hook`` is set where the driver enforces memory limits itself
    (the node's memory backend is ``driver``); None: the shim alone enforces them.
    """

    layout: Layout
    driver: Driver = field(default_factory=Driver)
    shim_env: Mapping[str, str] = field(default_factory=dict)
    injection: Injection = "cdi"
    cdi_kind: str = cdispec.DEFAULT_KIND
    driver_cdi_devices: tuple[str, ...] = ()
    memory_hook: MemoryHook | None = None


@dataclass(frozen=True)
class ContainerHandover(Edits):
    """The container's answer: edits for the response, and the CDI devices it names."""

    cdi_devices: list[str] = field(default_factory=list)


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


def shadowing_mounts(pod: Mapping[str, Any], protected: Sequence[str]) -> list[str]:
    """The pod's volume mounts that would cover a path vslice mounts into its containers
    (``protected``), as ``container: path``. The runtime mounts a pod's volumes after the
    device plugin's mounts, so a volume at such a path (or below it) would replace vslice's
    read-only file with one of the pod's own (a ConfigMap is read-only too)."""
    spec = pod.get("spec") or {}
    found = []
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        for mount in container.get("volumeMounts") or []:
            path = PurePosixPath(str(mount.get("mountPath", "/")))
            for guarded in protected:
                if path == PurePosixPath(guarded) or PurePosixPath(guarded) in path.parents:
                    found.append(f"{container.get('name')}: {path}")
    return found


def limits_text(
    grants: Sequence[GpuGrant],
    region_path: PurePosixPath,
    shim_env: Mapping[str, str],
    pod_uid: str,
    container: str,
) -> str:
    """The container's limits file (docs/device-plugin.md "The limits file"): what the shim
    enforces, in the environment's names; index ``i`` is the i-th GPU granted."""
    lines = [
        f"# vslice limits of pod {pod_uid} container {container}: written by the device plugin, "
        "read-only in the container",
        f"VSLICE_LIMITS_VERSION={LIMITS_VERSION}",
        f"CUDA_DEVICE_MEMORY_SHARED_CACHE={region_path}",
    ]
    for i, grant in enumerate(grants):
        lines.append(f"CUDA_DEVICE_MEMORY_LIMIT_{i}={grant.memory_mib}m")
        lines.append(f"CUDA_DEVICE_SM_LIMIT_{i}={grant.cores}")
    if "VSLICE_CONTEXT_OVERHEAD" in shim_env:
        lines.append(f"VSLICE_CONTEXT_OVERHEAD={shim_env['VSLICE_CONTEXT_OVERHEAD']}")
    return "\n".join(lines) + "\n"


def shared_edits(handover: Handover) -> Edits:
    """What every GPU container on this node gets, whichever GPUs and limits it has."""
    layout = handover.layout
    shim = Edits(
        mounts=[
            MountSpec(layout.shim_library, layout.shim_library, read_only=True),
            MountSpec(PRELOAD_PATH, layout.preload_file, read_only=True),
        ]
    )
    return shim + handover.driver.edits()


def gpu_edits(handover: Handover, minor: int) -> Edits:
    """What one GPU adds: its ``/dev/nvidia<minor>`` node."""
    return Edits(devices=[handover.driver.gpu_node(minor)])


def container_edits(
    handover: Handover, grants: Sequence[GpuGrant], pod_uid: str, container: str
) -> Edits:
    """What only this container gets: its own region directory (writable) and its limits
    (read-only, from the file the allocator writes)."""
    layout = handover.layout
    cache_dir = layout.container_cache_dir(pod_uid, container)
    region = MountSpec(
        str(cache_dir), str(layout.host_cache_dir(pod_uid, container)), read_only=False
    )
    limits = MountSpec(
        CONTAINER_LIMITS_DIR, str(layout.host_limits_dir(pod_uid, container)), read_only=True
    )
    envs = {
        **handover.shim_env,
        **environment(grants, cache_dir / REGION_FILE),
        # With the fixed path mounted this only repeats it; should the mount ever be missing,
        # the shim fails closed on this name instead of trusting the environment.
        "VSLICE_LIMITS_FILE": f"{CONTAINER_LIMITS_DIR}/{LIMITS_FILE}",
    }
    own = Edits(envs=envs, mounts=[region, limits])
    if handover.memory_hook is None:
        return own
    mark = layout.host_limits_dir(pod_uid, container) / MARK_FILE
    return own + hook_edits(handover.memory_hook, grants, mark)


def container_handover(
    handover: Handover,
    grants: Sequence[GpuGrant],
    pod_uid: str,
    container: str,
    minors: Mapping[str, int],
) -> ContainerHandover:
    """The answer for one container, in the handover's mode."""
    own = container_edits(handover, grants, pod_uid, container)
    extra = driver_cdi_devices(handover, grants)
    if own.hooks:
        # Written by the allocator beside the limits file (memoryhook.write_container_spec).
        extra.append(f"{CONTAINER_KIND}={container_device(pod_uid, container)}")
    if handover.injection == "cdi":
        names = [cdispec.qualified_name(handover.cdi_kind, grant.uuid) for grant in grants]
        return ContainerHandover(own.envs, own.mounts, own.devices, cdi_devices=[*names, *extra])
    gpus = Edits()
    for grant in grants:
        gpus = gpus + gpu_edits(handover, minors.get(grant.uuid, grant.index))
    # GPU nodes first, then what every container gets; the container's own edits win last.
    edits = gpus + shared_edits(handover) + own
    return ContainerHandover(edits.envs, edits.mounts, edits.devices, cdi_devices=extra)


def driver_cdi_devices(handover: Handover, grants: Sequence[GpuGrant]) -> list[str]:
    names = [
        cdispec.fill_template(template, uuid=grant.uuid, index=grant.index)
        for grant in grants
        for template in handover.driver_cdi_devices
    ]
    return list(dict.fromkeys(names))


def cdi_spec(
    handover: Handover,
    node: str,
    minors: Mapping[str, int],
    numbers: Mapping[str, cdispec.DeviceNumbers],
) -> dict[str, Any]:
    """The node's CDI spec: one device per GPU, the shared edits at spec level.

    ``minors`` maps every GPU of the node to its device minor; ``numbers`` holds the device
    type and numbers of the host nodes that exist (the runtime reads missing ones itself).
    """
    devices = {
        uuid: gpu_edits(handover, minor)
        for uuid, minor in sorted(minors.items(), key=lambda item: (item[1], item[0]))
    }
    return cdispec.spec_document(handover.cdi_kind, node, shared_edits(handover), devices, numbers)
