"""Finding, or building once, the Kueue controller and the manifests the lab installs with it.

Kueue (``sigs.k8s.io/kueue``, :data:`~vslice_build.versions.KUEUE_VERSION`) is built from its Go
module like the other lab components: ``go build`` of ``cmd/kueue`` through a throwaway wrapper
module, into ``~/.cache/vslice/kueue/<version>/bin/kueue`` (about 65 s on 2 cores with the
modules downloaded). Beside the binary go the files of the module's own ``config/components``
the lab needs, copied as they are, so the CRDs and webhook rules always match the binary:

- ``crds/``: the CustomResourceDefinitions (``crd/bases``), and
- ``webhooks.yaml``: the webhook configurations (``webhook/manifests.yaml``), which the lab
  rewrites from in-cluster Service references to its loopback URL (``vslice_lab.kueue``).

Lookup order for the binary: ``--bin-dir`` and ``$VSLICE_LAB_BIN_DIR``, then the cache; the
manifests come from the cache only (a binary found elsewhere still gets them copied from the
module). Run as a module to build ahead of time (CI's setup does): ``python -m
vslice_build.kueue``.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from vslice_build.binaries import (
    BinaryError,
    _announce,
    _build_lock,
    _built,
    _find,
    _go,
    _record,
    _run_logged,
    _wrapper_module,
    cache_root,
    module_download,
    search_dirs,
)
from vslice_build.versions import KUEUE_VERSION

MODULE = "sigs.k8s.io/kueue"
CRD_SOURCE = Path("config/components/crd/bases")
WEBHOOK_SOURCE = Path("config/components/webhook/manifests.yaml")


@dataclass(frozen=True)
class KueueBuild:
    """Kueue's controller and the manifests of the same version."""

    version: str
    binary: Path
    crds: tuple[Path, ...]
    webhooks: Path


def cache_dir(version: str = KUEUE_VERSION) -> Path:
    """``~/.cache/vslice/kueue/<version>`` (``$XDG_CACHE_HOME`` respected)."""
    return cache_root().parent / "kueue" / version


def locate(version: str = KUEUE_VERSION, extra_dirs: Sequence[Path] = ()) -> KueueBuild | None:
    """The build when the binary and its manifests are all there, else None."""
    directory = cache_dir(version)
    binary = _find("kueue", [*search_dirs(extra_dirs), directory / "bin"])
    crds = tuple(sorted((directory / "crds").glob("*.yaml")))
    webhooks = directory / "webhooks.yaml"
    if binary is None or not crds or not webhooks.is_file():
        return None
    return KueueBuild(version, binary, crds, webhooks)


def ensure(
    version: str = KUEUE_VERSION, extra_dirs: Sequence[Path] = (), *, quiet: bool = False
) -> KueueBuild:
    """The build, made once (under a lock) when something is missing; BinaryError says what
    failed and which log to read."""
    found = locate(version, extra_dirs)
    if found is not None:
        return found
    directory = cache_dir(version)
    with _build_lock(directory):
        found = locate(version, extra_dirs)
        if found is None:
            _build(version, extra_dirs, quiet=quiet)
            found = locate(version, extra_dirs)
    if found is None:
        raise BinaryError(
            f"Kueue {version} was built but its binary or manifests are missing from {directory}",
            component="kueue",
        )
    return found


def _build(version: str, extra_dirs: Sequence[Path], *, quiet: bool) -> None:
    directory = cache_dir(version)
    log = directory / "build.log"
    go = _go()
    started = time.monotonic()
    workdir = directory / "src"
    _wrapper_module(workdir, "vslice.local/kueuebuild", {MODULE: version}, {})
    steps: dict[str, float] = {}
    with log.open("a") as out:
        if _find("kueue", [*search_dirs(extra_dirs), directory / "bin"]) is None:
            step_started = 0.0 if quiet else _announce("kueue", ["kueue"], f"Kueue {version}", log)
            script = (
                f"{go} get {MODULE}/cmd/kueue@{version} && "
                f"{go} build -p 2 -trimpath -ldflags '-s -w' -o {directory / 'bin'}/kueue "
                f"{MODULE}/cmd/kueue"
            )
            out.write(f"\n$ (cd {workdir} && {script})\n")
            out.flush()
            _run_logged("kueue", ["bash", "-ec", script], workdir, out, log, go)
            if not quiet:
                _built("kueue", step_started, steps)
        _copy_manifests(go, version, directory, log)
    _record(directory, ["kueue"], time.monotonic() - started, steps)


def _copy_manifests(go: str, version: str, directory: Path, log: Path) -> None:
    """The module's CRDs and webhook configurations, from the module cache into ``directory``."""
    result = module_download(go, f"{MODULE}@{version}")
    try:
        source = Path(json.loads(result.stdout)["Dir"])
    except (ValueError, KeyError, TypeError) as error:
        raise BinaryError(
            f"cannot find {MODULE}@{version} in the module cache ({error}): "
            f"{(result.stderr or result.stdout).strip()[-300:]}",
            component="kueue",
            log=log,
        ) from None
    crds = sorted((source / CRD_SOURCE).glob("*.yaml"))
    if not crds or not (source / WEBHOOK_SOURCE).is_file():
        raise BinaryError(
            f"{MODULE}@{version} has no {CRD_SOURCE} or {WEBHOOK_SOURCE}: the lab cannot install "
            "this version",
            component="kueue",
            log=log,
        )
    target = directory / "crds"
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    for crd in crds:
        shutil.copyfile(crd, target / crd.name)
    shutil.copyfile(source / WEBHOOK_SOURCE, directory / "webhooks.yaml")


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m vslice_build.kueue", description="Find or build the lab's Kueue."
    )
    parser.add_argument("--version", default=KUEUE_VERSION)
    parser.add_argument("--bin-dir", type=Path, action="append", default=[])
    parser.add_argument(
        "--check", action="store_true", help="build nothing; exit 1 if something is missing"
    )
    args = parser.parse_args(argv)
    if args.check:
        found = locate(args.version, args.bin_dir)
        print(f"kueue: {found.binary if found else 'missing (would be built)'}")
        return 0 if found else 1
    try:
        build = ensure(args.version, args.bin_dir)
    except BinaryError as error:
        print(f"vslice lab: {error}", file=sys.stderr)
        return 1
    print(f"kueue: {build.binary} ({len(build.crds)} CRDs, {build.webhooks.name})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
