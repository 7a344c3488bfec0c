"""Finding, or building once, the binaries the lab runs.

Lookup order for each binary (first hit wins):

1. the directories given explicitly (``--bin-dir``) and ``$VSLICE_LAB_BIN_DIR``;
2. ``$KUBEBUILDER_ASSETS`` (envtest's layout: etcd, kube-apiserver, ...);
3. the cache, ``~/.cache/vslice/k8s/<version>/bin``.

``etcd`` on ``$PATH`` is deliberately not used: distributions ship etcd versions too old for
the API server's watch cache (see ``versions``).

Whatever is still missing is built from Go modules into the cache, once: Kubernetes components
from ``k8s.io/kubernetes`` through a throwaway wrapper module that pins every staging module to
the matching ``v0.Y.Z``, kwok from ``sigs.k8s.io/kwok``, etcd from ``go.etcd.io/etcd/server/v3``.
A file lock keeps two concurrent ``lab up`` from building twice. Run as a module to build ahead
of time (CI does): ``python -m vslice_build.binaries [--version vX.Y.Z]``.

Real nodes need more (:func:`ensure_node`): the kubelet, built with cgo from the same wrapper
module, and containerd, its runc shim and ``ctr`` from ``github.com/containerd/containerd/v2``,
cached in ``~/.cache/vslice/containerd/<version>/bin`` (containerd does not follow the
Kubernetes version). runc and the CNI plugins are the distribution's (:data:`SYSTEM_TOOLS`).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from vslice_build.versions import (
    CONTAINERD_VERSION,
    ETCD_VERSION,
    KUBERNETES_VERSION,
    KWOK_VERSION,
)

KUBE_COMPONENTS = ("kube-apiserver", "kube-scheduler", "kube-controller-manager")
ALL_BINARIES = ("etcd", *KUBE_COMPONENTS, "kwok")
CONTAINERD_BINARIES = ("containerd", "containerd-shim-runc-v2", "ctr")
NODE_BINARIES = ("kubelet", *CONTAINERD_BINARIES)
# What the offline bundle adds for hosts that run kubeadm (the lab itself needs neither).
TOOL_BINARIES = ("kubeadm", "kubectl")
SYSTEM_TOOLS: dict[str, tuple[str, ...]] = {
    "runc": ("/usr/sbin/runc", "/usr/bin/runc", "/usr/local/sbin/runc"),
    "cni-plugins": ("/usr/lib/cni/bridge", "/opt/cni/bin/bridge"),
}
"""What a real node takes from the distribution (Debian: runc, containernetworking-plugins),
by the paths where the packages install them."""

BUILD_SECONDS: dict[str, float] = {
    "kube-apiserver": 80,
    "kube-scheduler": 40,
    "kube-controller-manager": 60,
    "kwok": 57,
    "etcd": 24,
    "kubelet": 103,
    "containerd": 53,
    "containerd-shim-runc-v2": 0,
    "ctr": 0,
    "kubeadm": 12,
    "kubectl": 10,
    "kueue": 65,
}
"""Seconds each binary took to build, measured on an idle 2-core machine (Kubernetes v1.36.3,
Go modules already downloaded, in the order ``python -m vslice_build.binaries`` builds them,
so each build found the packages the earlier ones compiled). The three control-plane
components are one ``go build`` (180 s), split by their sizes; containerd's three binaries are
one as well. Only for the estimates printed before a build: see :func:`estimate`."""
MEASURED_CORES = 2


def estimate(names: Sequence[str], cores: int | None = None) -> float:
    """Seconds building ``names`` should take on this machine. Every build runs ``go build -p
    2``, so a machine with more than two cores compiles barely faster, and one with a single
    core takes about twice as long. A binary not in :data:`BUILD_SECONDS` counts a minute."""
    usable = min(cores or os.cpu_count() or 1, MEASURED_CORES)
    return sum(BUILD_SECONDS.get(name, 60.0) for name in names) * MEASURED_CORES / usable


def _minutes(seconds: float) -> str:
    if seconds < 90:
        return "about a minute" if seconds >= 45 else "under a minute"
    return f"about {round(seconds / 60)} min"


def _announce(component: str, names: Sequence[str], label: str, log: Path) -> float:
    """Say what is being built, for how long, and where its log is; the start time."""
    cores = os.cpu_count() or 1
    print(
        f"building {component} ({label}): {_minutes(estimate(names))} on {cores} "
        f"core{'s' if cores != 1 else ''} (more on a first run, which also downloads its Go "
        f"modules), log: {log}",
        file=sys.stderr,
        flush=True,
    )
    return time.monotonic()


def _built(component: str, started: float, steps: dict[str, float]) -> None:
    seconds = round(time.monotonic() - started, 1)
    steps[component] = seconds
    print(f"built {component} in {seconds:.0f} s", file=sys.stderr, flush=True)


# The k8s.io modules that live in kubernetes/staging: the main module's go.mod points them at
# ./staging, which a dependent module cannot see, so the wrapper pins each to v0.Y.Z. The list
# changes between minors (1.36 added cri-streaming and streaming), so it is read from the
# release's own go.mod (see ``_staging_modules``).
_STAGING_REPLACE = re.compile(r"^\s*(?:replace\s+)?k8s\.io/([\w.-]+)\s+=>\s+\./staging/", re.M)


class BinaryError(Exception):
    """A binary could not be found or built. The message names it and the log to read."""

    def __init__(self, message: str, *, component: str, log: Path | None = None) -> None:
        super().__init__(message)
        self.component = component
        self.log = log


@dataclass(frozen=True)
class Binaries:
    """Absolute paths of the binaries one lab runs."""

    etcd: Path
    kube_apiserver: Path
    kube_scheduler: Path
    kube_controller_manager: Path
    kwok: Path

    def path(self, name: str) -> Path:
        """The path for a component by its binary name, e.g. ``kube-apiserver``."""
        value: Path = getattr(self, name.replace("-", "_"))
        return value


@dataclass(frozen=True)
class NodeBinaries:
    """Absolute paths of what a real node runs."""

    kubelet: Path
    containerd: Path
    containerd_shim: Path
    ctr: Path
    runc: Path
    cni_bin_dir: Path


def cache_root() -> Path:
    """``~/.cache/vslice/k8s`` (``$XDG_CACHE_HOME`` respected)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "vslice" / "k8s"


def cache_dir(version: str) -> Path:
    """Where binaries for one Kubernetes version are cached."""
    return cache_root() / version


def containerd_cache_dir(version: str = CONTAINERD_VERSION) -> Path:
    """Where containerd's binaries are cached (independent of the Kubernetes version)."""
    return cache_root().parent / "containerd" / version


def search_dirs(extra: Sequence[Path] = ()) -> list[Path]:
    """The directories searched before the cache, in order (see the module docstring)."""
    dirs = list(extra)
    for var in ("VSLICE_LAB_BIN_DIR", "KUBEBUILDER_ASSETS"):
        value = os.environ.get(var)
        if value:
            dirs.append(Path(value))
    return dirs


def _find(name: str, dirs: Sequence[Path]) -> Path | None:
    for directory in dirs:
        candidate = directory / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate.resolve()
    return None


def locate(version: str, extra_dirs: Sequence[Path] = ()) -> dict[str, Path | None]:
    """Each binary's path, or None where it would have to be built."""
    dirs = [*search_dirs(extra_dirs), cache_dir(version) / "bin"]
    return {name: _find(name, dirs) for name in ALL_BINARIES}


def ensure(
    version: str = KUBERNETES_VERSION, extra_dirs: Sequence[Path] = (), *, quiet: bool = False
) -> Binaries:
    """Every binary, building what is missing into the cache (at most once, under a lock)."""
    found = locate(version, extra_dirs)
    missing = [name for name, path in found.items() if path is None]
    if missing:
        with _build_lock(cache_dir(version)):
            found = locate(version, extra_dirs)  # another process may have built meanwhile
            missing = [name for name, path in found.items() if path is None]
            if missing:
                _build(version, missing, quiet=quiet)
                found = locate(version, extra_dirs)
    paths = {name: path for name, path in found.items() if path is not None}
    return Binaries(
        etcd=paths["etcd"],
        kube_apiserver=paths["kube-apiserver"],
        kube_scheduler=paths["kube-scheduler"],
        kube_controller_manager=paths["kube-controller-manager"],
        kwok=paths["kwok"],
    )


def system_tool(name: str) -> Path | None:
    """The distribution's runc or CNI plugin directory, None when the package is missing."""
    for candidate in SYSTEM_TOOLS[name]:
        if os.access(candidate, os.X_OK):
            return Path(candidate) if name == "runc" else Path(candidate).parent
    return None


def locate_node(version: str, extra_dirs: Sequence[Path] = ()) -> dict[str, Path | None]:
    """Each node binary's path, or None where it would have to be built."""
    dirs = [*search_dirs(extra_dirs), cache_dir(version) / "bin", containerd_cache_dir() / "bin"]
    return {name: _find(name, dirs) for name in NODE_BINARIES}


def ensure_node(
    version: str = KUBERNETES_VERSION, extra_dirs: Sequence[Path] = (), *, quiet: bool = False
) -> NodeBinaries:
    """The kubelet and containerd (built once when missing) and the distribution's runc and CNI
    plugins; BinaryError names what is missing and how to get it."""
    tools = {name: system_tool(name) for name in SYSTEM_TOOLS}
    absent = [name for name, path in tools.items() if path is None]
    if absent:
        packages = {"runc": "runc", "cni-plugins": "containernetworking-plugins"}
        wanted = " ".join(packages[name] for name in absent)
        raise BinaryError(
            f"a real node needs {', '.join(absent)} from the distribution: "
            f"`apt-get install {wanted}` (or run .ci/setup)",
            component=absent[0],
        )
    _check_runs("runc", tools["runc"])
    found = locate_node(version, extra_dirs)
    if any(path is None for path in found.values()):
        with _build_lock(cache_dir(version)):
            found = locate_node(version, extra_dirs)
            missing = [name for name, path in found.items() if path is None]
            if missing:
                _build_node(version, missing, quiet=quiet)
                found = locate_node(version, extra_dirs)
    paths = {name: path for name, path in found.items() if path is not None}
    runc, cni = tools["runc"], tools["cni-plugins"]
    assert runc is not None and cni is not None  # checked above
    return NodeBinaries(
        kubelet=paths["kubelet"],
        containerd=paths["containerd"],
        containerd_shim=paths["containerd-shim-runc-v2"],
        ctr=paths["ctr"],
        runc=runc,
        cni_bin_dir=cni,
    )


def ensure_tools(version: str = KUBERNETES_VERSION, *, quiet: bool = False) -> dict[str, Path]:
    """kubeadm and kubectl of ``version`` (built once into the cache when missing)."""
    dirs = [*search_dirs(), cache_dir(version) / "bin"]
    found = {name: _find(name, dirs) for name in TOOL_BINARIES}
    if any(path is None for path in found.values()):
        with _build_lock(cache_dir(version)):
            found = {name: _find(name, dirs) for name in TOOL_BINARIES}
            missing = [name for name, path in found.items() if path is None]
            if missing:
                directory = cache_dir(version)
                log = directory / "build.log"
                go = _go()
                started = time.monotonic()
                command, workdir = _kubernetes_step(go, version, missing, directory)
                component = "+".join(missing)
                steps: dict[str, float] = {}
                step_started = started
                if not quiet:
                    step_started = _announce(component, missing, f"Kubernetes {version}", log)
                with log.open("a") as out:
                    out.write(f"\n$ (cd {workdir} && {' '.join(command)})\n")
                    out.flush()
                    _run_logged(component, command, workdir, out, log, go)
                if not quiet:
                    _built(component, step_started, steps)
                _record(directory, missing, time.monotonic() - started, steps)
                found = {name: _find(name, dirs) for name in TOOL_BINARIES}
    return {name: path for name, path in found.items() if path is not None}


def _check_runs(name: str, path: Path | None) -> None:
    """A tool that is there but cannot even print its version fails every container later;
    say so now, with what it printed."""
    try:
        result = subprocess.run(
            [str(path), "--version"], capture_output=True, text=True, timeout=20, check=False
        )
    except OSError as error:
        raise BinaryError(f"{name} at {path} cannot run: {error}", component=name) from None
    if result.returncode != 0:
        said = (result.stderr or result.stdout).strip()[-300:]
        raise BinaryError(
            f"{name} at {path} fails (`{name} --version` exit {result.returncode}): {said}",
            component=name,
        )


@contextlib.contextmanager
def _build_lock(directory: Path) -> Iterator[None]:
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / ".build.lock").open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


GO_CANDIDATES: tuple[str, ...] = ("/usr/local/go/bin/go", "~/.cache/vslice/go/bin/go")
"""Where Go is looked for after ``$PATH``: the official tarball's place, what .ci/setup fetches."""


def find_go() -> str | None:
    """The Go toolchain: ``$PATH`` first, then GO_CANDIDATES; None when there is none."""
    candidates = [shutil.which("go"), *(str(Path(c).expanduser()) for c in GO_CANDIDATES)]
    return next((c for c in candidates if c and Path(c).is_file()), None)


def _go() -> str:
    go = find_go()
    if go is None:
        raise BinaryError(
            "the Go toolchain (`go`, >= 1.26) is not on PATH, and the lab needs it once to build "
            "the Kubernetes binaries; install Go (https://go.dev/dl, or run .ci/setup), or point "
            "KUBEBUILDER_ASSETS / --bin-dir at a directory holding them",
            component="go",
        )
    return go


def _build(version: str, missing: Sequence[str], *, quiet: bool) -> None:
    directory = cache_dir(version)
    bin_dir = directory / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    log = directory / "build.log"
    go = _go()
    started = time.monotonic()
    kube = [name for name in missing if name in KUBE_COMPONENTS]
    steps: list[tuple[str, list[str], str, list[str], Path]] = []
    if kube:
        label = f"Kubernetes {version}"
        steps.append(("+".join(kube), kube, label, *_kubernetes_step(go, version, kube, directory)))
    if "kwok" in missing:
        steps.append(("kwok", ["kwok"], f"kwok {KWOK_VERSION}", *_kwok_step(go, directory)))
    if "etcd" in missing:
        steps.append(("etcd", ["etcd"], f"etcd {ETCD_VERSION}", *_etcd_step(go, directory)))
    took: dict[str, float] = {}
    with log.open("a") as out:
        for component, names, label, command, workdir in steps:
            step_started = _announce(component, names, label, log) if not quiet else 0.0
            out.write(f"\n$ (cd {workdir} && {' '.join(command)})\n")
            out.flush()
            _run_logged(component, command, workdir, out, log, go)
            if not quiet:
                _built(component, step_started, took)
    _record(directory, missing, time.monotonic() - started, took)


def _build_node(version: str, missing: Sequence[str], *, quiet: bool) -> None:
    directory = cache_dir(version)
    log = directory / "build.log"
    go = _go()
    started = time.monotonic()
    steps: list[tuple[str, list[str], str, list[str], Path, bool]] = []
    if "kubelet" in missing:
        # The kubelet needs cgo (libcontainer's cgroup and mount code).
        kubelet = _kubernetes_step(go, version, ["kubelet"], directory)
        steps.append(("kubelet", ["kubelet"], f"Kubernetes {version}", *kubelet, True))
    if any(name in missing for name in CONTAINERD_BINARIES):
        label = f"containerd {CONTAINERD_VERSION}"
        names = [name for name in missing if name in CONTAINERD_BINARIES]
        steps.append(("containerd", names, label, *_containerd_step(go), False))
    took: dict[str, float] = {}
    with log.open("a") as out:
        for component, names, label, command, workdir, cgo in steps:
            step_started = _announce(component, names, label, log) if not quiet else 0.0
            out.write(f"\n$ (cd {workdir} && {' '.join(command)})\n")
            out.flush()
            _run_logged(component, command, workdir, out, log, go, cgo=cgo)
            if not quiet:
                _built(component, step_started, took)
    _record(directory, missing, time.monotonic() - started, took)


def _run_logged(
    component: str,
    command: list[str],
    workdir: Path,
    out: IO[str],
    log: Path,
    go: str,
    *,
    cgo: bool = False,
) -> None:
    env = {
        **os.environ,
        "CGO_ENABLED": "1" if cgo else "0",
        "GOFLAGS": "-mod=mod",
        "PATH": f"{Path(go).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    result = subprocess.run(
        command, cwd=workdir, env=env, stdout=out, stderr=subprocess.STDOUT, check=False
    )
    if result.returncode != 0:
        raise BinaryError(
            f"building {component} failed (exit {result.returncode}); see {log}",
            component=component,
            log=log,
        )


def _wrapper_module(
    workdir: Path, module: str, requires: dict[str, str], replaces: dict[str, str]
) -> None:
    """Write a throwaway go.mod that pulls the given modules in."""
    workdir.mkdir(parents=True, exist_ok=True)
    lines = [f"module {module}", "", "go 1.24", ""]
    lines += [f"require {mod} {ver}" for mod, ver in requires.items()]
    lines += [f"replace {mod} => {mod} {ver}" for mod, ver in replaces.items()]
    (workdir / "go.mod").write_text("\n".join(lines) + "\n")


def _kubernetes_step(
    go: str, version: str, names: Sequence[str], directory: Path
) -> tuple[list[str], Path]:
    component = "+".join(names)
    staging = "v0." + version.removeprefix("v").split(".", 1)[1]
    workdir = directory / "src" / "kubernetes"
    _wrapper_module(
        workdir,
        "vslice.local/kubebuild",
        {"k8s.io/kubernetes": version},
        {f"k8s.io/{name}": staging for name in _staging_modules(go, version, component)},
    )
    ldflags = f"-s -w -X k8s.io/component-base/version.gitVersion={version}"
    packages = [f"k8s.io/kubernetes/cmd/{name}" for name in names]
    script = (
        f"{go} mod download k8s.io/kubernetes && "
        f"{go} get {' '.join(p + '@' + version for p in packages)} && "
        f"{go} build -p 2 -tags=selinux,notest -trimpath -ldflags '{ldflags}' "
        f"-o {directory / 'bin'}/ {' '.join(packages)}"
    )
    return ["bash", "-ec", script], workdir


def module_download(go: str, module: str) -> subprocess.CompletedProcess[str]:
    """``go mod download -json MODULE@VERSION``: its JSON names the module's directory in the
    module cache (``Dir``) and its ``go.mod`` (``GoMod``)."""
    return subprocess.run(
        [go, "mod", "download", "-json", module],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "GOFLAGS": "-mod=mod"},
    )


def staging_modules(go_mod: str) -> list[str]:
    """The staging module names a kubernetes release's go.mod replaces with ./staging paths."""
    return sorted(set(_STAGING_REPLACE.findall(go_mod)))


def _staging_modules(go: str, version: str, component: str) -> list[str]:
    """Read from the release's go.mod, downloaded by go; a failure is reported like a failed
    build step: under the component being built, with go's answer appended to the build log."""
    log = cache_dir(version) / "build.log"
    result = module_download(go, f"k8s.io/kubernetes@{version}")
    try:
        names = staging_modules(Path(json.loads(result.stdout)["GoMod"]).read_text())
    except (ValueError, KeyError, TypeError, OSError) as error:
        names, problem = [], f"cannot read its go.mod ({error})"
    else:
        problem = "its go.mod names no staging module"
    if not names:
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("a") as out:
            out.write(f"\n$ {go} mod download -json k8s.io/kubernetes@{version}\n")
            out.write(result.stdout + result.stderr)
        raise BinaryError(
            f"building {component} failed: k8s.io/kubernetes@{version}: {problem}; see {log}",
            component=component,
            log=log,
        )
    return names


def _kwok_step(go: str, directory: Path) -> tuple[list[str], Path]:
    workdir = directory / "src" / "kwok"
    _wrapper_module(workdir, "vslice.local/kwokbuild", {"sigs.k8s.io/kwok": KWOK_VERSION}, {})
    script = (
        f"{go} get sigs.k8s.io/kwok/cmd/kwok@{KWOK_VERSION} && "
        f"{go} build -p 2 -trimpath -ldflags '-s -w' -o {directory / 'bin'}/kwok "
        "sigs.k8s.io/kwok/cmd/kwok"
    )
    return ["bash", "-ec", script], workdir


def _etcd_step(go: str, directory: Path) -> tuple[list[str], Path]:
    workdir = directory / "src" / "etcd"
    _wrapper_module(
        workdir, "vslice.local/etcdbuild", {"go.etcd.io/etcd/server/v3": ETCD_VERSION}, {}
    )
    script = (
        f"{go} get go.etcd.io/etcd/server/v3@{ETCD_VERSION} && "
        f"{go} build -p 2 -trimpath -ldflags '-s -w' -o {directory / 'bin'}/etcd "
        "go.etcd.io/etcd/server/v3"
    )
    return ["bash", "-ec", script], workdir


def _containerd_step(go: str) -> tuple[list[str], Path]:
    directory = containerd_cache_dir()
    workdir = directory / "src"
    module = "github.com/containerd/containerd/v2"
    _wrapper_module(workdir, "vslice.local/containerdbuild", {module: CONTAINERD_VERSION}, {})
    packages = [f"{module}/cmd/{name}" for name in CONTAINERD_BINARIES]
    # no_btrfs: the btrfs snapshotter needs C headers and is not used (overlayfs is).
    script = (
        f"{go} get {' '.join(p + '@' + CONTAINERD_VERSION for p in packages)} && "
        f"{go} build -p 2 -tags no_btrfs -trimpath "
        f"-ldflags '-s -w -X {module}/version.Version={CONTAINERD_VERSION}' "
        f"-o {directory / 'bin'}/ {' '.join(packages)}"
    )
    (directory / "bin").mkdir(parents=True, exist_ok=True)
    return ["bash", "-ec", script], workdir


def _record(
    directory: Path, built: Sequence[str], seconds: float, steps: dict[str, float] | None = None
) -> None:
    """Append how long a build took, and each of its steps, to ``build.json`` (the figures
    behind :data:`BUILD_SECONDS` and the docs)."""
    record_file = directory / "build.json"
    records: list[dict[str, object]] = []
    if record_file.exists():
        with contextlib.suppress(ValueError):
            records = json.loads(record_file.read_text())
    entry: dict[str, object] = {"built": list(built), "seconds": round(seconds, 1)}
    if steps:
        entry["steps"] = steps
    records.append({**entry, "cores": os.cpu_count(), "at": time.time()})
    record_file.write_text(json.dumps(records, indent=1) + "\n")


def disk_use(path: Path) -> int:
    """Bytes under ``path`` (the cache's size, for reports)."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m vslice_build.binaries", description="Find or build the lab's binaries."
    )
    parser.add_argument("--version", default=KUBERNETES_VERSION, help="Kubernetes version")
    parser.add_argument("--bin-dir", type=Path, action="append", default=[])
    parser.add_argument(
        "--check", action="store_true", help="build nothing; exit 1 if something is missing"
    )
    parser.add_argument(
        "--no-node", action="store_true", help="skip the real node's kubelet and containerd"
    )
    args = parser.parse_args(argv)
    if args.check:
        found = locate(args.version, args.bin_dir)
        if not args.no_node:
            found |= locate_node(args.version, args.bin_dir)
        for name, path in found.items():
            print(f"{name}: {path or 'missing (would be built)'}")
        return 0 if all(found.values()) else 1
    try:
        binaries = ensure(args.version, args.bin_dir)
        for name in ALL_BINARIES:
            print(f"{name}: {binaries.path(name)}")
        if not args.no_node:
            node = ensure_node(args.version, args.bin_dir)
            for name, path in vars(node).items():
                print(f"{name}: {path}")
            # kubeadm and kubectl for the offline bundle (vslice bundle build).
            for name, path in ensure_tools(args.version).items():
                print(f"{name}: {path}")
    except BinaryError as error:
        print(f"vslice lab: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
