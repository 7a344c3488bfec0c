"""``tests/gpu/run.sh`` here and its summary: the script refuses a machine without a GPU with
its reason, and the summary turns real pytest JUnit output into one line per check, failures
and skips with their first line, and exits 1 when a check failed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SUMMARY = ROOT / "tests" / "gpu" / "summary.py"

CHECKS = """
import pytest

def test_holds():
    pass

def test_breaks():
    assert 1 == 2, "the slice was exceeded by 512 MiB"

@pytest.mark.skip(reason="needs PyTorch")
def test_later():
    pass
"""


def junit(tmp_path: Path, checks: str) -> Path:
    """Run ``checks`` as a test file with pytest; its JUnit XML."""
    (tmp_path / "test_checks.py").write_text(checks)
    results = tmp_path / "gpu.xml"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "test_checks.py",
            "--junitxml",
            str(results),
        ],
        cwd=tmp_path,
        capture_output=True,
        check=False,
    )
    return results


def summarize(results: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SUMMARY), str(results)], capture_output=True, text=True, check=False
    )


def test_one_line_per_check_from_real_junit_output(tmp_path: Path) -> None:
    done = summarize(junit(tmp_path, CHECKS))
    assert done.returncode == 1, done
    lines = done.stdout.splitlines()
    assert len(lines) == 3, lines
    holds, breaks, later = lines
    assert holds.startswith("gpu-check test_checks::test_holds: PASS (")
    assert "test_breaks: FAIL AssertionError: the slice was exceeded by 512 MiB (" in breaks
    assert "test_later: SKIP needs PyTorch (" in later


def test_only_passes_and_skips_exit_0_and_missing_results_exit_1(tmp_path: Path) -> None:
    assert summarize(junit(tmp_path, CHECKS.replace("1 == 2", "2 == 2"))).returncode == 0
    missing = summarize(tmp_path / "absent.xml")
    assert missing.returncode == 1 and "the checks did not run" in missing.stderr


def test_the_script_says_why_it_cannot_run_without_a_gpu(tmp_path: Path) -> None:
    # A PATH whose nvidia-smi fails, as on a machine with the tools but no working driver.
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    done = subprocess.run(
        ["bash", str(ROOT / "tests" / "gpu" / "run.sh")],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    assert done.returncode == 2
    assert "no NVIDIA GPU or driver here (nvidia-smi -L failed)" in done.stderr
