"""``vslice top``, ``vslice allocations`` and ``vslice request`` as a shell user runs them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import LabHandle

pytestmark = pytest.mark.timeout(300)  # may include starting the shared lab
IMAGE = "registry.invalid/sleep:1"


def vslice_cli(lab: LabHandle, command: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``vslice COMMAND --kubeconfig LAB ARGS...`` in a fresh process."""
    argv = [sys.executable, "-m", "vslice.cli", command, "--kubeconfig", str(lab.kubeconfig)]
    return subprocess.run([*argv, *args], capture_output=True, text=True, timeout=120)


def request(lab: LabHandle, *args: str) -> subprocess.CompletedProcess[str]:
    return vslice_cli(lab, "request", *args)


@pytest.fixture(autouse=True)
def _services(services: LabHandle) -> None:
    """Every CLI test needs the extender and webhook."""


def test_request_submits_waits_and_prints_where_the_slice_landed(
    lab: LabHandle, namespace: str
) -> None:
    result = request(
        lab,
        "-n",
        namespace,
        "--memory",
        "6Gi",
        "--cores",
        "15",
        "--gpu-type",
        "a100",
        "--name",
        "from-shell",
        IMAGE,
        "sleep",
        "3600",
    )
    assert result.returncode == 0, result.stderr
    assert f"created pod {namespace}/from-shell" in result.stdout
    assert f"{namespace}/from-shell on node lab-a100" in result.stdout
    assert "6 GiB" in result.stdout and "15%" in result.stdout
    pod = lab.read_pod(namespace, "from-shell")
    assert pod["spec"]["containers"][0]["command"] == ["sleep", "3600"]


def test_top_and_allocations_show_the_requested_slice(lab: LabHandle, namespace: str) -> None:
    created = request(
        lab,
        "-n",
        namespace,
        "--memory",
        "7Gi",
        "--cores",
        "35",
        "--name",
        "held",
        "--gpu-type",
        "t4",
        IMAGE,
    )
    assert created.returncode == 0, created.stderr

    top = vslice_cli(lab, "top", "--node", "lab-t4")
    assert top.returncode == 0, top.stderr
    lines = top.stdout.splitlines()
    assert lines[0].split() == [
        "NODE",
        "ADDRESS",
        "GPU",
        "MODEL",
        "STATE",
        "SLOTS",
        "MEMORY(GiB)",
        "CORES(%)",
        "PODS",
    ]
    holder = [line for line in lines if f"{namespace}/held" in line]
    assert len(holder) == 1 and holder[0].split()[0] == "lab-t4"
    assert "7.0/15.0" in holder[0]
    assert lines[-1].startswith("node lab-t4 (4 GPUs): memory 7.0/60.0 GiB")

    listed = vslice_cli(lab, "allocations", "-n", namespace, "--json")
    assert listed.returncode == 0, listed.stderr
    (row,) = json.loads(listed.stdout)
    assert (row["pod"], row["node"], row["memory_mib"], row["cores"]) == (
        "held",
        "lab-t4",
        7168,
        35,
    )


def test_bad_input_exits_2_naming_the_field_and_creates_nothing(
    lab: LabHandle, namespace: str
) -> None:
    for flags, words in [
        (["--memory", "200%"], "memory percentage must be a whole number 1..100%, got '200%'"),
        (["--memory=-1Gi"], "'-1Gi'"),
        (["--cores", "120"], "cores must be a whole number 0..100, got 120"),
        (["--memory", "1Gi", "--gpu-type", "H200"], "models present: NVIDIA-A100-SXM4-80GB"),
    ]:
        result = request(lab, "-n", namespace, *flags, IMAGE)
        assert result.returncode == 2, (flags, result.stderr)
        assert words in result.stderr and "Traceback" not in result.stderr
    assert lab.core.list_namespaced_pod(namespace).items == []


def test_a_slice_that_cannot_fit_exits_1_with_reasons_per_node(
    lab: LabHandle, namespace: str
) -> None:
    result = request(lab, "-n", namespace, "--memory", "90Gi", IMAGE)
    assert result.returncode == 1
    lines = result.stderr.splitlines()  # real lines, not one with literal "\\n" in it
    assert lines[0] == (
        "vslice request: 1 GPU, 90 GiB: does not fit: asks 90 GiB per GPU; "
        "the largest GPU here has 80 GiB"
    )
    for node in lab.record.nodes:
        (line,) = [line for line in lines if line.startswith(f"    {node}: ")]
        assert "90 GiB" in line and "(memory" in line
    assert result.stderr.endswith("\n") and "\\n" not in result.stderr
    assert lab.core.list_namespaced_pod(namespace).items == []


def test_dry_run_prints_the_plan_and_creates_nothing(lab: LabHandle, namespace: str) -> None:
    result = request(
        lab, "-n", namespace, "--dry-run", "--memory", "1Gi", "--gpu-type", "H100", IMAGE
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "1 GPU, 1 GiB, type H100: fits on lab-h100"
    assert lab.core.list_namespaced_pod(namespace).items == []


def test_top_lists_a_queued_pod_that_cannot_fit_with_its_reason(
    lab: LabHandle, namespace: str
) -> None:
    queued = request(
        lab,
        "-n",
        namespace,
        "--memory",
        "90Gi",
        "--queue",
        "--wait",
        "none",
        "--name",
        "big",
        IMAGE,
    )
    assert queued.returncode == 0, queued.stderr
    top = vslice_cli(lab, "top")
    assert top.returncode == 0, top.stderr
    (line,) = [line for line in top.stdout.splitlines() if line.startswith(f"{namespace}/big ")]
    assert "does not fit: asks 90 GiB per GPU; the largest GPU here has 80" in line
    assert "waiting for a slice" in top.stdout.splitlines()[-1]


def test_delete_gives_the_slice_back_and_says_when_nothing_is_there(
    lab: LabHandle, namespace: str
) -> None:
    for flags in ([], ["--job"]):
        created = request(
            lab,
            "-n",
            namespace,
            "--memory",
            "1Gi",
            "--wait",
            "none",
            "--name",
            "gone",
            *flags,
            IMAGE,
        )
        assert created.returncode == 0, created.stderr
        deleted = vslice_cli(lab, "delete", "-n", namespace, "gone")
        kind = "job" if flags else "pod"
        assert deleted.returncode == 0, deleted.stderr
        assert deleted.stdout.startswith(f"deleted {kind} {namespace}/gone")
    missing = vslice_cli(lab, "delete", "-n", namespace, "never-was")
    assert missing.returncode == 1
    assert missing.stderr.startswith(
        f"vslice delete: no Job or pod named 'never-was' in namespace '{namespace}'"
    )
