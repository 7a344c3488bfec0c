"""``vslice bundle verify``: is this copy of a bundle whole and unchanged, for these hosts?

The check itself is ``verify_bundle`` (a link to the vslice_bundle role's
``files/verify_bundle.py``): the role runs that file on the controller before any host
changes, so the command and the role accept and refuse the same bundles, with the same words.
"""

from __future__ import annotations

import json
import platform
from collections.abc import Mapping
from pathlib import Path

from vslice_build.bundle import verify_bundle
from vslice_build.bundle.manifest import MANIFEST_FILE, BundleError, Manifest, parse

# How the message names the machine the command runs on when no --arch is given.
THIS_MACHINE = "this machine"


def default_hosts() -> dict[str, str]:
    """The hosts to check the architecture for when none are named: the machine we run on."""
    return {THIS_MACHINE: platform.machine()}


def verify(root: Path, hosts: Mapping[str, str] | None = None, *, hashes: bool = True) -> Manifest:
    """The bundle's manifest once it passes the check for ``hosts`` (each as the message calls
    it, to its architecture; default: this machine); BundleError names every problem."""
    found = verify_bundle.check(
        str(root), dict(default_hosts() if hosts is None else hosts), hashes=hashes
    )
    if found:
        raise BundleError(verify_bundle.report(str(root), found))
    try:
        return parse(json.loads((root / MANIFEST_FILE).read_bytes()))
    except ValueError as error:
        if isinstance(error, BundleError):
            raise
        raise BundleError(f"{root / MANIFEST_FILE} is not JSON: {error}") from None


def summary(root: Path, manifest: Manifest) -> str:
    size = sum(entry.size for entry in manifest.files.values())
    target = manifest.target
    return (
        f"bundle {root}: vslice {manifest.vslice_version} for {target.name} "
        f"({target.os} {target.os_version} {target.arch}, Python {target.python}), "
        f"Kubernetes {manifest.components.get('kubernetes', '?')}, containerd "
        f"{manifest.components.get('containerd', '?')}, {len(manifest.images)} images, "
        f"{len(manifest.files)} files, {size / 2**20:.0f} MiB: every file is listed and matches"
    )
