"""The molecule scenarios, on a Debian 12 container booting systemd (podman, runc).

- ``lab``: site.yml on one host that is control plane and GPU node, without an API server.
- ``control_plane``: control_plane.yml against a real API server started in the container, then
  (side_effect) uninstall.yml: refused while a pod holds a slice, then everything removed, then a
  second run that changes nothing.

Each runs converge, then idempotence (a second run changes nothing), then verify (packages at
their pinned versions, configuration merged and rendered, services running and answering
/healthz). The image is built once by build-image.sh and cached under ~/.cache/vslice/images/.
"""

from __future__ import annotations

import shutil

import pytest
from bringup import HERE, ROOT, run, tool

pytestmark = [pytest.mark.molecule, pytest.mark.slow]

LOG_DIR = ROOT / "test-artifacts"
# control_plane's side_effect runs playbooks/uninstall.yml and checks nothing of vslice is left.
EXTRA_STEPS = {"control_plane": ("side_effect",)}


def _require_podman() -> None:
    for binary in ("podman", "runc", "debootstrap"):
        if shutil.which(binary) is None:
            pytest.fail(f"{binary} is missing; .ci/setup.d/40-ansible.sh installs it")


@pytest.mark.parametrize("scenario", ["lab", "control_plane"])
def test_the_scenario_converges_is_idempotent_and_verifies(scenario: str) -> None:
    _require_podman()
    image = run("bash", str(HERE / "build-image.sh"), timeout=1200)
    assert image.returncode == 0, image.stderr[-3000:]
    result = run(
        tool("molecule"),
        "-c",
        "molecule/base.yml",
        "test",
        "-s",
        scenario,
        cwd=HERE,
        timeout=3000,
    )
    LOG_DIR.mkdir(exist_ok=True)
    (LOG_DIR / f"molecule-{scenario}.log").write_text(result.stdout + result.stderr)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-8000:]
    for step in ("converge", "idempotence", "verify", *EXTRA_STEPS.get(scenario, ())):
        assert f"{step}: Executed: Successful" in output, f"molecule did not report {step}"
