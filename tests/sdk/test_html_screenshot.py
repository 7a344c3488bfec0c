"""The notebook HTML, rendered once by a real browser (headless Chromium).

The screenshot is saved to test-artifacts/sdk-views.png for people to look at; the test
fails if Chromium fails, if the PNG is missing or empty, or if the picture is blank.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest
from vslice.plans import plan_manifest, slice_manifest
from vslice.slices import Slice
from vslice.snapshot import ClusterSnapshot
from vslice.tables import AllocationTable, Placement

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def _browser() -> str:
    for name in BROWSERS:
        if found := shutil.which(name):
            return found
    pytest.fail("headless Chromium is not installed (CI installs it: .ci/setup.d/50-sdk.sh)")


def _placement(snapshot: ClusterSnapshot) -> Placement:
    rows = AllocationTable(r for r in snapshot.allocations() if r.pod == "train")
    return Placement("team-a", "train", "node-a", rows)


def _page(snapshot: ClusterSnapshot) -> str:
    fits = Slice("30Gi", cores=30)
    too_big = Slice("70Gi", cores=30, gpus=2)
    parts = [
        snapshot.gpus()._repr_html_(),
        snapshot.allocations()._repr_html_(),
        plan_manifest(snapshot, slice_manifest(fits), slice=fits)._repr_html_(),
        plan_manifest(snapshot, slice_manifest(too_big), slice=too_big)._repr_html_(),
        _placement(snapshot)._repr_html_(),
    ]
    body = "<hr>".join(parts)
    return f"<!doctype html><html><head><meta charset='utf-8'></head><body>{body}</body></html>"


def _png_pixels_vary(png: bytes) -> bool:
    """True when the decoded image has more than one distinct row (something was drawn)."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG file"
    pos, data, width, channels = 8, b"", 0, 4
    while pos < len(png):
        length, kind = struct.unpack(">I4s", png[pos : pos + 8])
        chunk = png[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width = struct.unpack(">I", chunk[:4])[0]
            channels = {0: 1, 2: 3, 4: 2, 6: 4}[chunk[9]]  # 8-bit grey, RGB, grey+alpha, RGBA
        elif kind == b"IDAT":
            data += chunk
        pos += 12 + length
    raw = zlib.decompress(data)
    stride = 1 + width * channels  # a filter byte, then the pixels of one row
    rows = {raw[i + 1 : i + stride] for i in range(0, len(raw), stride)}
    return len(rows) > 10


def test_the_html_views_render_in_headless_chromium(
    snapshot: ClusterSnapshot, tmp_path: Path
) -> None:
    page = tmp_path / "views.html"
    page.write_text(_page(snapshot), encoding="utf-8")
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "sdk-views.png"
    shot.unlink(missing_ok=True)
    result = subprocess.run(
        [
            _browser(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            f"--user-data-dir={tmp_path / 'profile'}",
            f"--screenshot={shot}",
            "--window-size=1200,1500",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert shot.is_file() and shot.stat().st_size > 1000, result.stderr[-2000:]
    assert _png_pixels_vary(shot.read_bytes()), "the screenshot is blank"
