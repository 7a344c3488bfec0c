"""``vslice bundle build``: write an offline bundle from a vslice source checkout.

It reuses what the lab already builds (the Kubernetes binaries and containerd from Go modules,
the sandbox and smoke images written as OCI archives) and adds the wheels, the shim and the
target's packages. Every download and build is cached under ``~/.cache/vslice/`` (wheels by
dependency list and target, packages by file name), so a second build fetches nothing.

The bundle is written to ``<out>.partial`` and renamed when complete: a failed or interrupted
build never leaves something that looks like a bundle.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
import tarfile
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from vslice_build import binaries, images
from vslice_build.bundle import debs
from vslice_build.bundle.commands import run
from vslice_build.bundle.manifest import (
    BundleError,
    ImageEntry,
    Manifest,
    Target,
    glibc_needed,
    version_tuple,
)
from vslice_build.bundle.sums import seal
from vslice_build.versions import CONTAINERD_VERSION, ETCD_VERSION, KUBERNETES_VERSION

# The control plane's images under the names kubeadm asks for with imageRepository
# vslice.local: the Kubernetes version for its components, etcd's own version with "-0" as
# kubeadm tags it.
IMAGE_REPOSITORY = "vslice.local"
ETCD_TAG = ETCD_VERSION.removeprefix("v") + "-0"


@dataclass(frozen=True)
class Options:
    target: Target
    out: Path
    source: Path
    tarball: bool = False
    kubernetes_version: str = KUBERNETES_VERSION
    log: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True)


def source_root(start: Path | None = None) -> Path:
    """The vslice checkout the bundle is built from (pyproject.toml and shim/ at its root)."""
    here = (start or Path(__file__)).resolve()
    for candidate in [here, *here.parents]:
        if (candidate / "pyproject.toml").is_file() and (candidate / "shim" / "Makefile").is_file():
            return candidate
    raise BundleError(
        "vslice bundle build runs from a vslice source checkout (it builds the wheel and the "
        f"shim); none found above {here}: pass --source DIR",
        field="source",
        value=str(here),
    )


def _cache() -> Path:
    return binaries.cache_root().parent


def platform_tags(target: Target) -> list[str]:
    """The manylinux tags a host with the target's glibc can load, newest first."""
    major, minor = version_tuple(target.glibc)[:2]
    arch = target.arch
    tags = [f"manylinux_{major}_{m}_{arch}" for m in range(minor, 16, -1)]
    return [*tags, f"manylinux2014_{arch}", f"linux_{arch}"]


def _dependencies(source: Path) -> list[str]:
    with (source / "pyproject.toml").open("rb") as file:
        deps: list[str] = tomllib.load(file)["project"]["dependencies"]
    return sorted(deps)


def _wheels(options: Options, out: Path) -> tuple[str, str]:
    """The vslice wheel (rebuilt each time) and its dependencies as binary wheels for the
    target's Python and glibc, whatever the build host runs."""
    python = out / "python"
    wheel_dir = python / "wheel"
    wheel_dir.mkdir(parents=True)
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(wheel_dir),
            str(options.source),
        ],
        "building the vslice wheel",
    )
    wheel = next(wheel_dir.glob("vslice-*.whl"), None)
    if wheel is None:
        raise BundleError(f"pip wheel wrote no vslice wheel into {wheel_dir}")
    deps = _dependencies(options.source)
    tags = platform_tags(options.target)
    key_text = "\n".join([*deps, options.target.python, *tags])
    cached = _cache() / "bundle-wheels" / hashlib.sha256(key_text.encode()).hexdigest()[:16]
    if not (cached / ".complete").is_file():
        shutil.rmtree(cached, ignore_errors=True)
        cached.mkdir(parents=True)
        version = options.target.python.replace(".", "")
        command = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--only-binary=:all:",
            "--python-version",
            options.target.python,
            "--implementation",
            "cp",
            "--abi",
            f"cp{version}",
            "--abi",
            "abi3",
            "--abi",
            "none",
            "-d",
            str(cached),
        ]
        for tag in tags:
            command += ["--platform", tag]
        run(
            [*command, *deps],
            f"fetching the dependencies' wheels for Python {options.target.python}",
        )
        (cached / ".complete").touch()
    wheelhouse = python / "wheelhouse"
    wheelhouse.mkdir()
    for file in sorted(cached.glob("*.whl")):
        shutil.copy2(file, wheelhouse / file.name)
    return f"python/wheel/{wheel.name}", "python/wheelhouse"


def _shim(options: Options, out: Path) -> str:
    shim = options.source / "shim"
    run(["make", "-s", "-C", str(shim), "-j2"], "building the shim (make -C shim)")
    library = shim / "build" / "libvslice.so"
    needed = glibc_needed(library.read_bytes())
    if needed is not None and needed > version_tuple(options.target.glibc)[:2]:
        raise BundleError(
            f"{library} needs glibc {needed[0]}.{needed[1]}; target {options.target.name} has "
            f"{options.target.glibc}: build on a host with that glibc or older"
        )
    (out / "shim" / "hook").mkdir(parents=True)
    shutil.copy2(library, out / "shim" / "libvslice.so")
    # Where the node role looks for it: hook/ beside the shim (vslice_node_memory_limit_hook_file).
    hook = shim / "build" / "hook" / "vslice-memory-limit"
    shutil.copy2(hook, out / "shim" / "hook" / "vslice-memory-limit")
    return "shim/libvslice.so"


def _binaries(options: Options, out: Path) -> dict[str, str]:
    version = options.kubernetes_version
    node = binaries.ensure_node(version, quiet=False)
    tools = binaries.ensure_tools(version)
    paths = {
        "kubelet": node.kubelet,
        "containerd": node.containerd,
        "containerd-shim-runc-v2": node.containerd_shim,
        "ctr": node.ctr,
        **tools,
    }
    (out / "bin").mkdir()
    for name, path in sorted(paths.items()):
        shutil.copy2(path, out / "bin" / name)
        (out / "bin" / name).chmod(0o755)
    return {
        "kubernetes": version,
        "containerd": CONTAINERD_VERSION.removeprefix("v"),
        "etcd": ETCD_VERSION.removeprefix("v"),
    }


def _images(options: Options, out: Path) -> dict[str, ImageEntry]:
    control = binaries.ensure(options.kubernetes_version, quiet=False)
    directory = out / "images"
    directory.mkdir()
    pause = images.build_pause(_cache() / "bundle-pause")
    specs = {
        "pause": images.pause_spec(pause),
        "smoke": images.smoke_spec(options.source / "shim" / "build" / "smoke" / "vslice-smoke"),
        "etcd": images.binary_spec(f"{IMAGE_REPOSITORY}/etcd:{ETCD_TAG}", control.etcd),
    }
    for name in binaries.KUBE_COMPONENTS:
        tag = options.kubernetes_version
        specs[name] = images.binary_spec(f"{IMAGE_REPOSITORY}/{name}:{tag}", control.path(name))
    entries = {}
    for key, spec in sorted(specs.items()):
        images.write_archive(spec, directory / f"{key}.tar")
        entries[key] = ImageEntry(f"images/{key}.tar", spec.name)
    return entries


def vslice_version(source: Path) -> str:
    with (source / "pyproject.toml").open("rb") as file:
        version: str = tomllib.load(file)["project"]["version"]
    return version


def build(options: Options) -> Path:
    """Write the bundle; returns its directory (or tarball with ``tarball``)."""
    debs.check_build_host(options.target)
    out = options.out
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    log = options.log
    log("bundle: the vslice wheel and its dependencies")
    wheel, wheelhouse = _wheels(options, partial)
    log("bundle: the shim")
    shim = _shim(options, partial)
    log("bundle: Kubernetes and containerd binaries")
    components = _binaries(options, partial)
    log("bundle: images")
    image_entries = _images(options, partial)
    log("bundle: packages")
    versions = debs.fetch(
        debs.PACKAGES, _cache() / "bundle-debs" / options.target.name, partial / "debs"
    )
    components |= {f"deb:{name}": deb for name, deb in versions.items()}
    manifest = seal(
        partial,
        Manifest(
            vslice_version=vslice_version(options.source),
            target=options.target,
            components=components,
            images=image_entries,
            wheel=wheel,
            wheelhouse=wheelhouse,
            shim=shim,
        ),
    )
    if out.exists():
        shutil.rmtree(out) if out.is_dir() else out.unlink()
    partial.replace(out)
    log(
        f"bundle: {len(manifest.files)} files, "
        f"{sum(f.size for f in manifest.files.values()) / 2**20:.0f} MiB in {out}"
    )
    if not options.tarball:
        return out
    archive = out.with_name(out.name + ".tar")
    with tarfile.open(archive.with_name(archive.name + ".partial"), "w") as tar:
        tar.add(out, arcname=out.name)
    archive.with_name(archive.name + ".partial").replace(archive)
    return archive
