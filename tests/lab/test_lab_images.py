"""The lab's own images: OCI archives written from host files, without a registry."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
from vslice_build import images
from vslice_core.errors import InvalidRequest


def _members(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


def _blob(members: dict[str, bytes], digest: str) -> bytes:
    data = members[f"blobs/sha256/{digest.removeprefix('sha256:')}"]
    assert "sha256:" + hashlib.sha256(data).hexdigest() == digest  # content-addressed
    return data


def test_an_archive_is_an_oci_layout_whose_digests_and_diff_ids_match(tmp_path: Path) -> None:
    spec = images.ImageSpec(
        "vslice.local/test:1",
        [
            images.ImageFile("bin/hello", data=b"#!/bin/sh\necho hi\n"),
            images.ImageFile("bin/hi", link="hello"),
        ],
        entrypoint=["/bin/hello"],
    )
    digest = images.write_archive(spec, tmp_path / "test.tar")
    members = _members(tmp_path / "test.tar")
    assert json.loads(members["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    index = json.loads(members["index.json"])
    entry = index["manifests"][0]
    assert entry["digest"] == digest
    assert entry["annotations"]["io.containerd.image.name"] == "vslice.local/test:1"
    manifest = json.loads(_blob(members, digest))
    config = json.loads(_blob(members, manifest["config"]["digest"]))
    layer = _blob(members, manifest["layers"][0]["digest"])
    uncompressed = gzip.decompress(layer)
    assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(uncompressed).hexdigest()]
    assert config["config"]["Entrypoint"] == ["/bin/hello"]
    assert (config["architecture"], config["os"]) == ("amd64", "linux")
    with tarfile.open(fileobj=io.BytesIO(uncompressed)) as tar:
        entries = {m.name: m for m in tar.getmembers()}
    assert entries["bin"].isdir() and entries["bin/hello"].mode == 0o755
    assert entries["bin/hi"].issym() and entries["bin/hi"].linkname == "hello"


def test_the_same_inputs_give_the_same_bytes(tmp_path: Path) -> None:
    spec = images.ImageSpec("vslice.local/test:1", [images.ImageFile("a", data=b"x")])
    first = images.write_archive(spec, tmp_path / "one.tar")
    second = images.write_archive(spec, tmp_path / "two.tar")
    assert first == second
    assert (tmp_path / "one.tar").read_bytes() == (tmp_path / "two.tar").read_bytes()


def test_an_entry_without_content_is_refused_with_its_path(tmp_path: Path) -> None:
    spec = images.ImageSpec("vslice.local/test:1", [images.ImageFile("etc/empty")])
    with pytest.raises(InvalidRequest, match="etc/empty"):
        images.write_archive(spec, tmp_path / "bad.tar")


def test_a_missing_host_file_names_the_file(tmp_path: Path) -> None:
    spec = images.ImageSpec(
        "vslice.local/test:1", [images.ImageFile("x", source=tmp_path / "nope")]
    )
    with pytest.raises(images.ImageError, match="nope"):
        images.write_archive(spec, tmp_path / "bad.tar")


def _catches_sigterm(pid: int) -> bool:
    status = Path(f"/proc/{pid}/status").read_text()
    caught = next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(caught, 16) & (1 << (15 - 1)))


def test_the_sandbox_program_is_static_and_stops_on_sigterm(tmp_path: Path) -> None:
    binary = images.build_pause(tmp_path)
    headers = subprocess.run(
        ["readelf", "-l", str(binary)], capture_output=True, text=True, check=True
    ).stdout
    assert "INTERP" not in headers  # no dynamic loader: the image needs nothing else
    process = subprocess.Popen([str(binary)])
    deadline = time.monotonic() + 5
    while not _catches_sigterm(process.pid):  # its handler is installed (SigCgt bit 15)
        assert time.monotonic() < deadline
        time.sleep(0.01)
    process.terminate()
    assert process.wait(timeout=5) == 0


def test_the_smoke_image_carries_the_c_library_and_a_shell(tmp_path: Path) -> None:
    smoke = tmp_path / "vslice-smoke"
    smoke.write_bytes(Path("/bin/true").read_bytes())  # any dynamic glibc program will do here
    spec = images.smoke_spec(smoke)
    paths = {item.path for item in spec.files}
    assert "usr/local/bin/vslice-smoke" in paths and "bin/sh" in paths
    assert any(path.endswith("/libc.so.6") for path in paths)
    assert any(path.startswith("lib64/ld-linux") for path in paths)
    assert any(path.endswith("/libdl.so.2") for path in paths)  # the shim links it


def test_the_workload_image_carries_python_the_tools_and_their_c_libraries() -> None:
    from vslice_build import workload

    spec = workload.workload_spec()
    files = {item.path: item for item in spec.files}
    library = f"usr/local/lib/python{sys.version_info.major}.{sys.version_info.minor}"
    site = f"{library}/site-packages"
    for path in (
        "usr/local/bin/python3",
        f"{library}/os.py",
        f"{library}/json/__init__.py",
        f"{site}/pynvml.py",
        f"{site}/gpustat/__init__.py",
        f"{site}/nvitop/__init__.py",
        f"{site}/cuda/bindings/__init__.py",
        f"{site}/psutil/__init__.py",  # a requirement of both viewers, found from their metadata
        "usr/local/bin/gpustat",
        "usr/local/bin/nvitop",
        "bin/sh",
    ):
        assert path in files, path
    assert any(path.endswith("/libc.so.6") for path in files)
    assert any(path.endswith("/libdl.so.2") for path in files)  # cuda-pathfinder dlopens it
    # Nothing a workload does not need, and no byte code (Python writes none in the image).
    assert not [p for p in files if p.startswith(f"{library}/test/") or p.endswith(".pyc")]
    assert not [p for p in files if "/__pycache__/" in p or "/idlelib/" in p]
    launcher = files["usr/local/bin/gpustat"].data or b""
    assert launcher.startswith(b"#!/usr/local/bin/python3\n") and b"gpustat" in launcher
    assert "PYTHONDONTWRITEBYTECODE=1" in spec.env


def test_a_tool_missing_from_the_environment_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    from vslice_build import workload

    monkeypatch.setattr(workload, "TOOLS", ("gpustat", "no-such-viewer"))
    with pytest.raises(images.ImageError, match="no-such-viewer is not installed"):
        workload.workload_spec()


def test_the_workload_archive_is_written_once_per_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vslice_build import workload

    small = images.ImageSpec("vslice.local/python-tools:1", [images.ImageFile("a", data=b"1")])
    monkeypatch.setattr(workload, "workload_spec", lambda: small)
    first = workload.build_workload(tmp_path)
    written = first.stat().st_mtime_ns
    assert workload.build_workload(tmp_path) == first
    assert first.stat().st_mtime_ns == written  # not written again
    changed = images.ImageSpec(small.name, [images.ImageFile("a", data=b"2")])
    monkeypatch.setattr(workload, "workload_spec", lambda: changed)
    second = workload.build_workload(tmp_path)
    assert second != first and not first.exists()  # the stale archive is gone
