"""The filter round-trip benchmark (benchmarks/extender_calls.py) runs and prints its line.

It is the measurement behind the extender's HTTP and filter figures in docs/performance.md;
a small run here keeps it working: every call must fit (the script exits non-zero when one
does not) and the printed figures must be numbers.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_small_run_fits_every_call_and_prints_its_figures() -> None:
    script = str(ROOT / "benchmarks" / "extender_calls.py")
    run = subprocess.run(
        [sys.executable, script, "--nodes", "40", "--calls", "60", "--warmup", "10"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    last = run.stdout.strip().splitlines()[-1]
    match = re.fullmatch(
        r"extender_calls nodes=40 candidates=40 calls=60 p50_ms=([\d.]+) p99_ms=([\d.]+) "
        r"server_cpu_ms=([\d.]+) handler_ms=([\d.]+)",
        last,
    )
    assert match is not None, last
    p50, p99, _, handler = map(float, match.groups())
    assert 0 < p50 <= p99 and handler > 0
    assert "60 filter calls, 40 nodes, 40 candidates a call, 60 fitted" in run.stderr
