"""The Python workload image: what data scientists run in a slice, without a registry.

``vslice.local/python-tools:1`` holds a Python interpreter with its standard library and,
from PyPI, NVIDIA's driver bindings (``cuda-bindings``), NVML bindings (``nvidia-ml-py``) and
the process viewers ``gpustat`` and ``nvitop``, with every package they need. It is written
from files this machine already has, like the smoke image (:mod:`vslice_build.images`): the
interpreter vslice itself runs on (``sys.base_prefix``), the packages as installed in vslice's
own environment (the ``dev`` extra installs them), the C libraries ``ldd`` names for the
interpreter and every extension module, and busybox for a shell. Nothing is downloaded.

Layout in the image: ``/usr/local/bin/python3`` with its library under
``/usr/local/lib/python3.X`` (Python finds its prefix from the executable), the packages in
that library's ``site-packages``, a launcher in ``/usr/local/bin`` for each console script
(``gpustat``, ``nvitop``, ...). The driver comes into the container the way it comes into
any GPU container (the node agent mounts it), so the same image runs on the fake driver and
on NVIDIA's.

The archive is cached under the name of a fingerprint of its inputs (paths, sizes, mtimes), so
a second lab or test run imports it without writing it again.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as metadata
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from vslice_build.images import (
    BUSYBOX,
    BUSYBOX_APPLETS,
    ImageError,
    ImageFile,
    ImageSpec,
    c_libraries,
    write_archive,
)

WORKLOAD_IMAGE = "vslice.local/python-tools:1"
# What users run in a slice (docs/shim.md); the packages they need are found from these.
TOOLS = ("cuda-bindings", "nvidia-ml-py", "gpustat", "nvitop")
# Parts of the standard library no workload needs (tests, IDLE, Tk, the build's static
# library and makefiles): together about four fifths of its size.
STDLIB_SKIPPED = frozenset(
    {"test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "site-packages"}
)
PREFIX = Path("usr/local")


def _skipped(relative: Path) -> bool:
    parts = relative.parts
    unneeded = bool(parts) and (parts[0] in STDLIB_SKIPPED or parts[0].startswith("config-"))
    return unneeded or "__pycache__" in parts or relative.suffix == ".pyc"


def _distributions(names: Iterable[str]) -> list[metadata.Distribution]:
    """``names`` and everything they require on this platform, as installed here."""
    try:
        from packaging.requirements import Requirement
    except ImportError:
        raise ImageError(
            "the workload image needs the `packaging` module to read the tools' requirements; "
            "install vslice with its dev extra (pip install -e '.[dev]')"
        ) from None
    found: dict[str, metadata.Distribution] = {}
    pending = list(names)
    while pending:
        name = pending.pop()
        key = name.lower().replace("_", "-")
        if key in found:
            continue
        try:
            distribution = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise ImageError(
                f"{name} is not installed in {sys.prefix}: the workload image carries "
                f"{', '.join(TOOLS)} and what they need; install vslice's dev extra "
                "(pip install -e '.[dev]')"
            ) from None
        found[key] = distribution
        for text in distribution.requires or ():
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                pending.append(requirement.name)
    return [found[key] for key in sorted(found)]


def _package_files(
    distribution: metadata.Distribution, site: str
) -> tuple[list[ImageFile], list[Path]]:
    """The distribution's files under site-packages (no byte code, nothing outside it) and the
    extension modules among them."""
    files: list[ImageFile] = []
    extensions: list[Path] = []
    for entry in distribution.files or ():
        relative = Path(str(entry))
        if relative.parts[:1] == ("..",) or _skipped(relative):
            continue
        source = Path(str(distribution.locate_file(entry)))
        if not source.is_file():
            continue
        mode = 0o755 if source.suffix == ".so" else 0o644
        files.append(ImageFile(f"{site}/{relative.as_posix()}", source=source, mode=mode))
        if source.suffix == ".so" or ".so." in source.name:
            extensions.append(source)
    return files, extensions


def _launchers(distributions: Sequence[metadata.Distribution]) -> list[ImageFile]:
    """A ``/usr/local/bin`` script for each console entry point, as pip would write it."""
    launchers = []
    for distribution in distributions:
        for point in distribution.entry_points.select(group="console_scripts"):
            module, _, attribute = point.value.partition(":")
            call = attribute.split(".")[0] if attribute else "main"
            script = (
                "#!/usr/local/bin/python3\nimport sys\n"
                f"from {module} import {call}\n"
                f"sys.exit({attribute or call}())\n"
            )
            launchers.append(ImageFile(f"{PREFIX}/bin/{point.name}", data=script.encode()))
    return launchers


def workload_spec(base_prefix: Path | None = None) -> ImageSpec:
    """The image's files, read from this interpreter and this environment."""
    prefix = Path(base_prefix or sys.base_prefix)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    interpreter = (prefix / "bin" / version).resolve()
    stdlib = prefix / "lib" / version
    if not interpreter.is_file() or not (stdlib / "os.py").is_file():
        raise ImageError(f"no {version} interpreter and library under {prefix}")
    library = f"{PREFIX}/lib/{version}"
    files = [
        ImageFile(f"{PREFIX}/bin/{version}", source=interpreter),
        ImageFile(f"{PREFIX}/bin/python3", link=version),
        ImageFile(f"{PREFIX}/bin/python", link=version),
        ImageFile("tmp/.keep", data=b"", mode=0o644),
    ]
    binaries = [interpreter]
    for source in sorted(stdlib.rglob("*")):
        relative = source.relative_to(stdlib)
        if source.is_dir() or source.is_symlink() or _skipped(relative):
            continue
        is_extension = source.suffix == ".so"
        mode = 0o755 if is_extension else 0o644
        files.append(ImageFile(f"{library}/{relative.as_posix()}", source=source, mode=mode))
        if is_extension:
            binaries.append(source)
    distributions = _distributions(TOOLS)
    for distribution in distributions:
        package_files, extensions = _package_files(distribution, f"{library}/site-packages")
        files += package_files
        binaries += extensions
    files += _launchers(distributions)
    files += c_libraries(binaries)
    if BUSYBOX.is_file():
        files.append(ImageFile("bin/busybox", source=BUSYBOX))
        files += [ImageFile(f"bin/{name}", link="busybox") for name in BUSYBOX_APPLETS]
    return ImageSpec(
        WORKLOAD_IMAGE,
        files,
        cmd=["python3"],
        env=(
            "PATH=/usr/local/bin:/usr/bin:/bin",
            "HOME=/tmp",
            "LANG=C.UTF-8",
            "TERM=xterm",
            "PYTHONDONTWRITEBYTECODE=1",
            "PYTHONUNBUFFERED=1",
        ),
        labels={"io.vslice.image": "python-tools"},
    )


def _fingerprint(spec: ImageSpec) -> str:
    digest = hashlib.sha256(spec.name.encode())
    for item in sorted(spec.files, key=lambda f: f.path):
        digest.update(f"\0{item.path}\0{item.mode}\0{item.link}".encode())
        if item.source is not None:
            stat = item.source.stat()
            digest.update(f"{item.source}\0{stat.st_size}\0{stat.st_mtime_ns}".encode())
        if item.data is not None:
            digest.update(item.data)
    digest.update("\0".join(spec.env).encode())
    return digest.hexdigest()[:16]


def build_workload(cache: Path) -> Path:
    """The workload image archive in ``cache``, written unless one of the same inputs is
    there; older ones are removed."""
    spec = workload_spec()
    archive = cache / f"python-tools-{_fingerprint(spec)}.tar"
    if archive.is_file():
        return archive
    for old in cache.glob("python-tools-*.tar"):
        old.unlink(missing_ok=True)
    write_archive(spec, archive)
    return archive
