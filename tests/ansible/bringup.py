"""Paths and runners shared by the Ansible bring-up tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
ROLES = ROOT / "roles"
ROLE_NAMES = sorted(p.name for p in ROLES.iterdir() if (p / "tasks" / "main.yml").exists())
VENV_BIN = Path(sys.executable).parent


def ansible_env() -> dict[str, str]:
    """The environment the ansible tools run in: the checkout's virtualenv first on PATH."""
    env = dict(os.environ)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env["ANSIBLE_ROLES_PATH"] = str(ROLES)
    env["ANSIBLE_NOCOLOR"] = "1"
    env["ANSIBLE_FORCE_COLOR"] = "0"
    env["PY_COLORS"] = "0"
    return env


def run(*cmd: str, cwd: Path = ROOT, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd, cwd=cwd, env=ansible_env(), capture_output=True, text=True, timeout=timeout
    )


def tool(name: str) -> str:
    path = VENV_BIN / name
    if not path.exists():
        pytest.fail(f"{name} is not installed in the virtualenv; install the dev extras")
    return str(path)
