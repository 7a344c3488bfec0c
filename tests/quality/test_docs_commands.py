"""Every shell line README.md and docs/lab.md print works as printed on a machine set up with
``.ci/setup``: each program it calls is one setup provides (``.venv/bin/...``, a script in the
checkout, a shell builtin) or one the text names as the reader's own; each ``vslice`` command
line parses; and the lines that need no lab run here and exit 0.

A line calling a program only some machines have (``kubectl``, ``ansible-playbook`` without
``.venv/bin/``) fails here, since on a fresh machine it would exit 127.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from vslice import cli

REPO = Path(__file__).resolve().parents[2]
DOCS = ("README.md", "docs/lab.md")
BUILTINS = frozenset({"eval", "export", "cd"})
READERS_OWN = {
    "podman": "saves the reader's own image; the line names docker and skopeo as alternatives",
}
"""Programs a line uses for something the reader brings, not something setup installs."""
RUNS_WITHOUT_A_LAB = frozenset({"plan", "manifests"})
"""``vslice`` subcommands that need no cluster (``--version`` and ``--help`` need none either)."""
ANSWERS = {"plan": {0, 1}}
"""Exit statuses that are answers, not failures: ``vslice plan`` exits 1 for "does not fit",
which is what README's example shows; 2 (invalid input) or 127 never are."""

_FENCE = re.compile(r"^```(bash|sh)\s*$")


def shell_lines(path: Path) -> list[tuple[int, str]]:
    """The lines of a document's ```bash and ```sh blocks (continuations joined), numbered."""
    lines: list[tuple[int, str]] = []
    inside, pending, start = False, "", 0
    for number, text in enumerate(path.read_text().splitlines(), start=1):
        if not inside:
            inside = bool(_FENCE.match(text))
            continue
        if text.startswith("```"):
            inside = False
            continue
        if not pending:
            start = number
        if text.rstrip().endswith("\\"):
            pending += text.rstrip()[:-1] + " "
            continue
        line, pending = pending + text, ""
        if line.strip() and not line.lstrip().startswith("#"):
            lines.append((start, line.strip()))
    return lines


def commands(line: str) -> list[list[str]]:
    """The simple commands of a line: split at ``&&``, ``||``, ``;`` and ``|``, comments dropped,
    and the command inside ``eval "$(...)"`` included."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    found: list[list[str]] = []
    current: list[str] = []
    for token in lexer:
        if token in ("&&", "||", ";", "|"):
            found.append(current)
            current = []
            continue
        if token.startswith("$(") and token.endswith(")"):
            found += commands(token[2:-1])
        current.append(token)
    found.append(current)
    return [command for command in found if command]


def _all_lines() -> list[tuple[str, str]]:
    return [
        (f"{name}:{number}", line) for name in DOCS for number, line in shell_lines(REPO / name)
    ]


LINES = _all_lines()


def test_the_documents_have_shell_lines_to_check() -> None:
    names = {where.split(":")[0] for where, _ in LINES}
    assert names == set(DOCS)
    assert any("vslice lab up" in line for _, line in LINES)


def _missing_program(argv: list[str]) -> str | None:
    """Why ``argv[0]`` would not be found after setup, None when it would be."""
    program = argv[0]
    if program in BUILTINS or program in READERS_OWN:
        return None
    if program == "bash":
        script = REPO / argv[1]
        return None if script.is_file() else f"no script {argv[1]} in the checkout"
    if program.startswith(".venv/bin/"):
        if (REPO / program).exists():
            return None
        return f"{program} is not there (does .ci/setup make it?)"
    return (
        f"{program} is not something .ci/setup provides: print it as `.venv/bin/{program}` "
        "if setup installs it there, or say how to get it"
    )


@pytest.mark.parametrize(("where", "line"), LINES, ids=[where for where, _ in LINES])
def test_every_program_a_line_calls_exists_after_setup(where: str, line: str) -> None:
    problems = [why for argv in commands(line) if (why := _missing_program(argv))]
    assert problems == [], f"{where}: {line}"


def test_a_line_calling_a_program_setup_does_not_provide_is_caught() -> None:
    assert _missing_program(["ansible-playbook", "-i", "x"]) is not None
    assert _missing_program(["kubectl", "get", "nodes"]) is not None
    assert _missing_program([".venv/bin/no-such-tool"]) is not None
    assert _missing_program(["bash", ".ci/no-such-script"]) is not None


def _vslice_argv(argv: list[str]) -> tuple[str, list[str]] | None:
    program = argv[0].removeprefix(".venv/bin/")
    if argv[0].startswith(".venv/bin/") and program in ("vslice", "kubectl-vslice"):
        return program, argv[1:]
    return None


VSLICE_LINES = [
    (where, line, argv)
    for where, line in LINES
    for argv in commands(line)
    if _vslice_argv(argv) is not None
]


@pytest.mark.parametrize(
    ("where", "line", "argv"), VSLICE_LINES, ids=[where for where, _, _ in VSLICE_LINES]
)
def test_every_vslice_command_in_the_docs_parses(where: str, line: str, argv: list[str]) -> None:
    found = _vslice_argv(argv)
    assert found is not None
    program, args = found
    try:
        if program == "kubectl-vslice":
            commands_ = {name: cli.COMMANDS[name] for name in cli.KUBECTL_COMMANDS}
            cli.parse(args, prog=cli.KUBECTL_PROG, commands=commands_)
        else:
            cli.parse(args)
    except SystemExit as exit_:
        if exit_.code == 0:  # --version and --help print and exit 0
            return
        pytest.fail(f"{where}: `{shlex.join(argv)}` does not parse (exit {exit_.code})")


def _runs_without_a_lab(line: str) -> bool:
    found = [_vslice_argv(argv) for argv in commands(line)]
    if not found or any(entry is None for entry in found):
        return False
    return all(
        args[:1] == ["--version"]
        or "--help" in args
        or args[:1] == []
        or args[0] in RUNS_WITHOUT_A_LAB
        for _, args in (entry for entry in found if entry is not None)
    )


RUNNABLE = [(where, line) for where, line in LINES if _runs_without_a_lab(line)]


def test_some_lines_run_here() -> None:
    assert any("vslice plan" in line for _, line in RUNNABLE)


@pytest.mark.parametrize(("where", "line"), RUNNABLE, ids=[where for where, _ in RUNNABLE])
def test_a_line_that_needs_no_lab_runs_as_printed(where: str, line: str) -> None:
    result = subprocess.run(
        ["bash", "-c", line],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "KUBECONFIG": os.devnull},
        check=False,
    )
    subcommands = {argv[1] for argv in commands(line) if len(argv) > 1}
    allowed = set.intersection(*(ANSWERS.get(name, {0}) for name in subcommands or {""}))
    assert result.returncode in allowed, f"{where}: {line}\n{result.stdout}{result.stderr}"


def test_vslice_version_prints_the_installed_version() -> None:
    result = subprocess.run(
        [str(REPO / ".venv" / "bin" / "vslice"), "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[-1] == cli.package_version()


def test_commands_splits_and_unwraps_eval() -> None:
    line = 'eval "$(.venv/bin/vslice lab up)" && .venv/bin/vslice top | head -3  # a note'
    assert commands(line) == [
        [".venv/bin/vslice", "lab", "up"],
        ["eval", "$(.venv/bin/vslice lab up)"],
        [".venv/bin/vslice", "top"],
        ["head", "-3"],
    ]
