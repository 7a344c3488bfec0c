"""Waiting in the lab tests: poll a check until it answers, or fail naming what did not come."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import pytest

T = TypeVar("T")


def until(what: str, check: Callable[[], T | None], timeout: float = 60.0, pause: float = 0.3) -> T:
    """The check's first truthy answer; the test fails with ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout:.0f}s")
        time.sleep(pause)
