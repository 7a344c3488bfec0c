"""The lab's own error: which component failed and which log to read."""

from __future__ import annotations

from pathlib import Path

from vslice_core.errors import VsliceError


class LabError(VsliceError):
    """``up`` failed; ``component`` and ``log`` say where to look."""

    def __init__(self, message: str, *, component: str, log: Path | None = None) -> None:
        super().__init__(message)
        self.component = component
        self.log = log
