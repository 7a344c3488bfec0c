"""vslice's alert and recording rules, run by the real ``promtool`` (``promtool check rules`` and
``promtool test rules`` over tests/prometheus/rules_test.yaml).

promtool comes with Prometheus (``.ci/setup`` unpacks Debian's package into the cache); without
it these tests fail and say how to get it, so a CI machine that lost it cannot pass silently.
"""

from __future__ import annotations

import subprocess
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import yaml
from vslice_build import prometheus
from vslice_control.install import monitoring

CASES = Path(__file__).parents[1] / "prometheus" / "rules_test.yaml"


@pytest.fixture(scope="module")
def promtool() -> Path:
    found = prometheus.locate()
    if found is None:
        pytest.fail(f"promtool not found: {prometheus.HOW_TO_GET}")
    return found.promtool


def _rules_file() -> Path:
    return Path(str(resources.files("vslice_control.install") / monitoring.RULES_FILE))


def test_rules_are_valid(promtool: Path) -> None:
    result = subprocess.run(
        [str(promtool), "check", "rules", str(_rules_file())],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_case(tmp_path: Path) -> None:
    alerts = {
        rule["alert"]
        for group in monitoring.rules()["groups"]
        for rule in group["rules"]
        if "alert" in rule
    }
    cases = yaml.safe_load(CASES.read_text())
    tested = {
        check["alertname"]
        for case in cases["tests"]
        for check in case.get("alert_rule_test", [])
        if check.get("exp_alerts")
    }
    assert alerts - tested == set(), "alerts without a firing case"


def _run_cases(
    promtool: Path, cases: dict[str, Any], path: Path
) -> subprocess.CompletedProcess[str]:
    """``promtool test rules`` over ``cases``, pointed at the packaged rule file."""
    cases["rule_files"] = [str(_rules_file())]
    path.write_text(yaml.safe_dump(cases, sort_keys=False))
    return subprocess.run(
        [str(promtool), "test", "rules", str(path)], capture_output=True, text=True, check=False
    )


def test_rule_cases_pass(promtool: Path, tmp_path: Path) -> None:
    result = _run_cases(promtool, yaml.safe_load(CASES.read_text()), tmp_path / "rules_test.yaml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_broken_case_fails(promtool: Path, tmp_path: Path) -> None:
    """The harness can fail: a case that expects an alert that cannot fire is reported."""
    cases = yaml.safe_load(CASES.read_text())
    first = cases["tests"][0]
    first["input_series"][0]["values"] = "0x5"  # the over-booked GPU is no longer over-booked
    cases["tests"] = [first]
    result = _run_cases(promtool, cases, tmp_path / "broken_test.yaml")
    assert result.returncode != 0
    assert "VsliceGpuOverbooked" in result.stdout + result.stderr
