"""One hook table drives exports, dlsym() and cuGetProcAddress: they cannot drift apart."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from conftest import SHIM, Probe

# Entry points the fake driver does not implement (a real driver has them).
NOT_IN_FAKE_DRIVER: set[str] = set()


def hooked_names() -> list[str]:
    text = (SHIM / "src" / "hooks.def").read_text()
    return re.findall(r"^VS_HOOK\(\w+, (\w+),", text, flags=re.MULTILINE)


HOOKS_DEF = Path(__file__).resolve().parents[2] / "shim" / "src" / "hooks.def"


def test_only_the_hooks_are_exported(shim_build: Path) -> None:
    out = subprocess.run(
        ["nm", "-D", "--defined-only", str(shim_build / "libvslice.so")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    exported = {line.split()[-1] for line in out.splitlines()}
    loader = set(re.findall(r"^VS_LOADER\((\w+)\)", HOOKS_DEF.read_text(), re.M))
    assert loader == {"dlsym", "dlvsym", "dlmopen"}
    assert exported == set(hooked_names()) | loader


def test_every_lookup_path_returns_the_hook(probe: Probe) -> None:
    result = subprocess.run(
        [str(probe.build / "tests" / "hooks")],
        env=probe.env(),
        capture_output=True,
        text=True,
        check=True,
    )
    rows = {line.split()[0]: line.split()[1:] for line in result.stdout.splitlines()}
    assert rows.pop("unhooked:cuMemcpyHtoD") == ["ok"]
    assert list(rows) == hooked_names()
    for name, (export, via_dlsym, via_procaddr) in rows.items():
        assert export == "ok", name
        if name in NOT_IN_FAKE_DRIVER:
            assert via_dlsym == via_procaddr == "absent", name
        elif name.startswith("nvml"):
            assert via_dlsym == "ok", name
        else:
            assert (via_dlsym, via_procaddr) == ("ok", "ok"), name


def test_another_interposer_using_rtld_next_still_works(probe: Probe) -> None:
    preload = f"{probe.build / 'libvslice.so'}:{probe.build / 'tests' / 'libnext_wrapper.so'}"
    out = probe.run("version", LD_PRELOAD=preload, CUDA_DEVICE_MEMORY_LIMIT="1g", timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.values("version") == {"value": 12081}  # the fake's 12080, plus the wrapper's 1
