"""The driver-enforced memory backend's part of a container: a CDI ``createRuntime`` hook.

On a node whose driver limits GPU memory per cgroup itself (NVML's
``nvmlDeviceSetMemoryLimits_v1``, driver R615+ on cgroup v2; docs/shim.md "Two memory
backends"), the runtime runs ``vslice-memory-limit set`` once it has created the container's
cgroup and before the container's program starts. The hook sets the container's hard limit on
each granted GPU to the slice's memory, reads it back, and writes the mark file
``<limits_root>/<owner>/<container>/memory-backend`` that the monitor and the container itself
read (``/run/vslice-limits/memory-backend``). A hook that fails stops the container's creation:
the runtime reports its one-line reason and the kubelet retries (fail closed; the shim's limit
alone would be the one an interposer gives).

Why ``createRuntime``: it runs in the runtime's namespaces (the host's ``/proc`` and
``/sys/fs/cgroup``) after the container's process was placed in its cgroup, which is what the
limit is set on; ``createContainer`` runs inside the container's namespaces. The leaf cgroup is
the container's own, so the limit is set on it and never on the pod's (a parent's limit does
not reach a leaf created after it).

Hooks travel only in CDI, and differ per container (the GPUs and their sizes), so:

- the DRA path adds the hook to the claim's own CDI device (``vslice.io/claim``); every
  container given the claim is held to the claim's memory on its own, and the shim keeps the
  claim's shared limit for all of them together;
- the device-plugin path writes one small spec per container (kind ``vslice.io/container``,
  :func:`vslice_node.handover.files.write_hook_spec`) holding only the hook, and names its
  device in the Allocate response beside the GPUs'. Those specs go when the container's
  limits directory goes (:func:`vslice_node.handover.files.remove_orphan_specs`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from vslice_core.model import GpuGrant

from vslice_node.handover import cdispec
from vslice_node.handover.edits import Edits, HookSpec

MARK_FILE = "memory-backend"
CONTAINER_KIND = "vslice.io/container"
CONTAINER_SPEC_PREFIX = "vslice.io-container_"
# As the node-wide spec: the runtime reads it, and it holds nothing secret.
SPEC_MODE = 0o644
MIB = 1 << 20
CONTAINER_ANNOTATION = "vslice.io/container-of"
"""Marks per-container spec files with their pod's UID (never the node-wide spec's owner
annotation: the node-wide spec file removes files carrying that one as stale)."""
# The hook loads NVML and makes one call per GPU; a hung driver must not hang container
# creation forever.
HOOK_TIMEOUT_S = 30


@dataclass(frozen=True)
class MemoryHook:
    """How this node's containers get their driver-enforced limit: the hook program, the NVML
    library it loads, its environment (the lab's fake driver reads its own variables; a real
    driver needs none), and the directory of the per-container specs (the CDI spec dir)."""

    program: str
    nvml_library: str
    spec_dir: Path
    env: Mapping[str, str] = field(default_factory=dict)


def marked_backend(text: str | None) -> str:
    """What a mark file says held the container: ``driver`` when the hook wrote
    ``backend=driver``; ``shim`` without a mark (a shim-only node, or a container started
    before the node changed backend)."""
    if text is None:
        return "shim"
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "backend":
            return "driver" if value.strip() == "driver" else "shim"
    return "shim"


def limit_arguments(grants: Sequence[GpuGrant]) -> list[str]:
    """``UUID=BYTES`` per granted GPU: the slice's memory, the hard limit the driver keeps."""
    return [f"{grant.uuid}={grant.memory_mib * MIB}" for grant in grants]


def hook_edits(hook: MemoryHook, grants: Sequence[GpuGrant], mark: Path) -> Edits:
    """The createRuntime hook that sets ``grants``' limits and writes ``mark``."""
    program = PurePosixPath(hook.program).name
    args = (
        program,
        "set",
        "--nvml",
        hook.nvml_library,
        "--mark",
        str(mark),
        *limit_arguments(grants),
    )
    env = tuple(f"{key}={value}" for key, value in sorted(hook.env.items()))
    spec = HookSpec("createRuntime", hook.program, args, env, HOOK_TIMEOUT_S)
    return Edits(hooks=[spec])


def container_device(owner_uid: str, container: str) -> str:
    """The CDI device name of one container's hook spec."""
    return cdispec.device_name(f"{owner_uid}-{container}")


def container_spec_path(spec_dir: Path, owner_uid: str, container: str) -> Path:
    # Pod UIDs hold no "_" and container names are DNS labels: the owner is the first field.
    return spec_dir / f"{CONTAINER_SPEC_PREFIX}{owner_uid}_{container}.json"


def container_spec(owner_uid: str, container: str, edits: Edits) -> dict[str, object]:
    return {
        "cdiVersion": cdispec.CDI_VERSION,
        "kind": CONTAINER_KIND,
        "annotations": {CONTAINER_ANNOTATION: owner_uid},
        "devices": [
            {
                "name": container_device(owner_uid, container),
                "containerEdits": cdispec.container_edits(edits, {}),
            }
        ],
    }
