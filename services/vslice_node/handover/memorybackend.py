"""Which memory backend a node uses: the driver's own per-cgroup limit, or the shim alone.

Chosen once, when the node agent starts (``handover.memory_backend``, docs/shim.md "Two memory
backends"):

- ``shim``: the shim alone keeps each container at its slice, as on every node before;
- ``driver``: the driver keeps it too, with a hard limit per container cgroup that the runtime
  sets through NVML (:mod:`.memoryhook`); the shim stays preloaded for the compute limit, the
  views and the region the monitor reads. A program that goes around the shim still meets the
  driver's limit;
- ``auto`` (the default): ``driver`` where the node runs cgroup v2 and the hook's probe finds
  ``nvmlDeviceSetMemoryLimits_v1`` answering (driver R615+), ``shim`` elsewhere, saying why.

A node told ``driver`` that cannot do it does not start (:class:`MemoryBackendUnavailable`, naming
the reason and what would work): an operator who asked for the stronger limit must not get the
weaker one silently. The probe is the hook program itself (``vslice-memory-limit probe``), so
the check runs the same NVML calls, in the same environment, as the hook at container start.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from vslice_core.errors import VsliceError

Backend = Literal["shim", "driver"]
Setting = Literal["auto", "shim", "driver"]
PROBE_TIMEOUT_S = 20.0
UNAVAILABLE_EXIT = 3  # vslice-memory-limit probe: the driver cannot set limits (docs/shim.md)


class MemoryBackendUnavailable(VsliceError):
    """``handover.memory_backend: driver`` on a node that cannot enforce it."""


@dataclass(frozen=True)
class ProbeAnswer:
    available: bool
    line: str  # the probe's own words, e.g. "available: driver 615.20, 2 GPU(s)"


@dataclass(frozen=True)
class BackendChoice:
    backend: Backend
    reason: str

    def as_dict(self) -> dict[str, str]:
        return {"backend": self.backend, "reason": self.reason}


def probe_driver(
    program: str, nvml_library: str, env: Mapping[str, str], timeout_s: float = PROBE_TIMEOUT_S
) -> ProbeAnswer:
    """Run ``<program> probe --nvml <nvml_library>`` with ``env`` over a minimal environment."""
    if not os.access(program, os.X_OK):
        return ProbeAnswer(False, f"the memory-limit hook {program} is missing or not executable")
    command = [program, "probe", "--nvml", nvml_library]
    environment = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env}
    try:
        done = subprocess.run(
            command, env=environment, capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired:
        return ProbeAnswer(False, f"{program} probe did not answer within {timeout_s:.0f} s")
    except OSError as exc:
        return ProbeAnswer(False, f"cannot run {program}: {exc.strerror}")
    line = (done.stdout.strip() or done.stderr.strip()).splitlines()
    said = line[-1] if line else ""
    if done.returncode == 0:
        return ProbeAnswer(True, said or "available")
    if done.returncode == UNAVAILABLE_EXIT:
        return ProbeAnswer(False, said or "unavailable")
    return ProbeAnswer(False, f"{program} probe failed (exit {done.returncode}): {said}")


def runs_cgroup_v2(root: Path = Path("/sys/fs/cgroup")) -> bool:
    """Whether the unified hierarchy is mounted at ``root`` (its root has cgroup.controllers)."""
    return (root / "cgroup.controllers").is_file()


def choose_backend(
    setting: Setting,
    injection: str,
    cgroup_v2: bool,
    probe: Callable[[], ProbeAnswer],
) -> BackendChoice:
    """The node's backend and why; raises MemoryBackendUnavailable where ``driver`` was asked
    for and cannot be had. ``probe`` is only called where its answer decides."""
    if setting == "shim":
        return BackendChoice("shim", "handover.memory_backend is shim")
    if injection != "cdi":
        # The settings refuse driver with mounts; auto falls back.
        return BackendChoice(
            "shim", "handover.injection is mounts: the hook reaches the runtime only through CDI"
        )
    if setting == "auto" and not cgroup_v2:
        return BackendChoice(
            "shim", "the node runs cgroup v1; the driver limits memory per cgroup v2 only"
        )
    answer = probe()
    if not answer.available:
        if setting == "driver":
            raise MemoryBackendUnavailable(
                f"handover.memory_backend is driver, but {answer.line}; set it to auto (the "
                "driver where it can, the shim elsewhere) or shim"
            )
        return BackendChoice("shim", answer.line)
    if setting == "driver" and not cgroup_v2:
        return BackendChoice(
            "driver",
            f"set by handover.memory_backend on a cgroup v1 node ({answer.line}); only a "
            "driver that accepts cgroup v1 paths, such as the lab's fake, enforces it there",
        )
    return BackendChoice("driver", answer.line)
