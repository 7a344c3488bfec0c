"""Finding the Prometheus server and ``promtool`` the lab and the rule tests run.

Prometheus is the distribution's (Debian 12: 2.42), not built from Go modules: it is a
stand-alone server with no version coupling to Kubernetes, and Debian's binaries need only the
C library. ``.ci/setup`` unpacks the package's two binaries into the cache
(``~/.cache/vslice/prometheus/bin``) instead of installing the package, because installing it
also registers and starts a system service on port 9090, which a developer's machine does not
want. An installed package (``/usr/bin/prometheus``) is used as well.

Lookup order: ``--bin-dir`` and ``$VSLICE_LAB_BIN_DIR`` (as for the other binaries), the cache,
then ``/usr/bin``.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from vslice_build.binaries import _find, cache_root, search_dirs

PROMETHEUS_BINARIES = ("prometheus", "promtool")
SYSTEM_DIRS = (Path("/usr/bin"),)
HOW_TO_GET = (
    "run .ci/setup (it unpacks Debian's prometheus package into the cache), or "
    "`apt-get install prometheus`"
)


@dataclass(frozen=True)
class PrometheusBinaries:
    prometheus: Path
    promtool: Path

    def version(self) -> str:
        """The first line of ``prometheus --version``, e.g. ``prometheus, version 2.42.0+ds``."""
        result = subprocess.run(
            [str(self.prometheus), "--version"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
        return (result.stdout or result.stderr).splitlines()[0] if result.returncode == 0 else ""


def cache_dir() -> Path:
    """``~/.cache/vslice/prometheus`` (``$XDG_CACHE_HOME`` respected)."""
    return cache_root().parent / "prometheus"


def locate(extra_dirs: Sequence[Path] = ()) -> PrometheusBinaries | None:
    """Both binaries from the first directory that has them, None when either is missing."""
    dirs = [*search_dirs(extra_dirs), cache_dir() / "bin", *SYSTEM_DIRS]
    for directory in dirs:
        found = [_find(name, [directory]) for name in PROMETHEUS_BINARIES]
        if found[0] is not None and found[1] is not None:
            return PrometheusBinaries(prometheus=found[0], promtool=found[1])
    return None
