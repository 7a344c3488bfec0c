"""With no limit and no region the shim is a transparent passthrough."""

from __future__ import annotations

from conftest import Probe

COMMANDS = (
    "ctx:0",
    "alloc:3g",
    "info",
    "total:0",
    "vmm:64m",
    "array:1024:1024",
    "procaddr:1g",
    "procaddr_linked:1g",
    "nvml",
    "freeall",
    "info",
    "alloc:20g",
)


def test_without_limits_programs_see_exactly_the_driver(probe: Probe) -> None:
    plain = probe.run(*COMMANDS, shim=False, FAKE_CUDA_STATE=str(probe.tmp / "a"))
    shimmed = probe.run(*COMMANDS, FAKE_CUDA_STATE=str(probe.tmp / "b"))
    assert shimmed.stdout == plain.stdout
    assert shimmed.stderr == ""
    assert shimmed.code("alloc:20g") == 2  # the fake card's own 16 GiB still apply


def test_without_limits_no_region_file_is_created(probe: Probe) -> None:
    probe.run("ctx:0", "alloc:1m", "kernels:0:100")
    assert list(probe.tmp.iterdir()) == [probe.fake_state]
