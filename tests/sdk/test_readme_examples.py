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
    assert (status, err) == (0, ""), line
    # The example pod fits: on the T4 node of the cluster file (binpack takes the smallest GPU
    # that holds it, docs/placement.md), on the A100 node of the dump, which has no other.
    assert "fits on node-t4" in out or "fits on node-a100" in out or '"fits": true' in out
