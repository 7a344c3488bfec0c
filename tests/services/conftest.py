"""Fixtures shared by the service tests."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory for unix sockets: their paths are limited to 107 bytes, and pytest's
    tmp_path can be longer."""
    path = Path(tempfile.mkdtemp(prefix="vsdp-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)
