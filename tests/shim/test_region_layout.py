"""The region is an ABI: C (offsetof/sizeof), Python (cffi) and docs/shim-region.md agree."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from conftest import ROOT
from vslice_shim import abi

# The documented layout (docs/shim-region.md): struct -> field -> offset.
DOCUMENTED = {
    "vs_region_header": {
        "magic": 0, "version_major": 8, "version_minor": 12, "header_size": 16,
        "device_size": 20, "slot_size": 24, "max_devices": 28, "max_slots": 32,
        "device_count": 36, "slot_hwm": 40, "lock_ready": 44, "created_ns": 48,
        "recoveries": 56, "reserved0": 64, "lock": 128, "reserved1": 192,
    },
    "vs_region_device": {
        "uuid": 0, "mem_limit": 16, "mem_used": 24, "sm_limit": 32, "index": 36,
        "tokens_ns": 40, "refill_ns": 48, "busy_ns": 56, "throttled_ns": 64, "launches": 72,
        "reserved": 80,
    },
    "vs_region_slot": {
        "pid": 0, "flags": 4, "start_time": 8, "last_seen_ns": 16, "used": 24, "ctx": 152,
        "reserved": 280,
    },
}  # fmt: skip
SIZES = {"vs_region_header": 256, "vs_region_device": 128, "vs_region_slot": 320}


def c_layout(build: Path) -> dict[str, int]:
    out = subprocess.run(
        [str(build / "tests" / "layout")], capture_output=True, text=True, check=True
    ).stdout
    return {key: int(value) for key, value in (line.split() for line in out.splitlines())}


def test_c_and_python_lay_out_the_region_identically(shim_build: Path) -> None:
    c = c_layout(shim_build)
    python = abi.layout()
    assert {k: v for k, v in c.items() if k in python} == python
    assert set(python) <= set(c)


def test_the_layout_is_the_documented_one() -> None:
    python = abi.layout()
    for struct_name, fields in DOCUMENTED.items():
        assert python[struct_name] == SIZES[struct_name]
        for name, offset in fields.items():
            assert python[f"{struct_name}.{name}"] == offset, f"{struct_name}.{name}"
    assert abi.REGION_SIZE == 256 + 16 * 128 + 1024 * 320


def test_the_document_tables_match_the_layout() -> None:
    text = (ROOT / "docs" / "shim-region.md").read_text()
    rows = re.findall(r"^\| (\d+) \| \S+ \| `(\w+)` \|", text, flags=re.MULTILINE)
    documented = {(name, int(offset)) for offset, name in rows}
    for fields in DOCUMENTED.values():
        for name, offset in fields.items():
            assert (name, offset) in documented, name


def test_magic_and_version_constants_agree(shim_build: Path) -> None:
    c = c_layout(shim_build)
    assert c["magic"] == abi.MAGIC
    assert c["version_major"] == abi.VERSION_MAJOR
    assert abi.MAGIC.to_bytes(8, "little") == b"VSLICERG"
