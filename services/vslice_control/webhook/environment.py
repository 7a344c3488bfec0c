"""Environment variables a container may not set itself: the shim's and the NVIDIA runtime's.

The device plugin gives each GPU container its limits (``CUDA_DEVICE_MEMORY_LIMIT[_i]``,
``CUDA_DEVICE_SM_LIMIT[_i]``), its shared region (``CUDA_DEVICE_MEMORY_SHARED_CACHE``), the
shim's own settings (``VSLICE_*``) and its GPUs (``NVIDIA_VISIBLE_DEVICES``). A container
that sets one of them competes with what the device plugin hands the kubelet, so it is
refused, naming the container and the variable. A container that asks for no GPU may only
set ``NVIDIA_VISIBLE_DEVICES`` to ``none`` or ``void`` (the NVIDIA runtime's "no GPU"): any
other value would ask the runtime for GPUs that no scheduler accounted for.

What the webhook sees: ``env`` names (whatever their ``value`` or ``valueFrom``) and the
``prefix`` of ``envFrom`` entries. It does not see the keys of the ConfigMaps and Secrets
that ``envFrom`` reads (they are read when the container starts, and may change after
admission), nor variables baked into the image; for those the node side decides (the limits
file, and the NVIDIA runtime configured to ignore ``NVIDIA_VISIBLE_DEVICES`` from
unprivileged containers). An ``envFrom`` prefix that lies inside the reserved names
(``VSLICE_``, ``CUDA_DEVICE_``, ``NVIDIA_VISIBLE``) is refused, since only such a prefix
makes a forbidden name likely.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from vslice_control.webhook.podspec import Container

VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
NO_GPU_VALUES = ("none", "void")
RESERVED_PREFIXES = ("CUDA_DEVICE_MEMORY_LIMIT", "CUDA_DEVICE_SM_LIMIT", "VSLICE_")
RESERVED_NAMES = ("CUDA_DEVICE_MEMORY_SHARED_CACHE", VISIBLE_DEVICES)
_RESERVED_ENV_FROM_PREFIXES = ("VSLICE_", "CUDA_DEVICE_", "NVIDIA_VISIBLE")


def reserved(name: str) -> bool:
    return name in RESERVED_NAMES or name.startswith(RESERVED_PREFIXES)


def refusal(items: list[Container], gpu_containers: Collection[tuple[bool, str]]) -> str | None:
    """Why the pod's environment is refused, or None."""
    for container in items:
        gpu = container.key in gpu_containers
        why = _env(container, gpu) or _env_from(container, gpu)
        if why is not None:
            return why
    return None


def _env(container: Container, gpu: bool) -> str | None:
    env = container.spec.get("env")
    for position, entry in enumerate(env if isinstance(env, list) else []):
        name = entry.get("name") if isinstance(entry, Mapping) else None
        if not isinstance(name, str):
            continue
        where = f"{container.field}.env[{position}]"
        if gpu and reserved(name):
            return (
                f"{where}: container {container.name!r} asks for a GPU and sets {name}; "
                "vslice's device plugin sets this variable from the slice the scheduler "
                "granted: remove it (the shim's log level is an operator setting)"
            )
        if not gpu and name == VISIBLE_DEVICES and _value(entry) not in NO_GPU_VALUES:
            return (
                f"{where}: container {container.name!r} asks for no GPU but sets "
                f"{VISIBLE_DEVICES}={_shown(entry)}; only 'none' or 'void' is allowed: ask for "
                "GPUs with resources.limits instead"
            )
    return None


def _env_from(container: Container, gpu: bool) -> str | None:
    env_from = container.spec.get("envFrom")
    for position, entry in enumerate(env_from if isinstance(env_from, list) else []):
        prefix = entry.get("prefix") if isinstance(entry, Mapping) else None
        if not isinstance(prefix, str) or not prefix:
            continue
        risky = _RESERVED_ENV_FROM_PREFIXES if gpu else ("NVIDIA_VISIBLE",)
        if prefix.startswith(risky) or any(r.startswith(prefix) for r in risky if len(prefix) > 3):
            return (
                f"{container.field}.envFrom[{position}].prefix: container {container.name!r} "
                f"uses prefix {prefix!r}, which makes variables in the range vslice and the "
                f"NVIDIA runtime reserve ({', '.join(risky)}...): choose another prefix"
            )
    return None


def _value(entry: Mapping[str, Any]) -> str | None:
    """The literal value, or None when it comes from ``valueFrom`` (not visible here)."""
    if "valueFrom" in entry and entry.get("valueFrom") is not None:
        return None
    value = entry.get("value")
    return value if isinstance(value, str) else ""


def _shown(entry: Mapping[str, Any]) -> str:
    value = _value(entry)
    return "<valueFrom, not visible at admission>" if value is None else repr(value)
