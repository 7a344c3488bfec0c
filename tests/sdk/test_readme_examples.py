"""The README's ``vslice plan`` examples run as written, on the files they name."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from vslice.cli import main

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
FENCE = re.compile(r"^```bash\n(.*?)^```", re.MULTILINE | re.DOTALL)


def plan_lines() -> list[str]:
    """Every line of a bash block in the README that runs ``vslice plan``."""
    blocks = FENCE.findall(README.read_text(encoding="utf-8"))
    return [line for block in blocks for line in block.splitlines() if "vslice plan" in line]


def test_the_readme_shows_plan_examples() -> None:
    assert len(plan_lines()) >= 2


@pytest.mark.parametrize("line", plan_lines())
def test_a_readme_plan_line_runs_as_written(
    line: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    program, *argv = shlex.split(line)
    assert program.endswith("vslice") and argv[0] == "plan", line
    monkeypatch.chdir(ROOT)
    status = main(argv)
    out, err = capsys.readouterr()
    if "--from-dump" in argv:
        # The dump has no quotas: the pod fits on its A100 node, the only one it has.
        assert (status, err) == (0, ""), line
        assert "fits on node-a100" in out or '"fits": true' in out
    else:
        # The cluster file's GPUs have room, the quota of the pod's namespace does not: exit 1
        # (does not fit), with the quota's numbers and a slice that fits.
        assert (status, err) == (1, ""), line
        assert "the quota of namespace team-a has 8 GiB left (32 GiB of 40 GiB in use)" in out
        assert "would fit now: 1 GPU with 8 GiB, 30% cores on node-t4 (GPU 0)" in out


def test_the_readme_shows_the_first_plan_lines_output_as_it_is_printed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    text = README.read_text(encoding="utf-8")
    section = text[text.index('## Ask "why does my pod not fit?"') :]
    shown = re.search(r"^```text\n(.*?)^```", section, re.MULTILINE | re.DOTALL)
    assert shown, "the why-not section shows no output"
    monkeypatch.chdir(ROOT)
    _, *argv = shlex.split(plan_lines()[0])
    assert main(argv) == 1
    assert capsys.readouterr().out == shown.group(1)
