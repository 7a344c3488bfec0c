"""``kubectl vslice``: the ``kubectl-vslice`` executable kubectl runs as a plugin.

kubectl hands the plugin every argument after ``vslice`` unchanged (it refuses flags before
the plugin's name itself), so the options come after the subcommand and are read there; the
connection is found as ``vslice``'s is (``--kubeconfig``, then ``$KUBECONFIG``).
"""

from __future__ import annotations

import re
import socket
import tomllib
from pathlib import Path

import pytest
from test_why_command import FakeCalls, the_cluster
from vslice.cli import COMMANDS, KUBECTL_COMMANDS, kubectl_main, main
from vslice_kube.workloads import Workloads

ROOT = Path(__file__).resolve().parents[2]


def exit_code(argv: list[str]) -> int | str | None:
    with pytest.raises(SystemExit) as exited:
        kubectl_main(argv)
    return exited.value.code


def test_the_console_script_is_declared() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    scripts = project["project"]["scripts"]
    assert scripts["kubectl-vslice"] == "vslice.cli:kubectl_main"
    assert scripts["vslice"] == "vslice.cli:main"


def test_the_plugin_offers_the_four_views_of_the_vslice_command() -> None:
    assert KUBECTL_COMMANDS == ("allocations", "plan", "top", "why")
    assert set(KUBECTL_COMMANDS) <= set(COMMANDS)
    assert list(COMMANDS) == sorted(COMMANDS)


def test_lab_is_refused_with_the_four_commands_and_where_it_runs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert exit_code(["lab", "up"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("usage: kubectl vslice ")
    assert err.endswith(
        "kubectl vslice: error: 'lab' is not a kubectl vslice command; choose one of "
        "allocations, plan, top, why; `vslice lab` runs it\n"
    )


def test_an_unknown_command_is_refused_without_pointing_at_vslice(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert exit_code(["frobnicate"]) == 2
    err = capsys.readouterr().err
    assert "'frobnicate' is not a kubectl vslice command; choose one of allocations, plan" in err
    assert "`vslice frobnicate`" not in err


def test_top_help_is_named_kubectl_vslice_top(capsys: pytest.CaptureFixture[str]) -> None:
    assert exit_code(["top", "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: kubectl vslice top [-h] [--kubeconfig FILE]")


def test_the_plugins_help_lists_only_its_commands(capsys: pytest.CaptureFixture[str]) -> None:
    assert exit_code(["--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: kubectl vslice [-h] COMMAND ...")
    # A command's line starts with 4 spaces; help wrapped onto the next line has more.
    listed = re.findall(r"^ {4}(\S+)", out, flags=re.MULTILINE)
    assert listed == ["allocations", "plan", "top", "why"]


def test_an_option_before_the_command_says_where_options_go(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert exit_code(["-n", "team-a", "why", "train"]) == 2
    err = capsys.readouterr().err
    assert "options go after the command, got '-n' first; e.g. `kubectl vslice why POD" in err


def test_a_subcommands_usage_error_names_kubectl_vslice(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert exit_code(["why"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: kubectl vslice why ")
    assert "the following arguments are required: POD" in err


def test_why_runs_the_same_code_as_vslice_why(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls = the_cluster()
    kubeconfigs: list[object] = []

    def connect(kubeconfig: object = None) -> tuple[FakeCalls, str]:
        kubeconfigs.append(kubeconfig)
        return calls, "default"

    monkeypatch.setattr(Workloads, "connect", staticmethod(connect))
    monkeypatch.delenv("VSLICE_NAMESPACE", raising=False)
    argv = ["why", "big", "-n", "team-c", "--kubeconfig", "/site/kubeconfig"]
    assert kubectl_main(argv) == 0
    plugin = capsys.readouterr()
    assert main(argv) == 0
    assert capsys.readouterr() == plugin
    assert plugin.out.startswith("pod team-c/big: Pending, no node yet, asks 1 GPU with 90 GiB\n")
    assert kubeconfigs == ["/site/kubeconfig", "/site/kubeconfig"]
    assert calls.asked == ["pod team-c/big", "pod team-c/big"]


def closed_port_kubeconfig(path: Path, namespace: str) -> str:
    """A kubeconfig whose server is a port nothing listens on (returned: its URL), with the
    context's namespace given."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: k, cluster: {{server: 'https://127.0.0.1:{port}', "
        "insecure-skip-tls-verify: true}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        f"contexts: [{{name: c, context: {{cluster: k, user: u, namespace: {namespace}}}}}]\n"
    )
    return f"https://127.0.0.1:{port}"


def test_kubeconfig_and_namespace_come_from_the_environment_and_the_flags_after_the_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("VSLICE_NAMESPACE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    env_server = closed_port_kubeconfig(tmp_path / "env-kubeconfig", "team-env")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "env-kubeconfig"))
    # $KUBECONFIG as kubectl users export it: its server, its context's namespace.
    assert kubectl_main(["why", "train"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(
        f"vslice why: get pod team-env/train: cannot reach the API server at {env_server} "
    )
    # -n and --kubeconfig after the command, as kubectl users type them, win.
    flag_server = closed_port_kubeconfig(tmp_path / "flag-kubeconfig", "team-flag")
    flags = ["-n", "team-a", "--kubeconfig", str(tmp_path / "flag-kubeconfig")]
    assert kubectl_main(["why", "train", *flags]) == 1
    err = capsys.readouterr().err
    assert err.startswith(
        f"vslice why: get pod team-a/train: cannot reach the API server at {flag_server} "
    )
    assert len(err.splitlines()) == 1
