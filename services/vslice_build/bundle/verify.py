"""``vslice bundle verify``: is this copy of a bundle whole and unchanged?

The roles check the same from Ansible (``sha256sum -c SHA256SUMS`` on the controller and the
target against each host's facts) so that a site needs no vslice on its controller; this is
the check for people, with every problem named at once.
"""

from __future__ import annotations

import json
from pathlib import Path

from vslice_build.bundle.manifest import (
    MANIFEST_FILE,
    SUMS_FILE,
    BundleError,
    Manifest,
    file_problems,
    parse,
    sums_text,
)
from vslice_build.bundle.sums import file_entries


def read_manifest(root: Path) -> Manifest:
    path = root / MANIFEST_FILE
    if not root.is_dir():
        raise BundleError(f"{root} is not a directory (unpack a bundle tarball with tar -xf)")
    try:
        return parse(json.loads(path.read_text()))
    except OSError as error:
        raise BundleError(
            f"{path} cannot be read ({error.strerror}): is {root} a bundle?"
        ) from None
    except ValueError as error:
        if isinstance(error, BundleError):
            raise
        raise BundleError(f"{path} is not JSON: {error}") from None


def verify(root: Path) -> Manifest:
    """The bundle's manifest once every file matches it; BundleError lists what does not."""
    manifest = read_manifest(root)
    problems = file_problems(manifest, file_entries(root))
    expected_sums = sums_text(manifest.files, (root / MANIFEST_FILE).read_bytes())
    try:
        sums = (root / SUMS_FILE).read_text()
    except OSError:
        problems.append(f"{SUMS_FILE} is missing")
    else:
        if sums != expected_sums:
            problems.append(
                f"{SUMS_FILE} does not match {MANIFEST_FILE} (one of them was edited after the "
                "bundle was built)"
            )
    if problems:
        shown = "; ".join(problems[:10])
        more = f"; and {len(problems) - 10} more" if len(problems) > 10 else ""
        raise BundleError(
            f"bundle {root} does not match its manifest ({len(problems)} problems): {shown}{more}"
        )
    return manifest


def summary(root: Path, manifest: Manifest) -> str:
    size = sum(entry.size for entry in manifest.files.values())
    target = manifest.target
    return (
        f"bundle {root}: vslice {manifest.vslice_version} for {target.name} "
        f"({target.os} {target.os_version} {target.arch}, Python {target.python}), "
        f"Kubernetes {manifest.components.get('kubernetes', '?')}, containerd "
        f"{manifest.components.get('containerd', '?')}, {len(manifest.images)} images, "
        f"{len(manifest.files)} files, {size / 2**20:.0f} MiB: every checksum matches"
    )
