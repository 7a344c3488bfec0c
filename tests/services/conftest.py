"""Fixtures shared by the service tests."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from vslice_build.versions import KUEUE_VERSION

CDI_LIBRARY = "v1.1.1"  # tags.cncf.io/container-device-interface, as in containerd v2.4.2
CHECKER_SOURCE = Path(__file__).parent / "cdi_check"
KUEUE_CHECKER_SOURCE = Path(__file__).parent / "kueue_check"


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory for unix sockets: their paths are limited to 107 bytes, and pytest's
    tmp_path can be longer."""
    path = Path(tempfile.mkdtemp(prefix="vsdp-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def go_checker(source: Path, name: str, library: str) -> Path:
    """Build the Go checker in ``source`` once per source version (cached under
    ~/.cache/vslice/<name>/): the library version and a hash of main.go, go.mod, go.sum."""
    go = shutil.which("go") or next(
        (p for p in ("/usr/local/go/bin/go",) if Path(p).exists()), None
    )
    if go is None:
        pytest.fail(f"this test needs the Go toolchain (go) to build {source}")
    text = b"".join((source / part).read_bytes() for part in ("main.go", "go.mod", "go.sum"))
    version = f"{library}-{hashlib.sha256(text).hexdigest()[:12]}"
    binary = Path.home() / ".cache" / "vslice" / name / version / name
    if not binary.exists():
        binary.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [go, "build", "-buildvcs=false", "-o", str(binary), "."],
            cwd=source,
            check=True,
            timeout=900,
        )
    return binary


@pytest.fixture(scope="session")
def cdi_check() -> Path:
    """The Go checker in cdi_check/ (CDI's own library; about 20 s to build, cached)."""
    return go_checker(CHECKER_SOURCE, "cdi-check", CDI_LIBRARY)


@pytest.fixture(scope="session")
def kueue_check() -> Path:
    """The Go checker in kueue_check/ (Kueue's own configuration loader and workload code;
    a few minutes to build the first time, cached)."""
    return go_checker(KUEUE_CHECKER_SOURCE, "kueue-check", KUEUE_VERSION)
