"""The host files one container is handed, written the same way on both node paths.

The device plugin's Allocate and the DRA driver's NodePrepareResources both end here, so a
slice looks the same to a container whichever path started it (docs/security.md, "The limits
file"):

- the region directory ``<cache_root>/<pod uid>/<name>``, mode 0777: the container's processes
  may run as any user and the shim creates its region file there;
- the limits file ``<limits_root>/<pod uid>/<name>/limits``, mode 0444 in a 0755 directory,
  mounted read-only at ``/run/vslice-limits``. Written beside and renamed over, after an
  fsync, so the shim never reads half a file and a node that crashes right after the answer
  does not come back with an empty one.

``name`` is the container's name on the device-plugin path and the claim request's name on
the DRA path.

Where the driver enforces memory limits (:mod:`.memoryhook`), the device-plugin path also
writes the container's hook spec (:func:`write_hook_spec`); the DRA path puts the same hook in
the claim's own spec.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from vslice_core.model import GpuGrant

from vslice_node.handover.container import (
    LIMITS_FILE,
    REGION_FILE,
    Handover,
    container_edits,
    limits_text,
)
from vslice_node.handover.edits import Edits
from vslice_node.handover.memoryhook import (
    CONTAINER_SPEC_PREFIX,
    SPEC_MODE,
    container_spec,
    container_spec_path,
)

log = logging.getLogger("vslice.handover.files")

LIMITS_MODE = 0o444
LIMITS_DIR_MODE = 0o755
REGION_DIR_MODE = 0o777
TEMP_PREFIX = ".vslice-"
TEMP_SUFFIX = ".tmp"


def replace_text(path: Path, text: str, mode: int) -> None:
    """Make ``path`` hold ``text`` with ``mode`` at once: a reader sees the old file or the
    new one, never a part, and the new one is on disk before it is in place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(
        dir=path.parent, prefix=f"{TEMP_PREFIX}{path.name}.", suffix=TEMP_SUFFIX
    )
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temp, mode)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def write_container_files(
    handover: Handover, grants: Sequence[GpuGrant], pod_uid: str, name: str
) -> Path:
    """Create the container's region directory and write its limits file; returns the limits
    file's path. The region directory comes first: a failure there leaves no limits behind."""
    layout = handover.layout
    cache = layout.host_cache_dir(pod_uid, name)
    cache.mkdir(parents=True, exist_ok=True)
    os.chmod(cache, REGION_DIR_MODE)
    directory = layout.host_limits_dir(pod_uid, name)
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, LIMITS_DIR_MODE)
    region = layout.container_cache_dir(pod_uid, name) / REGION_FILE
    path = directory / LIMITS_FILE
    replace_text(path, limits_text(grants, region, handover.shim_env, pod_uid, name), LIMITS_MODE)
    return path


def write_hook_spec(
    handover: Handover, grants: Sequence[GpuGrant], pod_uid: str, name: str
) -> Path | None:
    """On the device-plugin path with the driver-enforced backend: write the container's hook
    spec (the device its Allocate response names); its path, or None on a shim-only node."""
    hook = handover.memory_hook
    if hook is None:
        return None
    edits = container_edits(handover, grants, pod_uid, name)
    document = container_spec(pod_uid, name, Edits(hooks=edits.hooks))
    path = container_spec_path(hook.spec_dir, pod_uid, name)
    replace_text(path, json.dumps(document, indent=2) + "\n", SPEC_MODE)
    return path


def remove_orphan_specs(spec_dir: Path, limits_root: Path) -> list[Path]:
    """Remove the per-container specs whose pod's limits directory is gone (swept with its
    pod, docs/device-plugin.md); the ones removed. The limits directory is the record of which
    containers this node still serves, so a spec left by a crash between the two removals goes
    at the next pass."""
    removed = []
    try:
        names = sorted(os.listdir(spec_dir))
    except FileNotFoundError:
        return []
    for name in names:
        if not (name.startswith(CONTAINER_SPEC_PREFIX) and name.endswith(".json")):
            continue
        owner = name[len(CONTAINER_SPEC_PREFIX) :].split("_", 1)[0]
        if not owner or (limits_root / owner).is_dir():
            continue
        try:
            (spec_dir / name).unlink()
        except FileNotFoundError:
            continue
        except OSError as exc:
            log.warning("cannot remove a container's hook spec", extra={"error": str(exc)})
            continue
        removed.append(spec_dir / name)
    return removed


__all__ = [
    "LIMITS_MODE",
    "remove_orphan_specs",
    "replace_text",
    "write_container_files",
    "write_hook_spec",
]
