"""The molecule scenarios, on Debian 12 containers booting systemd (podman, runc).

- ``lab``: site.yml on one host that is control plane and GPU node of an existing cluster
  (Debian's containerd 1.7 with a site configuration), without an API server.
- ``cluster``: three bare hosts (one control plane, two GPU nodes) to a kubeadm cluster with
  vslice on it, from the offline bundle alone (site.yml); verify runs a sliced vslice-smoke pod
  on each GPU node and checks its log; side_effect upgrades vslice to the next bundle and rolls
  it back while a sliced pod runs, then runs uninstall.yml (refused while a pod holds a slice,
  then everything of vslice removed with the cluster still working, then no change).

Each runs converge, then idempotence (a second run changes nothing), then verify. The image is
built once by build-image.sh and cached under ~/.cache/vslice/images/.
"""

from __future__ import annotations

import contextlib
import re
import shutil
from pathlib import Path

import pytest
from bringup import HERE, ROOT, run, tool

pytestmark = [pytest.mark.molecule, pytest.mark.slow]

LOG_DIR = ROOT / "test-artifacts"
# cluster's side_effect: upgrade, rollback and uninstall (see its side_effect.yml).
EXTRA_STEPS = {"cluster": ("side_effect",)}


# The cluster scenario's hosts share the machine's cgroup tree (see its molecule.yml): each
# kubelet's --cgroup-root, named after its host, stays behind when the containers go.
CLUSTER_HOSTS = ("vslice-cp", "vslice-gpu-1", "vslice-gpu-2")


def _remove_cgroup_roots(hosts: tuple[str, ...]) -> None:
    for hierarchy in Path("/sys/fs/cgroup").iterdir():
        for host in hosts:
            top = hierarchy / host
            if not top.is_dir() or top.is_symlink():
                continue
            for directory in sorted(top.rglob("*"), key=lambda p: len(p.parts), reverse=True):
                if directory.is_dir():
                    with contextlib.suppress(OSError):
                        directory.rmdir()
            with contextlib.suppress(OSError):
                top.rmdir()


def _require_podman() -> None:
    for binary in ("podman", "runc", "debootstrap"):
        if shutil.which(binary) is None:
            pytest.fail(f"{binary} is missing; .ci/setup.d/40-ansible.sh installs it")


def _idempotence_report(stdout: str, stderr: str) -> str:
    """The playbook output of each task molecule's idempotence step names (on stderr), from
    the task's last run: what changed, so that a failure says why without the whole log."""
    names = re.findall(r"^\*\s+=> (.+?)\s*$", stdout + stderr, flags=re.MULTILINE)
    lines = stdout.splitlines()
    report: list[str] = []
    for name in dict.fromkeys(names):
        header = f"TASK [{name}]"
        starts = [i for i, line in enumerate(lines) if line.startswith(header)]
        if not starts:
            continue
        block = [lines[starts[-1]]]
        for line in lines[starts[-1] + 1 : starts[-1] + 80]:
            if line.startswith(("TASK [", "PLAY [", "RUNNING HANDLER [")):
                break
            block.append(line)
        report.extend(block)
    if not report:
        return ""
    return "\n".join(["idempotence: the tasks that changed, last run:", *report, "", ""])


@pytest.mark.parametrize("scenario", ["lab", "cluster"])
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
    if scenario == "cluster":
        _remove_cgroup_roots(CLUSTER_HOSTS)
    LOG_DIR.mkdir(exist_ok=True)
    (LOG_DIR / f"molecule-{scenario}.log").write_text(result.stdout + result.stderr)
    output = result.stdout + result.stderr
    report = _idempotence_report(result.stdout, result.stderr)
    assert result.returncode == 0, report + output[-8000:]
    for step in ("converge", "idempotence", "verify", *EXTRA_STEPS.get(scenario, ())):
        assert f"{step}: Executed: Successful" in output, f"molecule did not report {step}"
