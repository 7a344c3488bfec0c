"""The repository's own quality gates, run as tests so the one test command covers them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PY_PATHS = ["sdk", "services", "shim/python", "tests", "benchmarks"]


def _tool(name: str) -> str:
    found = BIN / name
    if found.exists():
        return str(found)
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed; install the dev extras: pip install -e '.[dev]'")
    return path


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)


def test_ruff_finds_no_lint_errors() -> None:
    result = _run(_tool("ruff"), "check", *PY_PATHS)
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_leaves_every_file_unchanged() -> None:
    result = _run(_tool("ruff"), "format", "--check", *PY_PATHS)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict_passes_on_the_packages() -> None:
    result = _run(_tool("mypy"), "sdk/vslice", "services", "shim/python")
    assert result.returncode == 0, result.stdout + result.stderr


def test_import_contracts_keep_the_layers_apart() -> None:
    result = _run(_tool("lint-imports"))
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_machine_paths_in_tracked_files() -> None:
    tracked = _run("git", "ls-files").stdout.split()
    # The checkout's own location (and the folder beside it) must never leak into a commit.
    needles = (str(ROOT) + "/", str(ROOT.parent / "shared"))
    offenders = []
    for rel in tracked:
        path = ROOT / rel
        if not path.is_file() or path.suffix in {".png", ".whl", ".gz"}:
            continue
        text = path.read_text(errors="ignore")
        if any(needle in text for needle in needles):
            offenders.append(rel)
    assert offenders == []
