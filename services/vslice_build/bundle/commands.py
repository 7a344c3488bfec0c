"""The external commands a bundle build runs (pip, make, apt), with failures as BundleError."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

from vslice_build.bundle.manifest import BundleError


def run(command: Sequence[str], what: str, *, cwd: Path | None = None) -> str:
    """``command``'s output; BundleError says what failed, with the end of what it printed."""
    try:
        result = subprocess.run(list(command), cwd=cwd, capture_output=True, text=True, check=False)
    except OSError as error:
        raise BundleError(f"{what}: cannot run {command[0]}: {error}") from None
    if result.returncode != 0:
        said = (result.stderr or result.stdout).strip()[-800:]
        raise BundleError(
            f"{what} failed (`{' '.join(command[:4])} ...`, exit {result.returncode}): {said}"
        )
    return result.stdout
