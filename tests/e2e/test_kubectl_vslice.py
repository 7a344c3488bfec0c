"""``kubectl vslice top`` and ``kubectl vslice why`` against the lab, as a kubectl user runs them.

The installed console script ``kubectl-vslice`` (pyproject.toml) runs in a fresh process with
the options after the subcommand, the way kubectl hands them to a plugin; one test goes
through the real ``kubectl`` (the lab's own build, or one on PATH), which finds the plugin on
PATH and passes ``$KUBECONFIG`` on in the environment.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import LabHandle
from vslice_build.binaries import cache_dir, search_dirs
from vslice_build.versions import KUBERNETES_VERSION
from vslice_core.annotations import ALLOCATION, decode_allocation

pytestmark = pytest.mark.timeout(300)  # may include starting the shared lab
VENV_BIN = Path(sys.executable).parent
T4 = "Tesla-T4"


@pytest.fixture(autouse=True)
def _services(services: LabHandle) -> None:
    """Every test here needs the extender (it places the pods) and the webhook."""


def plugin() -> str:
    """The installed ``kubectl-vslice`` (beside this Python, else on PATH)."""
    found = shutil.which("kubectl-vslice", path=f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}")
    if found is None:
        pytest.fail(
            "kubectl-vslice is not installed: `.venv/bin/pip install -e .` installs it "
            "(a console script of pyproject.toml)"
        )
    return found


def kubectl() -> str:
    """The lab's kubectl (built by `python -m vslice_build.binaries`), else one on PATH."""
    for directory in [*search_dirs(), cache_dir(KUBERNETES_VERSION) / "bin"]:
        candidate = directory / "kubectl"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("kubectl")
    if found is None:
        pytest.fail(
            "no kubectl: `.venv/bin/python -m vslice_build.binaries` builds the lab's into "
            f"{cache_dir(KUBERNETES_VERSION) / 'bin'} (.ci/setup does)"
        )
    return found


def user_env(lab: LabHandle) -> dict[str, str]:
    """A shell with the lab's KUBECONFIG exported and the venv's scripts on PATH."""
    env = {key: value for key, value in os.environ.items() if key != "VSLICE_NAMESPACE"}
    env["KUBECONFIG"] = str(lab.kubeconfig)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


def run(lab: LabHandle, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(argv), capture_output=True, text=True, timeout=120, env=user_env(lab)
    )


def unschedulable(pod: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
        for c in pod["status"].get("conditions") or []
    )


def held_slice(lab: LabHandle, namespace: str) -> dict[str, Any]:
    """A running pod holding 7 GiB and 35 % cores of a T4 (a kwok node: it runs at once)."""
    lab.create_pod(
        namespace,
        "held",
        limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "7168", "nvidia.com/gpucores": "35"},
        annotations={"vslice.io/gpu-type": "t4"},
    )
    return lab.wait_for_pod(
        namespace,
        "held",
        lambda p: p["status"].get("phase") == "Running",
        what="Running",
        timeout=60,
    )


def too_big(lab: LabHandle, namespace: str) -> dict[str, Any]:
    """A pod asking 90 GiB of one GPU (the lab's largest has 80 GiB), once kube-scheduler
    has said it cannot place it."""
    lab.create_pod(namespace, "big", limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "92160"})
    return lab.wait_for_pod(namespace, "big", unschedulable, what="Unschedulable", timeout=60)


def test_kubectl_vslice_top_shows_the_held_slice(lab: LabHandle, namespace: str) -> None:
    held_slice(lab, namespace)
    top = run(lab, plugin(), "top", "--node", "lab-t4", "--kubeconfig", str(lab.kubeconfig))
    assert top.returncode == 0, top.stderr
    lines = top.stdout.splitlines()
    assert lines[0].split()[:3] == ["NODE", "ADDRESS", "GPU"]
    (holder,) = [line for line in lines if f"{namespace}/held" in line]
    assert holder.split()[0] == "lab-t4"
    assert lines[-1].startswith("node lab-t4 (4 GPUs): memory ")


def test_kubectl_vslice_why_says_where_a_running_pod_holds_its_slice(
    lab: LabHandle, namespace: str
) -> None:
    pod = held_slice(lab, namespace)
    allocation = decode_allocation(pod["metadata"]["annotations"][ALLOCATION])
    ((grant,),) = [c.gpus for c in allocation.containers]
    why = run(lab, plugin(), "why", "held", "-n", namespace, "--kubeconfig", str(lab.kubeconfig))
    assert why.returncode == 0, why.stderr
    lines = why.stdout.splitlines()
    assert lines[0].startswith(f"pod {namespace}/held: Running on node {allocation.node}")
    assert lines[0].endswith(", extender path (vslice.io/allocation annotation)")
    assert lines[1] == (
        f"  main: GPU {grant.index} ({grant.uuid}, {T4}): memory 7.0 GiB, cores 35%"
    )
    assert lines[2].startswith(f"  GPU {grant.index} of {allocation.node} altogether: memory ")

    # --json, and the namespace as --namespace: the same placement as one object.
    listed = run(lab, plugin(), "why", "held", "--namespace", namespace, "--json")
    assert listed.returncode == 0, listed.stderr
    found = json.loads(listed.stdout)
    assert (found["state"], found["node"], found["path"]) == (
        "placed",
        allocation.node,
        "extender",
    )
    (row,) = found["grants"]
    assert (row["gpu_uuid"], row["memory_mib"], row["cores"]) == (grant.uuid, 7168, 35)


def test_kubectl_vslice_why_explains_a_pending_pod_with_numbers_and_the_schedulers_word(
    lab: LabHandle, namespace: str
) -> None:
    too_big(lab, namespace)
    # No --kubeconfig: $KUBECONFIG, as kubectl users have it exported.
    why = run(lab, plugin(), "why", "big", "-n", namespace)
    assert why.returncode == 0, why.stderr
    lines = why.stdout.splitlines()
    assert lines[0] == f"pod {namespace}/big: Pending, no node yet, asks 1 GPU with 90 GiB"
    assert lines[1] == "does not fit: asks 90 GiB per GPU; the largest GPU here has 80 GiB"
    for node in lab.record.nodes:
        (line,) = [line for line in lines if line.startswith(f"  {node}: ")]
        assert "90 GiB" in line and "(memory" in line
    assert lines[-1].startswith("kube-scheduler: Unschedulable: 0/"), lines[-1]
    assert "Traceback" not in why.stderr


def test_kubectl_vslice_why_names_a_missing_pod_and_exits_1(lab: LabHandle, namespace: str) -> None:
    missing = run(lab, plugin(), "why", "never-was", "-n", namespace)
    assert (missing.returncode, missing.stdout) == (1, "")
    assert missing.stderr.startswith(
        f"vslice why: no pod named 'never-was' in namespace '{namespace}'"
    )
    assert len(missing.stderr.splitlines()) == 1


def test_the_real_kubectl_finds_the_plugin_and_passes_the_flags_after_it(
    lab: LabHandle, namespace: str
) -> None:
    too_big(lab, namespace)
    why = run(lab, kubectl(), "vslice", "why", "big", "-n", namespace)
    assert why.returncode == 0, why.stderr
    assert why.stdout.splitlines()[0] == (
        f"pod {namespace}/big: Pending, no node yet, asks 1 GPU with 90 GiB"
    )
    refused = run(lab, kubectl(), "vslice", "lab", "up")
    assert refused.returncode == 2
    assert "'lab' is not a kubectl vslice command; choose one of allocations, plan, top, why" in (
        refused.stderr
    )
