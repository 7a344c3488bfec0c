"""Log calls never pass a field that ``logging`` reserves: ``extra={"name": ...}`` raises
KeyError ("Attempt to overwrite 'name' in LogRecord") when the record is made, which happens
only at a level that is enabled, so a unit test at the default level never sees it and a
running service fails the request."""

from __future__ import annotations

import ast
import logging
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RESERVED = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


def test_no_log_call_passes_a_reserved_field() -> None:
    found = []
    for root in ("services", "sdk/vslice"):
        for path in sorted((REPO / root).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            for node in ast.walk(tree):
                if not isinstance(node, ast.Call):
                    continue
                for keyword in node.keywords:
                    if keyword.arg != "extra" or not isinstance(keyword.value, ast.Dict):
                        continue
                    for key in keyword.value.keys:
                        if isinstance(key, ast.Constant) and key.value in RESERVED:
                            found.append(f"{path.relative_to(REPO)}:{key.lineno}: {key.value!r}")
    assert found == [], "log fields that logging reserves:\n" + "\n".join(found)
