"""Starting and stopping the lab's component processes, by pid.

Each component runs in its own session (so it outlives ``vslice lab up`` and a terminal's
Ctrl-C does not reach it), with stdout and stderr appended to its log file. A process is
recorded with its pid *and* its kernel start time, so a later ``down`` never signals an
unrelated process that happens to reuse the pid after a reboot or crash.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ProcessRecord:
    """A started component: enough to find it again and to stop it."""

    name: str
    pid: int
    start_ticks: int
    log: str
    argv: tuple[str, ...] = ()
    """What was started, so ``restart`` can start the same again."""
    env: tuple[tuple[str, str], ...] = ()
    """The component's own environment on top of the lab's."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ProcessRecord:
        return cls(
            name=str(data["name"]),
            pid=int(data["pid"]),
            start_ticks=int(data["start_ticks"]),
            log=str(data["log"]),
            argv=tuple(str(a) for a in data.get("argv", ())),
            env=tuple((str(k), str(v)) for k, v in data.get("env", ())),
        )


def _stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks) of a pid, or None if there is no such pid."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name (field 2) may hold spaces and parentheses; fields after it are fixed.
    fields = raw[raw.rindex(")") + 2 :].split()
    return fields[0], int(fields[19])


def _reap(pid: int) -> None:
    """Collect the exit status if the process is our own child (else init reaps it)."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def start(
    name: str,
    argv: Sequence[str],
    log: Path,
    env: Mapping[str, str] | None = None,
    own_env: Mapping[str, str] | None = None,
) -> ProcessRecord:
    """Start ``argv`` in a new session, logging to ``log``; raises OSError if it cannot exec.

    ``own_env`` (the component's additions to ``env``) is recorded for a later restart."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        out.write(f"\n==> {time.strftime('%H:%M:%S')} starting: {' '.join(argv)}\n".encode())
        out.flush()
        process = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            start_new_session=True,
        )
    stat = _stat(process.pid)
    ticks = stat[1] if stat else 0
    return ProcessRecord(
        name=name,
        pid=process.pid,
        start_ticks=ticks,
        log=str(log),
        argv=tuple(argv),
        env=tuple(sorted((own_env or {}).items())),
    )


def alive(record: ProcessRecord) -> bool:
    """True while the recorded process (same pid, same start time) runs and is not a zombie."""
    _reap(record.pid)
    stat = _stat(record.pid)
    return stat is not None and stat[0] != "Z" and stat[1] == record.start_ticks


def stop(record: ProcessRecord, timeout: float = 10.0) -> bool:
    """SIGTERM the process's group, SIGKILL after ``timeout``; True if it was running."""
    if not alive(record):
        return False
    _signal_group(record.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(record):
            return True
        time.sleep(0.05)
    _signal_group(record.pid, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while alive(record) and time.monotonic() < deadline:
        time.sleep(0.05)
    return True


def kill(record: ProcessRecord, timeout: float = 5.0) -> None:
    """SIGKILL the process's group at once (a crash, for tests) and wait until it is gone."""
    _signal_group(record.pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while alive(record) and time.monotonic() < deadline:
        time.sleep(0.05)


def _signal_group(pid: int, sig: signal.Signals) -> None:
    # The component leads its own session/group, so this also reaches any children it forked.
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        return
    except PermissionError:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def tail(log: Path | str, lines: int = 15) -> str:
    """The last lines the latest run wrote to a log file ('' if it does not exist)."""
    try:
        text = Path(log).read_text(errors="replace")
    except FileNotFoundError:
        return ""
    latest = text.rsplit("\n==> ", 1)[-1]
    return "\n".join(latest.rstrip().splitlines()[1:][-lines:])
