"""CDI (Container Device Interface) names and the JSON document of the node's CDI spec.

Written to be read by ``tags.cncf.io/container-device-interface``, the library containerd 2
uses: it unmarshals strictly (an unknown key fails the whole file), accepts the spec versions
it knows and checks that the file uses no feature newer than its ``cdiVersion``. vslice writes
version 0.6.0: device-node ``hostPath`` needs 0.5.0, spec annotations 0.6.0, and every
containerd 2.x release knows it.

Name rules of that library: a kind is ``vendor/class``, each part starting with a letter,
ending with a letter or digit, with letters, digits, ``_``, ``-`` and ``.`` between (its
check indexes past the end of a one-character part, so vslice asks for two or more); a device
name starts and ends with a letter or digit and may hold ``_``, ``-``, ``.`` and ``:``. A
fully qualified device name is ``kind=name``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vslice_node.handover.edits import DeviceNodeSpec, Edits, HookSpec, MountSpec

CDI_VERSION = "0.6.0"
DEFAULT_KIND = "vslice.io/gpu"
# Marks the files this plugin wrote, so stale ones can be told from other vendors' specs.
OWNER_ANNOTATION = "vslice.io/device-plugin"
TEMPLATE_FIELDS = ("uuid", "index")

_VENDOR_OR_CLASS = re.compile(r"[A-Za-z][A-Za-z0-9_.-]*[A-Za-z0-9]")
_DEVICE_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?")
_NOT_NAME_CHAR = re.compile(r"[^A-Za-z0-9_.:-]")
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")


@dataclass(frozen=True)
class DeviceNumbers:
    """Type (``c`` or ``b``) and numbers of a host device node."""

    type: str
    major: int
    minor: int


def kind_problem(kind: str) -> str | None:
    """Why ``kind`` is not a CDI kind, or None."""
    vendor, sep, cls = kind.partition("/")
    if not sep or "/" in cls:
        return "must be 'vendor/class' with one '/'"
    for part, value in (("vendor", vendor), ("class", cls)):
        if not _VENDOR_OR_CLASS.fullmatch(value):
            return (
                f"{part} {value!r} must start with a letter, end with a letter or digit, hold "
                "only letters, digits, '_', '-', '.' and be at least 2 characters"
            )
    return None


def is_device_name(name: str) -> bool:
    return _DEVICE_NAME.fullmatch(name) is not None


def device_name(uuid: str) -> str:
    """The CDI device name of a GPU: its UUID when that is a valid name (NVIDIA's always
    are), else the UUID with the offending characters replaced plus a short hash of the
    original, so two GPUs never share a name."""
    if is_device_name(uuid):
        return uuid
    digest = hashlib.sha256(uuid.encode()).hexdigest()[:8]
    cleaned = _NOT_NAME_CHAR.sub("_", uuid).strip("_.:-")
    return f"{cleaned}-{digest}" if cleaned else f"gpu-{digest}"


def qualified_name(kind: str, uuid: str) -> str:
    return f"{kind}={device_name(uuid)}"


def qualified_problem(name: str) -> str | None:
    """Why ``name`` is not a fully qualified CDI device name (``vendor/class=name``), or None."""
    kind, sep, device = name.partition("=")
    if not sep:
        return "must be 'vendor/class=name'"
    problem = kind_problem(kind)
    if problem is not None:
        return problem
    if not is_device_name(device):
        return (
            f"device name {device!r} must start and end with a letter or digit and hold only "
            "letters, digits, '_', '-', '.', ':'"
        )
    return None


def fill_template(template: str, *, uuid: str, index: int) -> str:
    """``"nvidia.com/gpu={uuid}"`` -> ``"nvidia.com/gpu=GPU-..."``; also ``{index}``."""
    return template.replace("{uuid}", uuid).replace("{index}", str(index))


def template_problem(template: str) -> str | None:
    """Why a per-GPU CDI name template is unusable, or None."""
    unknown = [f for f in _PLACEHOLDER.findall(template) if f not in TEMPLATE_FIELDS]
    if unknown:
        return f"unknown placeholder {{{unknown[0]}}} (known: {{uuid}}, {{index}})"
    sample = fill_template(template, uuid="GPU-00000000-0000-0000-0000-000000000000", index=0)
    return qualified_problem(sample)


def spec_file_name(kind: str) -> str:
    """``vendor-class.json``, the name the CDI library itself gives a vendor's spec."""
    vendor, _, cls = kind.partition("/")
    return f"{vendor}-{cls}.json"


def spec_document(
    kind: str,
    node: str,
    shared: Edits,
    devices: Mapping[str, Edits],
    numbers: Mapping[str, DeviceNumbers],
) -> dict[str, Any]:
    """The spec: ``devices`` maps GPU UUIDs to their own edits, ``shared`` goes to spec level
    (applied once to a container given any of the devices)."""
    return {
        "cdiVersion": CDI_VERSION,
        "kind": kind,
        "annotations": {OWNER_ANNOTATION: node},
        "devices": [
            {"name": device_name(uuid), "containerEdits": container_edits(edits, numbers)}
            for uuid, edits in devices.items()
        ],
        "containerEdits": container_edits(shared, numbers),
    }


def container_edits(edits: Edits, numbers: Mapping[str, DeviceNumbers]) -> dict[str, Any]:
    """CDI ``containerEdits``; empty lists are left out, as the library writes them."""
    rendered: dict[str, Any] = {}
    if edits.envs:
        rendered["env"] = [f"{key}={value}" for key, value in edits.envs.items()]
    if edits.devices:
        rendered["deviceNodes"] = [device_node(d, numbers.get(d.host_path)) for d in edits.devices]
    if edits.mounts:
        rendered["mounts"] = [mount(m) for m in edits.mounts]
    if edits.hooks:
        rendered["hooks"] = [hook(h) for h in edits.hooks]
    return rendered


def hook(spec: HookSpec) -> dict[str, Any]:
    rendered: dict[str, Any] = {"hookName": spec.hook_name, "path": spec.path}
    rendered["args"] = list(spec.args)
    if spec.env:
        rendered["env"] = list(spec.env)
    if spec.timeout_s is not None:
        rendered["timeout"] = spec.timeout_s
    return rendered


def device_node(spec: DeviceNodeSpec, found: DeviceNumbers | None) -> dict[str, Any]:
    node: dict[str, Any] = {"path": spec.container_path, "hostPath": spec.host_path}
    if found is not None:
        # Without them the runtime stats hostPath itself when it starts a container.
        node.update(type=found.type, major=found.major, minor=found.minor)
    node["permissions"] = spec.permissions
    return node


def mount(spec: MountSpec) -> dict[str, Any]:
    access = "ro" if spec.read_only else "rw"
    return {
        "hostPath": spec.host_path,
        "containerPath": spec.container_path,
        "options": [access, "nosuid", "nodev", "bind"],
        "type": "bind",
    }
