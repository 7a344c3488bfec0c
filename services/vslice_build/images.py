"""Container images without a registry: OCI image archives written here, from host files.

A real lab node has no registry to pull from, so the lab writes the images it needs itself as
OCI image layouts in a tar file (``oci-layout``, ``index.json``, ``blobs/sha256/...``: one
gzipped layer, a linux/amd64 config whose ``diff_ids`` is the digest of the uncompressed layer,
and the manifest) and imports them into containerd (``ctr -n k8s.io images import``). The
index carries ``io.containerd.image.name``, so the import names the image; pods use
``imagePullPolicy: Never`` (or an image name that is already present, which the kubelet does
not pull under ``IfNotPresent``).

Archives are byte-for-byte reproducible (fixed mtimes, owners and gzip header), so the same
inputs give the same digests and a re-import changes nothing.

The two images the lab needs:

- :data:`PAUSE_IMAGE`, the sandbox (``pause.c`` beside this file, linked statically: it waits
  for SIGTERM/SIGINT and reaps children);
- :data:`SMOKE_IMAGE`, ``vslice-smoke`` (built by ``make -C shim``) with the host's glibc
  (the shim is preloaded from the host, so the image must carry a C library it can run on) and
  busybox as ``/bin/sh`` and friends, so tests and users can look around in a container.

:mod:`vslice_build.workload` writes a third, the Python workload image, the same way.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import shutil
import subprocess
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from vslice_core.errors import InvalidRequest, VsliceError

PAUSE_IMAGE = "vslice.local/pause:1"
SMOKE_IMAGE = "vslice.local/smoke:1"
PAUSE_SOURCE = Path(__file__).with_name("pause.c")
BUSYBOX = Path("/bin/busybox")
BUSYBOX_APPLETS = ("sh", "cat", "ls", "env", "sleep", "echo", "grep", "head", "tail", "true")
LIBRARY_DIR = PurePosixPath("/lib/x86_64-linux-gnu")
# Libraries a preloaded shim and a dlopen()ed driver ask for besides what the program links.
EXTRA_LIBRARIES = ("libdl.so.2", "libpthread.so.0", "librt.so.1", "libm.so.6")

MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"


class ImageError(VsliceError):
    """An image could not be built; the message names the file or tool."""


@dataclass(frozen=True)
class ImageFile:
    """One entry of the image's single layer: a file copied from the host, bytes, or a link."""

    path: str
    source: Path | None = None
    data: bytes | None = None
    link: str | None = None
    mode: int = 0o755


@dataclass(frozen=True)
class ImageSpec:
    name: str
    files: Sequence[ImageFile]
    entrypoint: Sequence[str] = ()
    cmd: Sequence[str] = ()
    env: Sequence[str] = ("PATH=/usr/local/bin:/usr/bin:/bin",)
    labels: Mapping[str, str] = field(default_factory=dict)


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _layer(files: Sequence[ImageFile]) -> bytes:
    """The uncompressed layer tar: parent directories first, entries sorted by path."""
    entries: dict[str, ImageFile | None] = {}
    for item in files:
        path = PurePosixPath("/", item.path)
        if path == PurePosixPath("/"):
            raise InvalidRequest("image file path must not be '/'", field="path", value=item.path)
        for parent in reversed(path.parents[:-1]):
            entries.setdefault(str(parent).lstrip("/"), None)
        entries[str(path).lstrip("/")] = item
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(entries):
            tar.addfile(*_tar_entry(name, entries[name]))
    return buffer.getvalue()


def _tar_entry(name: str, item: ImageFile | None) -> tuple[tarfile.TarInfo, io.BytesIO | None]:
    info = tarfile.TarInfo(name)
    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
    if item is None:
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        return info, None
    if item.link is not None:
        info.type, info.linkname, info.mode = tarfile.SYMTYPE, item.link, 0o777
        return info, None
    if item.data is not None:
        data = item.data
    elif item.source is not None:
        try:
            data = item.source.read_bytes()
        except OSError as error:
            raise ImageError(f"cannot read {item.source} for the image: {error.strerror}") from None
    else:
        raise InvalidRequest(
            f"image file {name!r} needs a source, data or link", field="path", value=name
        )
    info.size, info.mode = len(data), item.mode
    return info, io.BytesIO(data)


def _blob(tar: tarfile.TarFile, data: bytes) -> str:
    digest = _sha(data)
    info = tarfile.TarInfo(f"blobs/sha256/{digest.removeprefix('sha256:')}")
    info.size, info.mtime, info.mode = len(data), 0, 0o644
    tar.addfile(info, io.BytesIO(data))
    return digest


def _json(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def write_archive(spec: ImageSpec, out: Path) -> str:
    """Write ``spec`` as an OCI image archive at ``out``; returns the manifest digest."""
    layer = _layer(spec.files)
    compressed = gzip.compress(layer, compresslevel=6, mtime=0)
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Entrypoint": list(spec.entrypoint) or None,
            "Cmd": list(spec.cmd) or None,
            "Env": list(spec.env),
            "WorkingDir": "/",
            "Labels": dict(spec.labels) or None,
        },
        "rootfs": {"type": "layers", "diff_ids": [_sha(layer)]},
        "history": [{"created_by": "vslice lab (written from host files)"}],
    }
    config_bytes = _json(config)
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "config": {
            "mediaType": CONFIG_TYPE,
            "digest": _sha(config_bytes),
            "size": len(config_bytes),
        },
        "layers": [{"mediaType": LAYER_TYPE, "digest": _sha(compressed), "size": len(compressed)}],
    }
    manifest_bytes = _json(manifest)
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {
                "mediaType": MANIFEST_TYPE,
                "digest": _sha(manifest_bytes),
                "size": len(manifest_bytes),
                "platform": {"architecture": "amd64", "os": "linux"},
                "annotations": {
                    "io.containerd.image.name": spec.name,
                    "org.opencontainers.image.ref.name": spec.name.rpartition(":")[2],
                },
            }
        ],
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_suffix(out.suffix + ".partial")
    with tarfile.open(partial, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in (("oci-layout", _json({"imageLayoutVersion": "1.0.0"})),):
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tar.addfile(info, io.BytesIO(data))
        for data in (compressed, config_bytes, manifest_bytes):
            _blob(tar, data)
        data = _json(index)
        info = tarfile.TarInfo("index.json")
        info.size, info.mtime, info.mode = len(data), 0, 0o644
        tar.addfile(info, io.BytesIO(data))
    partial.replace(out)
    return _sha(manifest_bytes)


def shared_libraries(binary: Path) -> list[Path]:
    """The shared libraries ``binary`` loads on this host (from ``ldd``), real paths."""
    ldd = shutil.which("ldd")
    if ldd is None:
        raise ImageError("ldd not found: cannot collect the C library for the smoke image")
    result = subprocess.run([ldd, str(binary)], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ImageError(f"ldd {binary} failed: {result.stderr.strip() or result.stdout.strip()}")
    found = []
    for line in result.stdout.splitlines():
        parts = line.split()
        candidate = parts[2] if "=>" in parts and len(parts) > 2 else parts[0] if parts else ""
        if candidate.startswith("/"):
            found.append(Path(candidate))
    return found


def c_libraries(binaries: Sequence[Path]) -> list[ImageFile]:
    """Every shared library the binaries load on this host, plus those a preloaded shim and a
    ``dlopen``ed driver ask for, under the loader's default directory (and the loader's
    ``/lib64`` link)."""
    libraries: dict[str, Path] = {}
    for binary in binaries:
        for library in shared_libraries(binary):
            libraries.setdefault(library.name, library)
    for extra in EXTRA_LIBRARIES:
        host = Path(str(LIBRARY_DIR)) / extra
        if host.exists():
            libraries.setdefault(extra, host)
    files = [
        ImageFile(str(LIBRARY_DIR / name), source=path.resolve(), mode=0o755)
        for name, path in sorted(libraries.items())
    ]
    loader = next((path for name, path in libraries.items() if name.startswith("ld-linux")), None)
    if loader is not None:
        files.append(ImageFile(f"lib64/{loader.name}", link=str(LIBRARY_DIR / loader.name)))
    return files


def binary_spec(name: str, binary: Path) -> ImageSpec:
    """An image of one static binary at ``/usr/local/bin`` (the control plane's images: kubeadm's
    static pods run ``kube-apiserver``, ``etcd``, ... by name) and an empty /tmp, which etcd and
    the API server write to."""
    if not binary.is_file():
        raise ImageError(f"{binary} is missing: cannot write the image {name}")
    files = [
        ImageFile(f"usr/local/bin/{binary.name}", source=binary),
        ImageFile("tmp/.keep", data=b"", mode=0o644),
    ]
    return ImageSpec(name, files)


def pause_spec(binary: Path) -> ImageSpec:
    return ImageSpec(PAUSE_IMAGE, [ImageFile("pause", source=binary)], entrypoint=["/pause"])


def build_pause(out_dir: Path) -> Path:
    """Compile ``pause.c`` statically into ``out_dir`` (once per source change)."""
    source = PAUSE_SOURCE.read_bytes()
    binary = out_dir / f"pause-{hashlib.sha256(source).hexdigest()[:12]}"
    if binary.exists():
        return binary
    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        raise ImageError("no C compiler (gcc) to build the sandbox image; install build-essential")
    out_dir.mkdir(parents=True, exist_ok=True)
    partial = binary.with_suffix(".partial")
    command = [compiler, "-static", "-O2", "-s", "-o", str(partial), str(PAUSE_SOURCE)]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ImageError(
            f"building the sandbox image's pause program failed ({' '.join(command)}): "
            f"{result.stderr.strip()[-400:]} (is the static C library, libc6-dev, installed?)"
        )
    partial.replace(binary)
    return binary


def smoke_spec(smoke: Path, busybox: Path = BUSYBOX) -> ImageSpec:
    """``vslice-smoke`` with the host's glibc and busybox applets."""
    if not smoke.is_file():
        raise ImageError(f"{smoke} is missing: build it with `make -C shim`")
    if not busybox.is_file():
        raise ImageError(f"{busybox} is missing: install busybox-static")
    files = [
        ImageFile("usr/local/bin/vslice-smoke", source=smoke),
        ImageFile("bin/busybox", source=busybox),
    ]
    files += [ImageFile(f"bin/{name}", link="busybox") for name in BUSYBOX_APPLETS]
    files += c_libraries([smoke])
    return ImageSpec(
        SMOKE_IMAGE,
        files,
        entrypoint=["/usr/local/bin/vslice-smoke"],
        cmd=["memory"],
        env=("PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/"),
        labels={"io.vslice.image": "smoke"},
    )
