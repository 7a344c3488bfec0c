"""The molecule scenario: site.yml on a Debian 12 container booting systemd (podman, runc).

converge, then idempotence (a second run changes nothing), then verify (packages at their pinned
versions, containerd's configuration merged, services running and answering /healthz). The
container's image is built once by build-image.sh and cached under ~/.cache/vslice/images/.
"""

from __future__ import annotations

import shutil

import pytest
from bringup import HERE, ROOT, run, tool

pytestmark = [pytest.mark.molecule, pytest.mark.slow]

LOG_DIR = ROOT / "test-artifacts"


def _require_podman() -> None:
    for binary in ("podman", "runc", "debootstrap"):
        if shutil.which(binary) is None:
            pytest.fail(f"{binary} is missing; .ci/setup.d/40-ansible.sh installs it")


def test_the_lab_scenario_converges_is_idempotent_and_verifies() -> None:
    _require_podman()
    image = run("bash", str(HERE / "build-image.sh"), timeout=1200)
    assert image.returncode == 0, image.stderr[-3000:]
    result = run(
        tool("molecule"),
        "-c",
        "molecule/base.yml",
        "test",
        "-s",
        "lab",
        cwd=HERE,
        timeout=3000,
    )
    LOG_DIR.mkdir(exist_ok=True)
    (LOG_DIR / "molecule-lab.log").write_text(result.stdout + result.stderr)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-8000:]
    for step in ("converge", "idempotence", "verify"):
        assert f"{step}: Executed: Successful" in output, f"molecule did not report {step}"
