"""Fixtures shared by the service tests."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

CDI_LIBRARY = "v1.1.1"  # tags.cncf.io/container-device-interface, as in containerd v2.4.2
CHECKER_SOURCE = Path(__file__).parent / "cdi_check"


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory for unix sockets: their paths are limited to 107 bytes, and pytest's
    tmp_path can be longer."""
    path = Path(tempfile.mkdtemp(prefix="vsdp-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def cdi_check() -> Path:
    """The Go checker in cdi_check/, built once per source version (about 20 s, cached)."""
    go = shutil.which("go") or next(
        (p for p in ("/usr/local/go/bin/go",) if Path(p).exists()), None
    )
    if go is None:
        pytest.fail("this test needs the Go toolchain (go) to build tests/services/cdi_check")
    source = b"".join(
        (CHECKER_SOURCE / name).read_bytes() for name in ("main.go", "go.mod", "go.sum")
    )
    version = f"{CDI_LIBRARY}-{hashlib.sha256(source).hexdigest()[:12]}"
    binary = Path.home() / ".cache" / "vslice" / "cdi-check" / version / "cdi-check"
    if not binary.exists():
        binary.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [go, "build", "-buildvcs=false", "-o", str(binary), "."],
            cwd=CHECKER_SOURCE,
            check=True,
            timeout=600,
        )
    return binary
