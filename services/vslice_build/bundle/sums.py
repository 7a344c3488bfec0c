"""The bundle's checksums on disk: every file's SHA-256, and sealing a finished directory
(manifest.json and SHA256SUMS written from what is there). Shared by build and verify."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from vslice_build.bundle import verify_bundle
from vslice_build.bundle.manifest import (
    MANIFEST_FILE,
    SUMS_FILE,
    BundleError,
    FileEntry,
    Manifest,
    sums_text,
)


def file_entries(root: Path) -> dict[str, FileEntry]:
    """Every regular file under ``root`` but the manifest and the sums, by relative path, found
    as the check finds them; BundleError for a link or special file, which no bundle holds."""
    sizes, odd = verify_bundle.scan(str(root))
    if odd:
        raise BundleError(f"{root} cannot be sealed: {'; '.join(odd)}")
    return {
        path: FileEntry(verify_bundle.sha256(str(root / path)), size)
        for path, size in sorted(sizes.items())
    }


def seal(root: Path, manifest: Manifest) -> Manifest:
    """Checksum everything, write manifest.json and SHA256SUMS (which covers the manifest too)."""
    sealed = replace(manifest, files=file_entries(root))
    text = (json.dumps(sealed.to_json(), indent=1) + "\n").encode()
    (root / MANIFEST_FILE).write_bytes(text)
    (root / SUMS_FILE).write_text(sums_text(sealed.files, text))
    return sealed
