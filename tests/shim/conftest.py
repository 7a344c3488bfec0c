"""Fixtures for the shim tests: build the shim, the fake driver and the C test programs once,
then run the probe program (tests/probe.c) or vslice-smoke with or without the shim preloaded."""

from __future__ import annotations

import os
import struct
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHIM = ROOT / "shim"
BUILD = SHIM / "build"
GIB = 1 << 30
MIB = 1 << 20


@pytest.fixture(scope="session")
def shim_build() -> Path:
    """`make -C shim tests`: libvslice.so, the fake driver and the test programs."""
    result = subprocess.run(
        ["make", "-C", str(SHIM), "-j2", "tests"], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return BUILD


@dataclass
class Outcome:
    """What one probe run printed: one line per command, "<command> <CUresult> [k=v ...]"."""

    returncode: int
    stdout: str
    stderr: str
    lines: list[str] = field(init=False)

    def __post_init__(self) -> None:
        self.lines = self.stdout.splitlines()

    def line(self, command: str, nth: int = 0) -> list[str]:
        matches = [line.split() for line in self.lines if line.split()[:1] == [command]]
        assert len(matches) > nth, f"no output for {command!r}: {self.stdout}\n{self.stderr}"
        return matches[nth]

    def code(self, command: str, nth: int = 0) -> int:
        return int(self.line(command, nth)[1])

    def values(self, command: str, nth: int = 0) -> dict[str, int]:
        fields = self.line(command, nth)[2:]
        return {k: int(v) for k, v in (item.split("=", 1) for item in fields)}

    def nvml(self, index: int) -> dict[str, int]:
        for nth in range(len(self.lines)):
            values = self.values("nvml", nth)
            if values["index"] == index:
                return values
        raise AssertionError(f"no nvml line for device {index}")


@dataclass
class Probe:
    """Runs build/tests/probe against the fake driver, with the shim preloaded or not."""

    build: Path
    tmp: Path

    @property
    def region(self) -> Path:
        return self.tmp / "region"

    @property
    def fake_state(self) -> Path:
        return self.tmp / "fake-gpus"

    def env(self, shim: bool = True, **extra: str) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(
                ("CUDA_", "VSLICE_", "FAKE_CUDA_", "FAKE_NVIDIA_", "NVIDIA_VISIBLE_", "LD_PRELOAD")
            )
        }
        env["LD_LIBRARY_PATH"] = str(self.build / "fake")
        env["FAKE_CUDA_STATE"] = str(self.fake_state)
        if shim:
            env["LD_PRELOAD"] = str(self.build / "libvslice.so")
        env.update(extra)
        return env

    def run(self, *commands: str, shim: bool = True, timeout: float = 60, **env: str) -> Outcome:
        result = subprocess.run(
            [str(self.build / "tests" / "probe"), *commands],
            env=self.env(shim, **env),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        return Outcome(result.returncode, result.stdout, result.stderr)

    def start(self, *commands: str, shim: bool = True, **env: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [str(self.build / "tests" / "probe"), *commands],
            env=self.env(shim, **env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def hold(self, *commands: str, shim: bool = True, **env: str) -> subprocess.Popen[str]:
        """Runs the commands, then "hold": returns once the probe printed "ready" (what it
        took stays taken until the caller kills it)."""
        holder = self.start(*commands, "hold", shim=shim, **env)
        assert holder.stdout is not None
        for line in holder.stdout:
            if line.strip() == "ready":
                return holder
        holder.wait()
        raise AssertionError(f"holder ended early: {holder.stderr.read() if holder.stderr else ''}")


@pytest.fixture
def probe(shim_build: Path, tmp_path: Path) -> Iterator[Probe]:
    yield Probe(shim_build, tmp_path)


@dataclass
class Report:
    """What one vslice-smoke run printed: its first line, then key=value lines."""

    returncode: int
    stdout: str
    stderr: str
    first: str = field(init=False)
    values: dict[str, str] = field(init=False)

    def __post_init__(self) -> None:
        lines = self.stdout.splitlines()
        self.first = lines[0] if lines else ""
        self.values = dict(line.split("=", 1) for line in lines[1:] if "=" in line)

    def __getitem__(self, key: str) -> str:
        assert key in self.values, f"no {key!r} in:\n{self.stdout}\n{self.stderr}"
        return self.values[key]

    def number(self, key: str) -> float:
        return float(self[key])


@dataclass
class Smoke:
    """Runs build/smoke/vslice-smoke as a container would, on the fake driver (probe's env)."""

    probe: Probe

    @property
    def binary(self) -> str:
        return str(self.probe.build / "smoke" / "vslice-smoke")

    def run(self, *args: str, shim: bool = True, timeout: float = 60, **env: str) -> Report:
        result = subprocess.run(
            [self.binary, *args],
            env=self.probe.env(shim, **env),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        return Report(result.returncode, result.stdout, result.stderr)

    def start(self, *args: str, shim: bool = True, **env: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [self.binary, *args],
            env=self.probe.env(shim, **env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )


@pytest.fixture
def smoke(probe: Probe) -> Smoke:
    return Smoke(probe)


# The fake driver's shared state (shim/fake/device.h): a 64-byte header, then per device a
# 64-byte record followed by a ring of (start_ns, end_ns) intervals on the device timeline.
_FAKE_HEADER = 64
_FAKE_RING = 65536
_FAKE_DEVICE = 64 + _FAKE_RING * 16


def busy_fraction(state: Path, device: int, start_ns: int, end_ns: int) -> float:
    """Share of [start_ns, end_ns) during which the fake device was running kernels."""
    data = state.read_bytes()
    base = _FAKE_HEADER + device * _FAKE_DEVICE
    (head,) = struct.unpack_from("<Q", data, base + 24)
    assert head <= _FAKE_RING, "the timeline ring wrapped; use longer kernels"
    busy = 0
    for i in range(head):
        start, end = struct.unpack_from("<QQ", data, base + 64 + 16 * i)
        busy += max(0, min(end, end_ns) - max(start, start_ns))
    return busy / (end_ns - start_ns)
