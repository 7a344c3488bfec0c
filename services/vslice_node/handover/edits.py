"""Container edits: the environment, mounts and device nodes a runtime adds to a container.

The device plugin computes them once and hands them over in one of two ways (the ``injection``
setting, docs/device-plugin.md): inside the kubelet's Allocate response (its ``envs``,
``mounts`` and ``devices``), or written into a CDI spec file that the runtime applies when the
response names one of its devices (:mod:`vslice_node.handover.cdispec`). Both
renderings start from these values, so the two modes cannot drift apart.

Hooks (programs the runtime runs while it creates the container) exist only in CDI: the
Allocate response has no field for them, so a container whose edits hold one is always given a
CDI device that carries it (:mod:`vslice_node.handover.memoryhook`).
"""

from __future__ import annotations

from dataclasses import dataclass, field


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
class HookSpec:
    """An OCI hook: ``args`` starts with the program's name (argv[0]), as OCI and CDI write
    it; ``env`` is its whole environment."""

    hook_name: str
    path: str
    args: tuple[str, ...]
    env: tuple[str, ...] = ()
    timeout_s: int | None = None


@dataclass(frozen=True)
class Edits:
    envs: dict[str, str] = field(default_factory=dict)
    mounts: list[MountSpec] = field(default_factory=list)
    devices: list[DeviceNodeSpec] = field(default_factory=list)
    hooks: list[HookSpec] = field(default_factory=list)

    def __add__(self, other: Edits) -> Edits:
        """Both edits; on a variable set by both, ``other`` wins."""
        return Edits(
            envs={**self.envs, **other.envs},
            mounts=[*self.mounts, *other.mounts],
            devices=[*self.devices, *other.devices],
            hooks=[*self.hooks, *other.hooks],
        )

    def host_paths(self) -> list[str]:
        """Every host file these edits need, in order, once each."""
        paths = [m.host_path for m in self.mounts] + [d.host_path for d in self.devices]
        return list(dict.fromkeys(paths))
