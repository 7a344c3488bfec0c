"""One pass of some work every few seconds on a daemon thread, until stopped.

The control plane's DRA preemptor and the node monitor's idle check both run so: a pass
that fails is logged (``expected`` errors, such as an unreachable API server, in one line;
anything else with its traceback) and the next pass comes as planned, since one bad pass
must not end a loop nothing would restart.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable


class Periodic:
    def __init__(
        self,
        name: str,
        every_s: float,
        step: Callable[[], None],
        log: logging.Logger,
        what: str,
        expected: tuple[type[Exception], ...] = (),
    ) -> None:
        """``step`` every ``every_s`` seconds on the thread ``name``; ``what`` is the log
        line of a failed pass."""
        self._every_s = every_s
        self._step = step
        self._log = log
        self._what = what
        self._expected = expected
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self._every_s):
            try:
                self._step()
            except self._expected as exc:
                self._log.warning(self._what, extra={"error": str(exc)})
            except Exception:  # one bad pass must not end the loop
                self._log.exception(self._what)
