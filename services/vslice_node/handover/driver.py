"""The GPU driver's part of a container: device nodes, and (where no NVIDIA container toolkit
injects them) its libraries, environment and extra mounts.

On a production node the toolkit brings the driver's libraries and vslice only adds the device
nodes; in the local lab the fake driver stands in, so its ``libcuda.so.1`` and
``libnvidia-ml.so.1``, the variables that configure it and its shared state file are handed over
here. Device nodes keep their usual container paths (``/dev/nvidia<minor>``, ``/dev/nvidiactl``,
...); on the host they are looked up under ``dev_dir``, which lets the lab use stand-in nodes it
made under its own state directory instead of writing ``/dev``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from vslice_node.handover.edits import DeviceNodeSpec, Edits, MountSpec

CONTROL_DEVICES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")
CONTAINER_DEV_DIR = PurePosixPath("/dev")


@dataclass(frozen=True)
class Driver:
    libraries: tuple[str, ...] = ()
    container_dir: str = "/usr/local/nvidia/lib64"
    env: Mapping[str, str] = field(default_factory=dict)
    mounts: tuple[MountSpec, ...] = ()
    dev_dir: str = "/dev"

    def device_node(self, name: str) -> DeviceNodeSpec:
        return DeviceNodeSpec(
            container_path=str(CONTAINER_DEV_DIR / name),
            host_path=str(PurePosixPath(self.dev_dir) / name),
        )

    def gpu_node(self, minor: int) -> DeviceNodeSpec:
        return self.device_node(f"nvidia{minor}")

    def library_mounts(self) -> list[MountSpec]:
        directory = PurePosixPath(self.container_dir)
        return [
            MountSpec(str(directory / PurePosixPath(lib).name), lib, read_only=True)
            for lib in self.libraries
        ]

    def edits(self) -> Edits:
        """What every GPU container gets from the driver, whichever GPUs it holds."""
        envs = dict(self.env)
        if self.libraries:
            # The shim and the CUDA runtime dlopen libcuda.so.1 by name: the mounted copies must be
            # on the loader's path.
            envs["LD_LIBRARY_PATH"] = self.container_dir
        return Edits(
            envs=envs,
            mounts=[*self.library_mounts(), *self.mounts],
            devices=[self.device_node(name) for name in CONTROL_DEVICES],
        )
