"""The node agent's settings groups, one per concern, each handed to the part that works from
it (docs/configuration.md):

- ``handover``       what every GPU container gets from vslice: shim, region and limits files
- ``driver``         the GPU driver's files, for nodes where vslice brings them
- ``cdi``            the node-wide CDI spec file
- ``device_plugin``  the kubelet device-plugin front door
- ``dra_driver``     the DRA front door (``gpu.vslice.io``)
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from vslice_node.handover import cdispec

# sockaddr_un.sun_path holds 108 bytes including the terminating NUL.
MAX_SOCKET_PATH = 107

# Variables Allocate sets per container. In CDI mode the spec's variables are applied after
# the response's, so a driver env entry of one of these names would override a limit.
PER_CONTAINER_ENV = ("NVIDIA_VISIBLE_DEVICES", "CUDA_DEVICE_MEMORY_SHARED_CACHE")
PER_CONTAINER_ENV_PREFIXES = ("CUDA_DEVICE_MEMORY_LIMIT", "CUDA_DEVICE_SM_LIMIT", "VSLICE_")


def _env_text(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value) if isinstance(value, int | float) else value


def _absolute(name: str, value: str) -> str:
    if not value.startswith("/"):
        raise ValueError(f"{name} must be an absolute path, got {value!r}")
    return value


class _Group(BaseModel):
    """One group of settings; ``GROUP`` is its key in the settings file."""

    model_config = ConfigDict(extra="forbid", validate_default=True)

    GROUP: ClassVar[str]

    @classmethod
    def _name(cls, info: ValidationInfo) -> str:
        """The setting's full name, as a message shows it (``cdi.spec_dir``)."""
        return f"{cls.GROUP}.{info.field_name}"


class DriverMount(BaseModel):
    """One extra host file or directory every GPU container gets (``driver.mounts``)."""

    model_config = ConfigDict(extra="forbid")

    host_path: str
    container_path: str
    read_only: bool = True


class HandoverSettings(_Group):
    """What every GPU container gets from vslice: the shim, its region directory and its
    limits file, and how the node-wide part reaches the container."""

    GROUP = "handover"

    cache_root: str = Field(
        default="/var/lib/vslice/containers",
        description="Host directory of the containers' shim regions: "
        "<cache_root>/<pod uid>/<container>/vslice.cache.",
    )
    container_cache_root: str = Field(
        default="/run/vslice", description="Where those directories appear inside containers."
    )
    limits_root: str = Field(
        default="/var/lib/vslice/limits",
        description="Host directory of the containers' limits files: "
        "<limits_root>/<pod uid>/<container>/limits, mounted read-only at /run/vslice-limits "
        "in the container; keep it apart from cache_root (the region directory is writable).",
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
    injection: Literal["cdi", "mounts"] = Field(
        default="cdi",
        description="How the node-wide edits reach containers: cdi (a CDI spec file in "
        "cdi.spec_dir, Allocate names CDI devices) or mounts (everything in the Allocate "
        "response, for runtimes without CDI).",
    )
    region_sweep_seconds: float = Field(
        default=10.0,
        gt=0,
        description="How often the region directories of pods that are gone are looked for.",
    )
    region_grace_seconds: float = Field(
        default=30.0,
        ge=0,
        description="A region directory is removed once its pod is gone and the directory is "
        "at least this old (covers a pod list taken just before an Allocate).",
    )
    memory_backend: Literal["auto", "shim", "driver"] = Field(
        default="auto",
        description="What holds a container's GPU memory at its slice: driver (the driver's "
        "own per-cgroup limit, set by memory_limit_hook through NVML, with the shim still "
        "preloaded for compute and the views), shim (the shim alone), or auto (driver where "
        "the node runs cgroup v2 and the driver answers nvmlDeviceGetMemoryLimits_v1, shim "
        "elsewhere). driver on a node that cannot do it stops the agent at start, naming why.",
    )
    memory_limit_hook: str = Field(
        default="/usr/local/vslice/bin/vslice-memory-limit",
        description="Host path of vslice-memory-limit (built by make -C shim), run by the "
        "runtime as a CDI createRuntime hook to set each container's limit, and by the agent "
        "at start to probe the driver.",
    )

    @field_validator("limits_root", "memory_limit_hook")
    @classmethod
    def _absolute_dir(cls, value: str, info: ValidationInfo) -> str:
        return _absolute(cls._name(info), value)

    @model_validator(mode="after")
    def _limits_apart_from_regions(self) -> HandoverSettings:
        limits, cache = Path(self.limits_root), Path(self.cache_root)
        if limits == cache or cache in limits.parents or limits in cache.parents:
            raise ValueError(
                f"handover.limits_root {self.limits_root!r} must lie apart from "
                f"handover.cache_root {self.cache_root!r}: containers can write their region "
                "directories"
            )
        return self

    @property
    def shim_env(self) -> dict[str, str]:
        """The shim's node-wide variables every GPU container gets (only those set)."""
        env = {
            "VSLICE_CONTEXT_OVERHEAD": self.context_overhead,
            "VSLICE_LOG_LEVEL": self.shim_log_level,
        }
        return {key: value for key, value in env.items() if value}


class DriverSettings(_Group):
    """The GPU driver's files in every GPU container, for nodes where vslice brings them (the
    lab's fake driver); empty on real nodes, where the NVIDIA container toolkit does."""

    GROUP = "driver"

    libraries: list[str] = Field(
        default_factory=list,
        description="Host paths of driver libraries mounted read-only into every GPU "
        "container at <driver.container_dir>/<file name> (empty: the NVIDIA container "
        "toolkit brings the driver).",
    )
    container_dir: str = Field(
        default="/usr/local/nvidia/lib64",
        description="Container directory of driver.libraries; set as LD_LIBRARY_PATH when "
        "any are given.",
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Extra environment of every GPU container (e.g. the fake driver's "
        "FAKE_NVIDIA_GPUS).",
    )
    mounts: list[DriverMount] = Field(
        default_factory=list,
        description="Extra mounts of every GPU container: {host_path, container_path, "
        "read_only (default true)}.",
    )
    host_dev_dir: str = Field(
        default="/dev",
        description="Host directory holding nvidia<minor>, nvidiactl, nvidia-uvm and "
        "nvidia-uvm-tools; they appear under /dev in containers.",
    )
    cdi_devices: list[str] = Field(
        default_factory=list,
        description='CDI device names added per granted GPU, "{uuid}" and "{index}" filled '
        'in (e.g. "nvidia.com/gpu={uuid}" where nvidia-ctk wrote a spec).',
    )
    nvml_library: str = Field(
        default="libnvidia-ml.so.1",
        description="The NVML library the node loads itself to set driver-enforced memory "
        "limits (handover.memory_backend): a host path, or a name the host's loader finds.",
    )
    host_env: dict[str, str] = Field(
        default_factory=dict,
        description="Environment of the node's own calls into the driver (the memory-limit "
        "hook and its probe; e.g. the fake driver's FAKE_NVIDIA_GPUS and the host path of its "
        "FAKE_CUDA_STATE). Empty on real nodes.",
    )

    @field_validator("container_dir", "host_dev_dir")
    @classmethod
    def _absolute_dir(cls, value: str, info: ValidationInfo) -> str:
        return _absolute(cls._name(info), value)

    @field_validator("libraries")
    @classmethod
    def _libraries(cls, value: list[str]) -> list[str]:
        seen: dict[str, str] = {}
        for i, path in enumerate(value):
            _absolute(f"driver.libraries[{i}]", path)
            name = PurePosixPath(path).name
            if name in seen:
                raise ValueError(
                    f"driver.libraries: {seen[name]!r} and {path!r} would both be mounted as "
                    f"{name!r}"
                )
            seen[name] = path
        return value

    @field_validator("env", "host_env", mode="before")
    @classmethod
    def _scalar_values(cls, value: Any) -> Any:
        # YAML reads FAKE_NVIDIA_GPUS: 2 as a number; the environment only holds strings.
        if isinstance(value, dict):
            return {key: _env_text(item) for key, item in value.items()}
        return value

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for key, item in value.items():
            if not key or "=" in key or "\0" in key or "\0" in item:
                raise ValueError(f"driver.env: {key!r} is not a usable variable name or value")
            if key in PER_CONTAINER_ENV or key.startswith(PER_CONTAINER_ENV_PREFIXES):
                raise ValueError(
                    f"driver.env must not set {key!r}: Allocate sets it for each container"
                )
        return value

    @field_validator("mounts")
    @classmethod
    def _mount_paths(cls, value: list[DriverMount]) -> list[DriverMount]:
        for i, item in enumerate(value):
            _absolute(f"driver.mounts[{i}].host_path", item.host_path)
            _absolute(f"driver.mounts[{i}].container_path", item.container_path)
        return value

    @field_validator("cdi_devices")
    @classmethod
    def _cdi_templates(cls, value: list[str]) -> list[str]:
        for i, template in enumerate(value):
            problem = cdispec.template_problem(template)
            if problem is not None:
                raise ValueError(f"driver.cdi_devices[{i}] {problem}, got {template!r}")
        return value

    @model_validator(mode="after")
    def _library_path_is_ours(self) -> DriverSettings:
        if self.libraries and "LD_LIBRARY_PATH" in self.env:
            raise ValueError(
                "driver.env must not set 'LD_LIBRARY_PATH' when driver.libraries are given: "
                f"it is set to driver.container_dir ({self.container_dir!r})"
            )
        return self


class CdiSettings(_Group):
    """The node-wide CDI spec file, which both front doors name GPUs by."""

    GROUP = "cdi"

    spec_dir: str = Field(
        default="/var/run/cdi",
        description="Directory the runtime reads CDI specs from; the agent writes "
        "<vendor>-<class>.json there (handover.injection cdi).",
    )
    kind: str = Field(
        default=cdispec.DEFAULT_KIND,
        description='CDI kind ("vendor/class") of the spec; devices are <kind>=<gpu uuid>.',
    )

    @field_validator("spec_dir")
    @classmethod
    def _absolute_dir(cls, value: str, info: ValidationInfo) -> str:
        return _absolute(cls._name(info), value)

    @field_validator("kind")
    @classmethod
    def _cdi_kind(cls, value: str) -> str:
        problem = cdispec.kind_problem(value)
        if problem is not None:
            raise ValueError(f"cdi.kind {problem}, got {value!r}")
        return value


class DevicePluginPathSettings(_Group):
    """The kubelet device-plugin front door: its socket, the resource it advertises, and how
    Allocate checks and records what the extender decided."""

    GROUP = "device_plugin"

    dir: str = Field(
        default="/var/lib/kubelet/device-plugins",
        description="The kubelet's device-plugin directory (kubelet.sock lives there).",
    )
    socket_name: str = Field(
        default="vslice.sock", description="File name of the plugin's socket in that directory."
    )
    resource_name: str = Field(
        default="nvidia.com/gpu", description="Extended resource the plugin advertises."
    )
    pod_resources_socket: str = Field(
        default="/var/lib/kubelet/pod-resources/kubelet.sock",
        description="The kubelet's PodResources API socket, asked on every Allocate which pods "
        "it has admitted and which containers already hold devices (matching then follows the "
        "kubelet's own record); empty or absent: match from the cluster's record alone.",
    )
    allocation_key_file: str = Field(
        default="",
        description="Key file of the allocation proofs (vslice.io/allocation-proof, the same "
        "file as the extender's): an allocation without a valid proof is refused. Set but "
        "missing or unreadable: every Allocate is refused. Empty: proofs are not checked.",
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
            raise ValueError(f"device_plugin.resource_name must be 'domain/name', got {value!r}")
        if domain == "kubernetes.io" or domain.endswith(".kubernetes.io"):
            raise ValueError(
                f"device_plugin.resource_name must not be in kubernetes.io, got {value!r}"
            )
        return value

    @field_validator("socket_name")
    @classmethod
    def _plain_file_name(cls, value: str) -> str:
        if not value or "/" in value or value == "kubelet.sock":
            raise ValueError(
                "device_plugin.socket_name must be a file name other than kubelet.sock, "
                f"got {value!r}"
            )
        return value

    @model_validator(mode="after")
    def _socket_path_fits(self) -> DevicePluginPathSettings:
        socket_path = Path(self.dir) / self.socket_name
        if len(str(socket_path)) > MAX_SOCKET_PATH:
            raise ValueError(
                f"device_plugin.dir/socket_name must be at most {MAX_SOCKET_PATH} characters "
                f"(a unix socket path), got {str(socket_path)!r}"
            )
        return self


class DraDriverSettings(_Group):
    """The DRA front door: vslice's DRA driver ``gpu.vslice.io`` on this node."""

    GROUP = "dra_driver"

    enabled: bool = Field(
        default=False,
        description="Also serve vslice's DRA driver (gpu.vslice.io) on this node: publish its "
        "ResourceSlice and prepare ResourceClaims for the kubelet (Kubernetes 1.36 or newer; "
        "needs handover.injection cdi). The device-plugin path keeps working beside it.",
    )
    gpus: list[int] | None = Field(
        default=None,
        description="With enabled: the indices of the GPUs served on the DRA path; the others "
        "stay on the device-plugin path. A GPU serves one path only (neither allocator sees "
        "the other's slices). Empty (null): every GPU.",
    )
    kubelet_plugins_registry: str = Field(
        default="/var/lib/kubelet/plugins_registry",
        description="The kubelet's plugin registration directory (the DRA driver's "
        "registration socket goes there).",
    )
    kubelet_plugins_dir: str = Field(
        default="/var/lib/kubelet/plugins",
        description="Parent of the DRA driver's own directory: its gRPC socket and its "
        "checkpoint of prepared claims live in <kubelet_plugins_dir>/gpu.vslice.io/.",
    )
    socket: str = Field(
        default="",
        description="The DRA driver's gRPC socket (named to the kubelet at registration); "
        "empty: <kubelet_plugins_dir>/gpu.vslice.io/dra.sock.",
    )
    publish_seconds: float = Field(
        default=30.0,
        gt=0,
        description="How often the node's ResourceSlice is checked against the API server "
        "even when the GPUs did not change (someone may have deleted or edited it).",
    )

    @field_validator("kubelet_plugins_registry", "kubelet_plugins_dir")
    @classmethod
    def _absolute_dir(cls, value: str, info: ValidationInfo) -> str:
        return _absolute(cls._name(info), value)


GROUPS: dict[str, type[_Group]] = {
    group.GROUP: group
    for group in (
        HandoverSettings,
        DriverSettings,
        CdiSettings,
        DevicePluginPathSettings,
        DraDriverSettings,
    )
}
