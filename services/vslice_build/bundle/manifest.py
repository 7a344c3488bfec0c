"""The offline bundle's manifest: what a bundle holds, for which hosts, and how to check it.

A bundle is one directory (or a tarball of it) with everything a site without internet needs
to bring up Kubernetes and vslice on its hosts::

    manifest.json     this module's Manifest: format, versions, target, images, every file's
                      SHA-256 and size
    SHA256SUMS        the same checksums (and manifest.json's own) in ``sha256sum -c`` form;
                      it must agree with the manifest
    python/           the vslice wheel and its dependencies as wheels for the target's Python
    shim/libvslice.so the shim, built against the target's glibc or an older one
    bin/              kubeadm, kubelet, kubectl, containerd, containerd-shim-runc-v2, ctr
    debs/             the target's packages (runc, CNI plugins, the tools kubeadm calls) with a
                      flat repository index (Packages, Packages.gz)
    images/           OCI archives: the sandbox, the smoke image and the control plane's images

A copy is checked by ``verify_bundle`` (the vslice_bundle role's own file, which the role and
``vslice bundle verify`` both run): every file listed, nothing else, no links. Checksums make a
damaged or edited copy visible; they do not say who wrote the bundle. A site
that moves bundles across a trust boundary signs SHA256SUMS with its own key.

Everything here is pure: parsing, validation and comparisons, tested without files.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from vslice_core.errors import InvalidRequest

# The format, the file names and the path rule are those of the check the roles run.
from vslice_build.bundle.verify_bundle import FORMAT as FORMAT
from vslice_build.bundle.verify_bundle import MANIFEST_FILE as MANIFEST_FILE
from vslice_build.bundle.verify_bundle import SUMS_FILE as SUMS_FILE
from vslice_build.bundle.verify_bundle import architecture, path_problem

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_GLIBC = re.compile(rb"GLIBC_([0-9]+)\.([0-9]+)(?:\.[0-9]+)?")


class BundleError(InvalidRequest):
    """A bundle that cannot be built, read or used; the message names the file or field."""


@dataclass(frozen=True)
class Target:
    """The hosts a bundle is for. ``python`` and ``glibc`` are major.minor strings."""

    name: str
    os: str
    os_version: str
    arch: str
    python: str
    glibc: str

    def to_json(self) -> dict[str, str]:
        return {
            "name": self.name,
            "os": self.os,
            "os_version": self.os_version,
            "arch": self.arch,
            "python": self.python,
            "glibc": self.glibc,
        }


# The targets a bundle can be built for. Debian 12 (bookworm) ships Python 3.11 and glibc 2.36.
TARGETS: dict[str, Target] = {
    "debian12": Target("debian12", "Debian", "12", "x86_64", "3.11", "2.36"),
}


@dataclass(frozen=True)
class FileEntry:
    sha256: str
    size: int


@dataclass(frozen=True)
class ImageEntry:
    """One image archive: ``file`` relative to the bundle, ``name`` the image it imports as."""

    file: str
    name: str


@dataclass(frozen=True)
class Manifest:
    vslice_version: str
    target: Target
    components: Mapping[str, str]
    images: Mapping[str, ImageEntry]
    wheel: str
    wheelhouse: str
    shim: str
    files: Mapping[str, FileEntry] = field(default_factory=dict)
    format: int = FORMAT

    def to_json(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "vslice_version": self.vslice_version,
            "target": self.target.to_json(),
            "components": dict(sorted(self.components.items())),
            "images": {
                key: {"file": image.file, "name": image.name}
                for key, image in sorted(self.images.items())
            },
            "python": {"wheel": self.wheel, "wheelhouse": self.wheelhouse},
            "shim": self.shim,
            "files": {
                path: {"sha256": entry.sha256, "size": entry.size}
                for path, entry in sorted(self.files.items())
            },
        }


def target(name: str) -> Target:
    """The target called ``name``; BundleError lists the ones there are."""
    try:
        return TARGETS[name]
    except KeyError:
        known = ", ".join(sorted(TARGETS))
        raise BundleError(
            f"--target {name!r} is not a bundle target; the targets are: {known}",
            field="target",
            value=name,
        ) from None


def _field(data: Mapping[str, Any], key: str, kind: type, where: str) -> Any:
    value = data.get(key)
    if not isinstance(value, kind) or isinstance(value, bool) != (kind is bool):
        raise BundleError(
            f"{MANIFEST_FILE}: {where}{key} must be a {kind.__name__}, not {value!r}",
            field=f"{where}{key}",
            value=value,
        )
    return value


def _relative(path: str, where: str) -> str:
    """A path inside the bundle: relative, no ``..``, so nothing outside it is read or written
    (the rule is verify_bundle's, which the roles run too)."""
    problem = path_problem(path)
    if problem is not None:
        raise BundleError(
            f"{MANIFEST_FILE}: {where} {problem}",
            field=where,
            value=path,
        )
    return path


def parse(data: object) -> Manifest:
    """The manifest in ``data`` (decoded JSON); BundleError names the first bad field."""
    if not isinstance(data, Mapping):
        raise BundleError(f"{MANIFEST_FILE} must hold a JSON object, not {type(data).__name__}")
    version = data.get("format")
    if version != FORMAT:
        raise BundleError(
            f"{MANIFEST_FILE}: format {version!r} is not one this vslice reads (it reads "
            f"{FORMAT}); build the bundle with this vslice version",
            field="format",
            value=version,
        )
    raw_target = _field(data, "target", dict, "")
    parsed_target = Target(
        **{key: _field(raw_target, key, str, "target.") for key in Target.__dataclass_fields__}
    )
    components = _field(data, "components", dict, "")
    for key, value in components.items():
        if not isinstance(value, str):
            raise BundleError(
                f"{MANIFEST_FILE}: components.{key} must be a version string, not {value!r}",
                field=f"components.{key}",
                value=value,
            )
    images: dict[str, ImageEntry] = {}
    for key, raw in _field(data, "images", dict, "").items():
        if not isinstance(raw, dict):
            raise BundleError(
                f"{MANIFEST_FILE}: images.{key} must be an object with file and name",
                field=f"images.{key}",
                value=raw,
            )
        where = f"images.{key}."
        images[key] = ImageEntry(
            _relative(_field(raw, "file", str, where), f"images.{key}.file"),
            _field(raw, "name", str, where),
        )
    python = _field(data, "python", dict, "")
    files: dict[str, FileEntry] = {}
    for path, raw in _field(data, "files", dict, "").items():
        _relative(path, "files")
        if not isinstance(raw, dict):
            raise BundleError(
                f"{MANIFEST_FILE}: files.{path} must be an object with sha256 and size",
                field=f"files.{path}",
                value=raw,
            )
        digest = _field(raw, "sha256", str, f"files.{path}.")
        size = _field(raw, "size", int, f"files.{path}.")
        if not _SHA256.match(digest) or size < 0:
            raise BundleError(
                f"{MANIFEST_FILE}: files.{path} has a malformed checksum or size "
                f"({digest!r}, {size!r})",
                field=f"files.{path}",
                value=raw,
            )
        files[path] = FileEntry(digest, size)
    return Manifest(
        vslice_version=_field(data, "vslice_version", str, ""),
        target=parsed_target,
        components=components,
        images=images,
        wheel=_relative(_field(python, "wheel", str, "python."), "python.wheel"),
        wheelhouse=_relative(_field(python, "wheelhouse", str, "python."), "python.wheelhouse"),
        shim=_relative(_field(data, "shim", str, ""), "shim"),
        files=files,
    )


def sums_text(files: Mapping[str, FileEntry], manifest_json: bytes) -> str:
    """SHA256SUMS: ``files`` and manifest.json itself, in the format ``sha256sum -c`` reads
    (two spaces: text mode), sorted."""
    listed = {
        **files,
        MANIFEST_FILE: FileEntry(hashlib.sha256(manifest_json).hexdigest(), len(manifest_json)),
    }
    return "".join(f"{entry.sha256}  {path}\n" for path, entry in sorted(listed.items()))


@dataclass(frozen=True)
class Host:
    """What a host says of itself (Ansible's facts or /etc/os-release and uname)."""

    name: str
    os: str
    os_version: str
    arch: str


def host_problem(bundle: Target, host: Host) -> str | None:
    """Why ``host`` cannot use a bundle built for ``bundle``, or None."""
    major = host.os_version.split(".", 1)[0]
    if host.os != bundle.os or major != bundle.os_version:
        return (
            f"host {host.name} runs {host.os} {host.os_version}; the bundle is for "
            f"{bundle.os} {bundle.os_version} (target {bundle.name}): build one with "
            f"`vslice bundle build --target` for that host's system"
        )
    if architecture(host.arch) != architecture(bundle.arch):
        return (
            f"host {host.name} is {host.arch}; the bundle is for {bundle.arch} "
            f"(target {bundle.name})"
        )
    return None


def glibc_needed(binary: bytes) -> tuple[int, int] | None:
    """The newest ``GLIBC_x.y`` symbol version a shared object names, or None.

    The version strings of the symbols it imports sit in its dynamic string table; the newest
    one is the oldest glibc it can be loaded by."""
    versions = {(int(major), int(minor)) for major, minor in _GLIBC.findall(binary)}
    return max(versions) if versions else None


def version_tuple(text: str) -> tuple[int, ...]:
    """``"2.36"`` as ``(2, 36)``; BundleError for anything else."""
    try:
        return tuple(int(part) for part in text.split("."))
    except ValueError:
        raise BundleError(f"{text!r} is not a version number", value=text) from None
