#!/usr/bin/env python3
"""Is this copy of an offline bundle exactly what was built, for these hosts?

The one check of a bundle: the vslice_bundle role runs this file, from the role, with the
controller's own Python before any host changes, and ``vslice bundle verify`` imports it (the
package's ``vslice_build/bundle/verify_bundle.py`` is a link to this file). It reads nothing
from the bundle but data: a checker shipped inside a bundle could be edited with it.

manifest.json is the one list. A bundle passes when

- every path under it is a directory or a regular file: no symbolic link, device or FIFO,
  wherever it points;
- every regular file but manifest.json and SHA256SUMS is listed in the manifest, with its size
  and SHA-256, and every listed file is there with that size and SHA-256: nothing unlisted is
  copied to a host or installed by pip;
- every path the manifest or SHA256SUMS names is relative, with no ``..``, ``.`` or empty part;
- SHA256SUMS lists exactly the manifest's files with the same checksums, plus manifest.json's
  own, so the two cannot disagree about what the bundle is;
- the manifest's architecture is one vslice builds for and that of every host given
  (Debian's names amd64 and arm64 are x86_64 and aarch64).

Standard library only, and Python 3.9 or newer: the controller needs no vslice.

Usage: verify_bundle.py BUNDLE [--host NAME=ARCH]... [--sizes-only]
Exit status 0 when the bundle passes; 1 with every problem on stderr; 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import stat
import sys
from typing import Any

FORMAT = 1
MANIFEST_FILE = "manifest.json"
SUMS_FILE = "SHA256SUMS"
SHOWN_PROBLEMS = 10
# The architectures bundles are built for, under Ansible's (uname's) names, and the names
# Debian and Go give them.
ARCHITECTURES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_SUMS_LINE = re.compile(r"^([0-9a-f]{64})  (.+)$")
_BLOCK = 1 << 20


def shown(path: str) -> str:
    """``path`` as a message prints it: a name with a newline or escape cannot forge a line."""
    return path if path.isprintable() else ascii(path)


def path_problem(path: object) -> str | None:
    """Why ``path`` is not a plain relative path inside the bundle, or None."""
    if not isinstance(path, str) or not path:
        return f"{path!r} is not a path"
    if path.startswith("/"):
        return f"{shown(path)} is an absolute path"
    if "\\" in path or not path.isprintable():
        return f"{shown(path)} has a backslash or a control character"
    if any(part in ("", ".", "..") for part in path.split("/")):
        return f"{shown(path)} is not a plain path inside the bundle (an empty, . or .. part)"
    return None


def architecture(name: str) -> str | None:
    """``name`` under uname's spelling, or None for an architecture no bundle is built for."""
    return ARCHITECTURES.get(name)


class _Listed:
    """What the manifest lists: files by path as (size, sha256), and the problems in it."""

    def __init__(self) -> None:
        self.files: dict[str, tuple[int, str]] = {}
        self.arch: str | None = None
        self.target = "?"
        self.problems: list[str] = []


def _read_manifest(data: Any) -> _Listed:
    listed = _Listed()
    problems = listed.problems
    if not isinstance(data, dict):
        problems.append(f"{MANIFEST_FILE} holds no JSON object")
        return listed
    if data.get("format") != FORMAT:
        problems.append(
            f"{MANIFEST_FILE} has format {data.get('format')!r}; this check reads format "
            f"{FORMAT}: build the bundle with the vslice these roles come from"
        )
        return listed
    files = data.get("files")
    if not isinstance(files, dict):
        problems.append(f"{MANIFEST_FILE}: files must be an object of path: sha256 and size")
        files = {}
    for path, entry in sorted(files.items()):
        bad = path_problem(path)
        if bad is not None:
            problems.append(f"{MANIFEST_FILE}: files: {bad}")
            continue
        if path in (MANIFEST_FILE, SUMS_FILE):
            problems.append(f"{MANIFEST_FILE} lists {path}, which is the bundle's own list")
            continue
        size = entry.get("size") if isinstance(entry, dict) else None
        digest = entry.get("sha256") if isinstance(entry, dict) else None
        if (
            not isinstance(size, int)
            or isinstance(size, bool)
            or size < 0
            or not isinstance(digest, str)
            or not _SHA256.match(digest)
        ):
            problems.append(f"{MANIFEST_FILE} gives {shown(path)} a malformed size or SHA-256")
            continue
        listed.files[path] = (size, digest)
    _read_target(data, listed)
    _check_references(data, listed)
    return listed


def _read_target(data: dict[str, Any], listed: _Listed) -> None:
    target = data.get("target")
    arch = target.get("arch") if isinstance(target, dict) else None
    if isinstance(target, dict) and isinstance(target.get("name"), str):
        listed.target = target["name"]
    if not isinstance(arch, str) or architecture(arch) is None:
        known = ", ".join(sorted(set(ARCHITECTURES.values())))
        listed.problems.append(
            f"{MANIFEST_FILE}: target.arch {arch!r} is not an architecture bundles are built "
            f"for ({known})"
        )
        return
    listed.arch = architecture(arch)


def _check_references(data: dict[str, Any], listed: _Listed) -> None:
    """The files other roles take from the bundle by name must be listed ones."""
    python = data.get("python")
    python = python if isinstance(python, dict) else {}
    images = data.get("images")
    images = images if isinstance(images, dict) else {}
    named: dict[str, object] = {"python.wheel": python.get("wheel"), "shim": data.get("shim")}
    for key, image in sorted(images.items()):
        named[f"images.{key}.file"] = image.get("file") if isinstance(image, dict) else None
    for field, path in named.items():
        bad = path_problem(path)
        if bad is not None:
            listed.problems.append(f"{MANIFEST_FILE}: {field} {bad}")
        elif path not in listed.files:
            listed.problems.append(f"{MANIFEST_FILE} names {path} ({field}) but does not list it")
    wheelhouse = python.get("wheelhouse")
    bad = path_problem(wheelhouse)
    if bad is not None:
        listed.problems.append(f"{MANIFEST_FILE}: python.wheelhouse {bad}")


def _read_sums(text: str, manifest_digest: str, listed: _Listed) -> list[str]:
    """How SHA256SUMS disagrees with the manifest (and with manifest.json's own checksum)."""
    problems: list[str] = []
    sums: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        match = _SUMS_LINE.match(line)
        if match is None:
            problems.append(f"{SUMS_FILE} line {number} is not '<sha256>  <path>': {shown(line)}")
            continue
        digest, path = match.groups()
        bad = path_problem(path)
        if bad is not None:
            problems.append(f"{SUMS_FILE} line {number}: {bad}")
        elif path in sums:
            problems.append(f"{SUMS_FILE} lists {path} twice")
        else:
            sums[path] = digest
    expected = {path: digest for path, (_, digest) in listed.files.items()}
    expected[MANIFEST_FILE] = manifest_digest
    for path in sorted(set(sums) - set(expected)):
        problems.append(f"{SUMS_FILE} lists {shown(path)}, which {MANIFEST_FILE} does not")
    for path, digest in sorted(expected.items()):
        if path not in sums:
            problems.append(f"{SUMS_FILE} does not list {path}, which {MANIFEST_FILE} does")
        elif sums[path] != digest and path == MANIFEST_FILE:
            problems.append(
                f"{SUMS_FILE} does not match {MANIFEST_FILE}: its SHA-256 is {digest[:16]}..., "
                f"{SUMS_FILE} says {sums[path][:16]}... (one of them was edited after the "
                "bundle was built)"
            )
        elif sums[path] != digest:
            problems.append(
                f"{SUMS_FILE} gives {path} SHA-256 {sums[path][:16]}...; {MANIFEST_FILE} says "
                f"{digest[:16]}..."
            )
    return problems


def scan(root: str) -> tuple[dict[str, int], list[str]]:
    """Every regular file under ``root`` (but manifest.json and SHA256SUMS) with its size, and
    every path that is neither a directory nor a regular file. Links are never followed."""
    found: dict[str, int] = {}
    problems: list[str] = []
    pending = [""]
    while pending:
        relative = pending.pop()
        try:
            with os.scandir(os.path.join(root, relative) if relative else root) as listing:
                entries = sorted(listing, key=lambda e: e.name)
        except OSError as error:
            problems.append(f"{shown(relative or '.')} cannot be read ({error.strerror})")
            continue
        for entry in entries:
            path = f"{relative}/{entry.name}" if relative else entry.name
            mode = entry.stat(follow_symlinks=False).st_mode
            if stat.S_ISLNK(mode):
                target = os.readlink(entry.path)
                problems.append(
                    f"{shown(path)} is a symbolic link (to {shown(target)}); a bundle holds "
                    "only regular files"
                )
            elif stat.S_ISDIR(mode):
                pending.append(path)
            elif not stat.S_ISREG(mode):
                problems.append(f"{shown(path)} is not a regular file or a directory")
            elif path not in (MANIFEST_FILE, SUMS_FILE):
                found[path] = entry.stat(follow_symlinks=False).st_size
    return found, problems


def sha256(path: str) -> str:
    """The file's SHA-256, read without following a link put there since the scan."""
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(descriptor, "rb") as file:
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            raise OSError(f"{path} is not a regular file")
        digest = hashlib.sha256()
        for block in iter(lambda: file.read(_BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


def _file_problems(root: str, listed: _Listed, found: dict[str, int], hashes: bool) -> list[str]:
    problems: list[str] = []
    for path, (size, digest) in sorted(listed.files.items()):
        if path not in found:
            if not os.path.lexists(os.path.join(root, path)):
                problems.append(f"{path} is missing")
            continue  # a link or a directory where the file should be: the scan named it
        if found[path] != size:
            problems.append(f"{path} has {found[path]} bytes; the manifest says {size}")
            continue
        if not hashes:
            continue
        try:
            have = sha256(os.path.join(root, path))
        except OSError as error:
            problems.append(f"{path} cannot be read: {error}")
            continue
        if have != digest:
            problems.append(
                f"{path} has SHA-256 {have[:16]}...; the manifest says {digest[:16]}..."
            )
    for path in sorted(set(found) - set(listed.files)):
        problems.append(f"{shown(path)} is not in the manifest")
    return problems


def _read_own_file(root: str, name: str) -> bytes:
    """manifest.json or SHA256SUMS, which must be regular files at the bundle's top."""
    path = os.path.join(root, name)
    if os.path.islink(path):
        raise OSError(f"{name} is a symbolic link; a bundle holds only regular files")
    try:
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as error:
        raise OSError(f"{name} cannot be read ({error.strerror})") from None
    with os.fdopen(descriptor, "rb") as file:
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            raise OSError(f"{name} is not a regular file")
        return file.read()


def check(root: str, hosts: dict[str, str] | None = None, hashes: bool = True) -> list[str]:
    """Everything wrong with the bundle at ``root`` for ``hosts`` (each as the message should
    call it, to its architecture); empty when it passes. ``hashes=False`` compares sizes only
    (manifest.json's SHA-256 is still checked against SHA256SUMS)."""
    if not os.path.isdir(root):
        return [f"{root} is not a directory (unpack a bundle tarball with tar -xf)"]
    try:
        manifest = _read_own_file(root, MANIFEST_FILE)
        data = json.loads(manifest)
    except OSError as error:
        return [f"{error}: is {root} a bundle?"]
    except ValueError as error:
        return [f"{MANIFEST_FILE} is not JSON: {error}"]
    listed = _read_manifest(data)
    wrong = list(listed.problems)
    try:
        sums = _read_own_file(root, SUMS_FILE).decode("utf-8")
    except (OSError, UnicodeDecodeError) as error:
        wrong.append(str(error) if isinstance(error, OSError) else f"{SUMS_FILE}: {error}")
    else:
        wrong += _read_sums(sums, hashlib.sha256(manifest).hexdigest(), listed)
    files, odd = scan(root)
    wrong += odd + _file_problems(root, listed, files, hashes)
    return wrong + host_problems(listed, hosts or {})


def host_problems(listed: _Listed, hosts: dict[str, str]) -> list[str]:
    if listed.arch is None:
        return []
    return [
        f"{name} is {arch}; the bundle is for {listed.arch} (target {listed.target}): build "
        "one for that architecture"
        for name, arch in sorted(hosts.items())
        if architecture(arch) != listed.arch
    ]


def report(root: str, found: list[str]) -> str:
    """One message for people and for Ansible's output: the count and the first problems."""
    shown_now = "; ".join(found[:SHOWN_PROBLEMS])
    more = f"; and {len(found) - SHOWN_PROBLEMS} more" if len(found) > SHOWN_PROBLEMS else ""
    noun = "problem" if len(found) == 1 else "problems"
    return f"bundle {root} does not match its manifest ({len(found)} {noun}): {shown_now}{more}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="check an offline bundle against its manifest")
    parser.add_argument("bundle", help="the bundle's directory")
    parser.add_argument(
        "--host",
        action="append",
        default=[],
        metavar="NAME=ARCH",
        help="a host the bundle is for and its architecture (Ansible's ansible_architecture)",
    )
    parser.add_argument(
        "--sizes-only", action="store_true", help="compare sizes, not each file's SHA-256"
    )
    args = parser.parse_args(argv)
    hosts: dict[str, str] = {}
    for given in args.host:
        name, sep, arch = given.rpartition("=")
        if not sep or not name:
            parser.error(f"--host {given!r} is not NAME=ARCH")
        hosts[f"host {name}"] = arch
    found = check(args.bundle, hosts, hashes=not args.sizes_only)
    if found:
        print(report(args.bundle, found), file=sys.stderr)
        return 1
    print(f"bundle {args.bundle}: every file is listed and matches the manifest")
    return 0


if __name__ == "__main__":
    sys.exit(main())
