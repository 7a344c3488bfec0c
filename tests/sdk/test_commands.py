"""The SDK's commands refuse bad input before they connect to anything."""

from __future__ import annotations

from pathlib import Path

import pytest
from vslice.cli import main


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
