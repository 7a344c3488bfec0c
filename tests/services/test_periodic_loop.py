"""The periodic loop the DRA preemptor and the idle check run on: a failing pass is logged and
the next one comes; stop ends it."""

from __future__ import annotations

import logging
import threading

import pytest
from vslice_core.errors import ClusterError
from vslice_serving.periodic import Periodic


def test_a_failing_pass_is_logged_and_the_loop_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    passes: list[int] = []
    third = threading.Event()
    failures = [ClusterError("the API server is down"), RuntimeError("a bug")]

    def step() -> None:
        passes.append(len(passes))
        if failures:
            raise failures.pop(0)
        third.set()

    log = logging.getLogger("vslice.test.periodic")
    loop = Periodic("test-loop", 0.01, step, log, "pass failed", expected=(ClusterError,))
    with caplog.at_level(logging.WARNING, logger=log.name):
        loop.start()
        assert third.wait(5), "the loop ended after a failing pass"
        loop.stop()
    expected, unexpected = caplog.records[:2]
    assert (expected.levelno, expected.exc_info) == (logging.WARNING, None)
    assert expected.__dict__["error"] == "the API server is down"
    assert unexpected.levelno == logging.ERROR and unexpected.exc_info is not None
    count = len(passes)
    third.clear()
    assert not third.wait(0.1) and len(passes) == count  # stopped: no pass after stop()
