"""The SDK's commands refuse bad input before they connect to anything."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from dra_objects import dra_pod
from dra_objects import template as claim_template
from vslice.cli import main
from vslice.plans import plan_manifest
from vslice.snapshot import ClusterSnapshot
from vslice_control.webhook.policy import WebhookPolicy, review_pod
from vslice_control.webhook.review import AdmissionRequest
from vslice_core.errors import InvalidRequest

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"
GPU, MEM = "nvidia.com/gpu", "nvidia.com/gpumem"


@pytest.fixture(autouse=True)
def _no_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--memory", "200%"], "memory percentage must be a whole number 1..100%, got '200%'"),
        (["--memory=-1Gi"], "memory must be >= 0, got '-1Gi'"),
        (["--cores", "101"], "cores must be a whole number 0..100, got 101"),
        (["--gpus", "0"], "gpus must be a whole number 1..64, got 0"),
        (["--gpu-policy", "best"], "gpu_policy must be one of binpack, mutex, spread, topology"),
        (["--timeout=-1"], "timeout must be a number of seconds >= 0, got -1.0"),
        (["--timeout", "nan"], "timeout must be a number of seconds >= 0, got nan"),
        (["--name", "My_Pod"], "name must be a DNS label"),
    ],
)
def test_request_exits_2_with_the_field_and_value_and_no_traceback(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["request", *flags, "busybox", "true"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("vslice request: ") and message in err


def test_a_missing_cluster_is_reported_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["top"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("vslice top: no Kubernetes connection configured")
    assert len(err.strip().splitlines()) == 1


def test_the_command_after_the_image_keeps_its_own_flags() -> None:
    from vslice.cli import build_parser

    argv = ["request", "--memory", "1Gi", "busybox", "echo", "-n", "hi"]
    args = build_parser(argv).parse_args(argv)
    assert (args.command, args.image, args.argv, args.namespace) == (
        "request",
        "busybox",
        ["echo", "-n", "hi"],
        None,
    )


def test_a_multi_line_error_prints_real_lines_ending_in_a_newline() -> None:
    from vslice.commands.options import error_text

    text = error_text("request", "1 GPU does not fit:\nnode-a: no\tmemory\nnode-b: no slots")
    assert text == (
        "vslice request: 1 GPU does not fit:\n  node-a: no\\tmemory\n  node-b: no slots\n"
    )


@pytest.mark.parametrize(
    ("argv", "usage", "unknown"),
    [
        (["top", "--nodee", "x"], "usage: vslice top ", "--nodee x"),
        (["request", "--memroy", "1Gi", "busybox"], "usage: vslice request ", "--memroy"),
        (["lab", "up", "--exampel"], "usage: vslice lab up ", "--exampel"),
        (["delete", "x", "--force"], "usage: vslice delete ", "--force"),
    ],
)
def test_an_unknown_option_prints_the_usage_of_its_subcommand(
    argv: list[str], usage: str, unknown: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.startswith(usage)
    assert err.endswith(f"error: unrecognized arguments: {unknown}\n")


def test_a_closed_pipe_ends_the_command_quietly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import io
    import os

    class ClosedPipe(io.StringIO):
        def __init__(self, fd: int) -> None:
            super().__init__()
            self._fd = fd

        def fileno(self) -> int:
            return self._fd

        def flush(self) -> None:
            raise BrokenPipeError(32, "Broken pipe")

    sink = os.open(tmp_path / "out", os.O_WRONLY | os.O_CREAT)
    monkeypatch.setattr("sys.stdout", ClosedPipe(sink))
    root = Path(__file__).resolve().parents[2]
    examples = root / "docs" / "examples"
    assert main(["plan", str(examples / "cluster.yaml"), str(examples / "pod.yaml")]) == 141
    os.close(sink)
    assert capsys.readouterr().err == ""


def test_an_unreachable_api_server_is_one_line_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: k, cluster: {{server: 'https://127.0.0.1:{port}', "
        "insecure-skip-tls-verify: true}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    assert main(["top", "--kubeconfig", str(kubeconfig)]) == 1
    err = capsys.readouterr().err
    assert err == (
        f"vslice top: list nodes: cannot reach the API server at https://127.0.0.1:{port} "
        "(connection refused); is it running? (for the local lab: `vslice lab status`)\n"
    )


def test_request_without_memory_says_the_pod_takes_whole_gpus(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["request", "--gpus", "2", "busybox"]) == 1  # no cluster configured
    first = capsys.readouterr().err.splitlines()[0]
    assert first == (
        "vslice request: no --memory given: the pod gets 2 whole GPUs exclusively; "
        "give --memory 10Gi (or 30%) for a slice"
    )


def test_request_with_cores_but_no_memory_gets_all_the_memory(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["request", "--cores", "30", "busybox"]) == 1
    assert "the pod gets all the memory of 1 GPU;" in capsys.readouterr().err


def test_request_with_memory_adds_no_note(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["request", "--memory", "1Gi", "busybox"]) == 1
    assert "no --memory" not in capsys.readouterr().err


def test_delete_refuses_a_name_that_cannot_be_a_pod(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["delete", "My_Pod"]) == 2
    assert capsys.readouterr().err.startswith("vslice delete: name must be a DNS label")


def test_the_example_command_is_quoted_for_pasting(monkeypatch: pytest.MonkeyPatch) -> None:
    from vslice_ops import lab

    monkeypatch.setattr(lab, "vslice_program", lambda: ["/opt/my env/bin/vslice"])
    line = lab.shell_command(["request", "--kubeconfig", "/tmp/lab (1)/kubeconfig", "img"])
    assert line == "'/opt/my env/bin/vslice' request --kubeconfig '/tmp/lab (1)/kubeconfig' img"
    assert lab.export_line(Path("/tmp/lab (1)/kubeconfig")) == (
        "export KUBECONFIG='/tmp/lab (1)/kubeconfig'"
    )


def test_the_example_runs_the_same_vslice_when_it_is_not_on_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    from vslice_ops import lab

    entry = tmp_path / "bin" / "vslice"
    entry.parent.mkdir()
    entry.write_text("#!/bin/sh\n")
    monkeypatch.setattr(sys, "argv", [str(entry), "lab", "up"])
    monkeypatch.setenv("PATH", str(tmp_path / "elsewhere"))
    assert lab.vslice_program() == [str(entry.resolve())]
    monkeypatch.setenv("PATH", str(entry.parent))
    entry.chmod(0o755)
    assert lab.vslice_program() == ["vslice"]
    monkeypatch.setattr(sys, "argv", ["-c"])
    assert lab.vslice_program() == [sys.executable, "-m", "vslice.cli"]


def test_lab_up_on_a_running_lab_prints_its_export_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from vslice_lab import lab as lab_module
    from vslice_lab.layout import Layout
    from vslice_lab.state import LabRecord

    running = LabRecord(version="v1", ports={"kube-apiserver": 6443})

    def already_running(options: lab_module.LabOptions) -> LabRecord:
        raise lab_module.LabAlreadyRunning("a lab is already running", record=running)

    monkeypatch.setattr(lab_module, "up", already_running)
    assert main(["lab", "up", "--state-dir", str(tmp_path), "--no-services"]) == 0
    out, err = capsys.readouterr()
    assert out == f"export KUBECONFIG={Layout.at(tmp_path).kubeconfig}\n"
    assert "a lab is already running in" in err and "https://127.0.0.1:6443" in err


def test_lab_up_kueue_on_a_running_lab_without_kueue_says_to_restart_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from vslice_lab import lab as lab_module
    from vslice_lab.state import LabRecord

    running = LabRecord(version="v1", ports={"kube-apiserver": 6443})

    def already_running(options: lab_module.LabOptions) -> LabRecord:
        assert options.kueue
        raise lab_module.LabAlreadyRunning("a lab is already running", record=running)

    monkeypatch.setattr(lab_module, "up", already_running)
    assert main(["lab", "up", "--state-dir", str(tmp_path), "--no-services", "--kueue"]) == 1
    out, err = capsys.readouterr()
    assert out == ""  # no export line: the lab asked for is not the one running
    assert "has no Kueue, and --kueue cannot add it to a running lab" in err
    assert "lab down --state-dir" in err


# --- vslice plan refuses what admission refuses, with admission's message ---------------------


def _pod(limits: dict[str, Any], requests: dict[str, Any] | None = None) -> dict[str, Any]:
    resources = {"limits": limits, **({"requests": requests} if requests else {})}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "train", "namespace": "team-a"},
        "spec": {"containers": [{"name": "main", "image": "busybox", "resources": resources}]},
    }


MEM_LIMIT = f"spec.containers[0].resources.limits[{MEM!r}]"
GRAMMAR = "must be a Kubernetes quantity written with ASCII digits and no blanks"
REFUSED = [
    pytest.param(_pod({GPU: "1", MEM: "3000 "}), f"{MEM_LIMIT} {GRAMMAR}", id="a blank"),
    pytest.param(
        _pod({GPU: "1", MEM: "\u0663\u0660\u0660\u0660"}),
        f"{MEM_LIMIT} {GRAMMAR}",
        id="Arabic-Indic digits",
    ),
    pytest.param(
        _pod({GPU: "1", MEM: "\uff13\uff10\uff10\uff10"}),
        f"{MEM_LIMIT} {GRAMMAR}",
        id="full-width digits",
    ),
    pytest.param(
        _pod({GPU: "1", MEM: "3000"}, {GPU: "1", MEM: "2000"}),
        f"spec.containers[0].resources.requests[{MEM!r}] must equal limits ('3000')",
        id="requests unlike limits",
    ),
    pytest.param(
        _pod({GPU: "1", MEM: "9e15"}),
        f"{MEM_LIMIT} must be at most 8796093022207, got '9e15'",
        id="memory beyond the bound",
    ),
    pytest.param(
        _pod({GPU: "3e9"}),
        f"spec.containers[0].resources.limits[{GPU!r}] must be at most 2147483647, got '3e9'",
        id="GPUs beyond the bound",
    ),
    pytest.param(
        _pod({GPU: "1", "nvidia.com/gpucores": "120"}),
        "nvidia.com/gpucores must be 0..100, got 120",
        id="cores out of range",
    ),
]


def _admission(pod: dict[str, Any]) -> str:
    review = AdmissionRequest(uid="u", operation="CREATE", namespace="team-a", name="", pod=pod)
    verdict = review_pod(review, WebhookPolicy())
    assert (verdict.allowed, verdict.code) == (False, 400)
    return verdict.message


def _plan(tmp_path: Path, *documents: dict[str, Any]) -> tuple[int, str]:
    # JSON, one document a line: the file keeps every blank and non-ASCII digit as written
    path = tmp_path / "pod.yaml"
    path.write_text("\n---\n".join(json.dumps(d) for d in documents), encoding="utf-8")
    return main(["plan", str(EXAMPLES / "cluster.yaml"), str(path), "--json"]), str(path)


@pytest.mark.parametrize(("pod", "begins"), REFUSED)
def test_vslice_plan_refuses_what_admission_refuses_with_the_same_message(
    pod: dict[str, Any], begins: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    message = _admission(pod)
    assert message.startswith(begins)
    status, _ = _plan(tmp_path, pod)
    assert (status, capsys.readouterr()) == (2, ("", f"vslice plan: {message}\n"))


@pytest.mark.parametrize(("pod", "begins"), REFUSED)
def test_the_sdks_plan_refuses_what_admission_refuses_with_the_same_message(
    pod: dict[str, Any], begins: str, snapshot: ClusterSnapshot
) -> None:
    with pytest.raises(InvalidRequest) as caught:
        plan_manifest(snapshot, pod, namespace="team-a")
    assert str(caught.value) == _admission(pod)


def test_vslice_plan_reads_a_dra_pods_own_values_as_admission_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pod = dra_pod("team-d", "train", phase="Pending", template_name="vslice-gpu-8gi")
    pod.pop("status")
    pod["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/priority": "1 "}
    message = _admission(pod)
    assert message.startswith(
        f"spec.containers[0].resources.limits['nvidia.com/priority'] {GRAMMAR}"
    )
    status, _ = _plan(tmp_path, claim_template("team-d", "vslice-gpu-8gi"), pod)
    assert (status, capsys.readouterr().err) == (2, f"vslice plan: {message}\n")
