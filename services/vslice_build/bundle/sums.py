"""The bundle's checksums on disk: every file's SHA-256, and sealing a finished directory
(manifest.json and SHA256SUMS written from what is there). Shared by build and verify."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

from vslice_build.bundle.manifest import (
    MANIFEST_FILE,
    SUMS_FILE,
    FileEntry,
    Manifest,
    sums_text,
)


def file_entries(root: Path) -> dict[str, FileEntry]:
    """Every regular file under ``root`` but the manifest and the sums, by relative path."""
    found = {}
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root).as_posix()
        if path.is_symlink() or not path.is_file() or relative in (MANIFEST_FILE, SUMS_FILE):
            continue
        digest = hashlib.sha256()
        with path.open("rb") as file:
            for block in iter(lambda: file.read(1 << 20), b""):
                digest.update(block)
        found[relative] = FileEntry(digest.hexdigest(), path.stat().st_size)
    return found


def seal(root: Path, manifest: Manifest) -> Manifest:
    """Checksum everything, write manifest.json and SHA256SUMS (which covers the manifest too)."""
    sealed = replace(manifest, files=file_entries(root))
    text = (json.dumps(sealed.to_json(), indent=1) + "\n").encode()
    (root / MANIFEST_FILE).write_bytes(text)
    (root / SUMS_FILE).write_text(sums_text(sealed.files, text))
    return sealed
