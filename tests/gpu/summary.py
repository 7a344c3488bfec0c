"""One line per GPU check from pytest's JUnit XML, for ``tests/gpu/run.sh``.

Whoever runs the checks on a lent GPU machine reads the end of the output only; a line per
check (``PASS``, ``FAIL`` with the first line of the failure, ``SKIP`` with its reason, and the
seconds it took) says what held on the real driver without scrolling through pytest's log.

Usage: ``python tests/gpu/summary.py RESULTS.xml``; exits 1 when a check failed
or the XML is missing (the run itself then failed before any check), 0 otherwise.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path


def first_line(text: str | None) -> str:
    return (text or "").strip().splitlines()[0] if (text or "").strip() else ""


def lines(xml_text: str) -> tuple[list[str], bool]:
    """The summary lines and whether any check failed."""
    root = ElementTree.fromstring(xml_text)
    found: list[str] = []
    failed = False
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}".lstrip(":")
        seconds = float(case.get("time") or 0)
        problem = case.find("failure")
        if problem is None:
            problem = case.find("error")
        skipped = case.find("skipped")
        if problem is not None:
            failed = True
            verdict = f"FAIL {first_line(problem.get('message')) or problem.tag}"
        elif skipped is not None:
            verdict = f"SKIP {first_line(skipped.get('message'))}"
        else:
            verdict = "PASS"
        found.append(f"gpu-check {name}: {verdict} ({seconds:.1f} s)")
    return found, failed


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: summary.py RESULTS.xml", file=sys.stderr)
        return 2
    path = Path(argv[0])
    if not path.is_file():
        print(f"gpu-check: no results at {path}: the checks did not run", file=sys.stderr)
        return 1
    found, failed = lines(path.read_text())
    for line in found:
        print(line)
    if not found:
        print(f"gpu-check: {path} lists no check", file=sys.stderr)
        return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
