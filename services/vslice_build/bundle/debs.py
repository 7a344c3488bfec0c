"""The bundle's Debian packages: a package list's dependency closure, fetched with the build
host's own apt sources, and a flat repository index apt reads as
``deb [trusted=yes] file:DIR ./``.

The packages come from the host that builds the bundle, so it must run the target's release
(:func:`check_build_host`). The closure leaves out Essential packages (every Debian system has
them, and replacing dpkg or the shell from a bundle is not this bundle's business); it keeps
libraries such as libc6, so a host on an older point release gets the versions the packages
were built against.
"""

from __future__ import annotations

import gzip
import hashlib
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path

from vslice_build.bundle.commands import run
from vslice_build.bundle.manifest import BundleError, Target

# What the roles install from debs/: runc and the CNI plugins for containerd, the tools kubeadm's
# preflight and the kubelet call, python3-venv for vslice's release, python3-apt for Ansible's
# apt module (which would otherwise try to fetch it), apt-utils for the NVIDIA roles'
# package_dir source (apt-ftparchive) and python3-cryptography for the control plane role's
# certificates: a host whose only source is the bundle has no package lists for anything else.
PACKAGES = (
    "runc",
    "containernetworking-plugins",
    "conntrack",
    "iptables",
    "iproute2",
    "ethtool",
    "socat",
    "kmod",
    "python3-venv",
    "python3-apt",
    "apt-utils",
    "python3-cryptography",
)


def read_os_release(text: str) -> dict[str, str]:
    """``/etc/os-release`` as a dict (values unquoted)."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and not key.startswith("#"):
            values[key.strip()] = value.strip().strip("\"'")
    return values


def build_host_problem(target: Target, os_release: dict[str, str], dpkg_arch: str) -> str | None:
    """Why this host cannot fetch the target's packages, or None."""
    name, version = os_release.get("NAME", "?"), os_release.get("VERSION_ID", "?")
    if not name.startswith(target.os) or version.split(".")[0] != target.os_version:
        return (
            f"the bundle's packages come from the build host's apt sources, and this host runs "
            f"{name} {version}, not {target.os} {target.os_version}: build --target "
            f"{target.name} on a {target.os} {target.os_version} host (a container of it will do)"
        )
    arch = {"amd64": "x86_64", "arm64": "aarch64"}.get(dpkg_arch, dpkg_arch)
    if arch != target.arch:
        return f"this host's packages are {dpkg_arch}; target {target.name} is {target.arch}"
    return None


def check_build_host(target: Target) -> None:
    try:
        os_release = read_os_release(Path("/etc/os-release").read_text())
    except OSError as error:
        raise BundleError(f"cannot read /etc/os-release: {error}") from None
    if shutil.which("apt-get") is None or shutil.which("dpkg") is None:
        raise BundleError("the bundle's packages are fetched with apt-get, which is not here")
    arch = run(["dpkg", "--print-architecture"], "reading the package architecture").strip()
    problem = build_host_problem(target, os_release, arch)
    if problem:
        raise BundleError(problem, field="target", value=target.name)


def closure_names(depends_output: str) -> list[str]:
    """The real package names in ``apt-cache depends --recurse`` output (its unindented lines;
    virtual packages, shown as ``<name>``, are left out: a real one provides them)."""
    names = []
    for line in depends_output.splitlines():
        if line and not line[0].isspace() and not line.startswith("<"):
            names.append(line.strip())
    return sorted(set(names))


def stanzas(show_output: str) -> list[dict[str, str]]:
    """``apt-cache show`` / ``dpkg-deb -f`` output as one dict per package (continuation lines
    folded into their field)."""
    found: list[dict[str, str]] = []
    current: dict[str, str] = {}
    last = ""
    for line in [*show_output.splitlines(), ""]:
        if not line.strip():
            if current:
                found.append(current)
            current, last = {}, ""
        elif line[0].isspace() and last:
            current[last] += "\n" + line
        else:
            key, _, value = line.partition(":")
            last = key.strip()
            current[last] = value.strip()
    return found


def closure(packages: Iterable[str]) -> list[dict[str, str]]:
    """The candidate stanza of every package ``packages`` need, Essential ones left out."""
    names = closure_names(
        run(
            [
                "apt-cache",
                "depends",
                "--recurse",
                "--no-recommends",
                "--no-suggests",
                "--no-conflicts",
                "--no-breaks",
                "--no-replaces",
                "--no-enhances",
                *packages,
            ],
            "resolving the packages' dependencies (apt-cache depends; run apt-get update?)",
        )
    )
    shown = stanzas(run(["apt-cache", "show", "--no-all-versions", *names], "apt-cache show"))
    return [s for s in shown if s.get("Essential", "no") != "yes" and "Filename" in s]


def fetch(packages: Sequence[str], cache: Path, out: Path) -> dict[str, str]:
    """Copy the closure of ``packages`` into ``out`` (downloading only what ``cache`` lacks)
    and write the index; returns package -> version for the manifest."""
    wanted = closure(packages)
    cache.mkdir(parents=True, exist_ok=True)
    missing = [s for s in wanted if not (cache / Path(s["Filename"]).name).is_file()]
    if missing:
        partial = cache / "partial"
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir()
        run(
            ["apt-get", "download", *(f"{s['Package']}={s['Version']}" for s in missing)],
            "downloading the packages",
            cwd=partial,
        )
        for stanza in missing:
            # apt-get download escapes an epoch's colon in the file name; the pool name has none.
            version = stanza["Version"].replace(":", "%3a")
            got = partial / f"{stanza['Package']}_{version}_{stanza['Architecture']}.deb"
            if not got.is_file():
                raise BundleError(f"apt-get download gave no {got.name} for {stanza['Package']}")
            got.replace(cache / Path(stanza["Filename"]).name)
        shutil.rmtree(partial, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    for stanza in wanted:
        name = Path(stanza["Filename"]).name
        shutil.copy2(cache / name, out / name)
    write_index(out)
    return {s["Package"]: s["Version"] for s in wanted if s["Package"] in packages}


def index_stanza(control: str, filename: str, data: bytes) -> str:
    """One Packages entry: the package's control fields, then where the file is and its sums."""
    fields = control.strip("\n")
    return (
        f"{fields}\nFilename: ./{filename}\nSize: {len(data)}\n"
        f"MD5sum: {hashlib.md5(data, usedforsecurity=False).hexdigest()}\n"
        f"SHA256: {hashlib.sha256(data).hexdigest()}\n"
    )


def write_index(directory: Path) -> None:
    """``Packages`` and ``Packages.gz`` for the .deb files in ``directory`` (a flat repository)."""
    entries = []
    for deb in sorted(directory.glob("*.deb")):
        control = run(["dpkg-deb", "-f", str(deb)], f"reading {deb.name}")
        entries.append(index_stanza(control, deb.name, deb.read_bytes()))
    text = "\n".join(entries).encode()
    (directory / "Packages").write_bytes(text)
    (directory / "Packages.gz").write_bytes(gzip.compress(text, mtime=0))
