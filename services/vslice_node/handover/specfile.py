"""The node's CDI spec file: written atomically, kept current, stale copies removed.

The runtime may read the spec directory at any moment (containerd watches it and rescans on
every change), so the file is never written in place: the new text goes to a temporary file
in the same directory, whose ``.tmp`` ending the CDI library skips, and is then renamed over
the old one; a reader sees the old spec or the new one, never a partial file.

Stale files are the ones this plugin wrote under another name (an earlier ``cdi_kind``) or no
longer wants (``injection: mounts``, a node without GPUs: a spec without devices is invalid).
They are recognised by the owner annotation naming this node, so specs of other vendors, and
of another node's plugin sharing the directory, are left alone.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from vslice_node.handover.cdispec import OWNER_ANNOTATION, spec_file_name
from vslice_node.handover.files import TEMP_PREFIX, TEMP_SUFFIX, replace_text

log = logging.getLogger("vslice.deviceplugin")

# Runtimes and `nvidia-ctk cdi list` read the spec; it holds nothing secret.
SPEC_MODE = 0o644
TEMP_GRACE_S = 60.0  # a temporary file younger than this may belong to a writer still at work


class SpecFile:
    def __init__(self, directory: Path, kind: str, node: str) -> None:
        self.directory = directory
        self.path = directory / spec_file_name(kind)
        self.node = node
        self.written: str | None = None
        self.state = "not yet written"

    def update(self, document: dict[str, Any] | None) -> None:
        """Make the file hold ``document`` (None: no file); rewrites only on change."""
        try:
            if document is None:
                # State first: whoever sees the file gone must not read the old state (a
                # failed removal sets its own state below).
                self.written, self.state = None, "no GPUs: no spec file"
                self._remove(self.path)
                return
            text = json.dumps(document, indent=2) + "\n"
            if text == self.written and self.path.exists():
                return
            self._replace(text)
        except OSError as exc:
            self._failed(f"{exc.strerror or exc} ({exc.filename or self.path})")
            return
        log.info(
            "CDI spec written",
            extra={"path": str(self.path), "devices": len(document["devices"])},
        )
        self.written, self.state = text, "written"

    def _replace(self, text: str) -> None:
        replace_text(self.path, text, SPEC_MODE)

    def _failed(self, reason: str) -> None:
        state = f"failing: {reason}"
        if state != self.state:  # one line per new reason, not one per refresh pass
            log.error("cannot write the CDI spec; will retry", extra={"error": reason})
        self.state = state

    def remove_stale(self, keep_current: bool) -> list[Path]:
        """Delete this node's other spec files (and the current one unless ``keep_current``)
        and leftover temporary files; the paths deleted."""
        removed = []
        try:
            entries = list(self.directory.iterdir())
        except OSError:
            return []  # no directory: nothing of ours in it
        for entry in entries:
            if entry == self.path and keep_current:
                continue
            if not (self._is_ours(entry) or self._is_old_temp(entry)):
                continue
            try:
                if self._remove(entry):
                    removed.append(entry)
                    log.info("removed a stale CDI spec file", extra={"path": str(entry)})
            except OSError as exc:
                log.error(
                    "cannot remove a stale CDI spec file",
                    extra={"path": str(entry), "error": exc.strerror},
                )
        return removed

    def _is_ours(self, entry: Path) -> bool:
        if entry.suffix != ".json" or not entry.is_file():
            return False
        try:
            document = json.loads(entry.read_text())
        except (OSError, ValueError):
            return False
        annotations = document.get("annotations") if isinstance(document, dict) else None
        return isinstance(annotations, dict) and annotations.get(OWNER_ANNOTATION) == self.node

    @staticmethod
    def _is_old_temp(entry: Path) -> bool:
        if not (entry.name.startswith(TEMP_PREFIX) and entry.name.endswith(TEMP_SUFFIX)):
            return False
        try:
            return entry.stat().st_mtime < time.time() - TEMP_GRACE_S
        except OSError:
            return False

    @staticmethod
    def _remove(path: Path) -> bool:
        try:
            path.unlink()
        except FileNotFoundError:
            return False
        return True
