"""What a real node changes on the host outside the lab's state directory, and undoing it.

A kubelet and containerd are not contained by a state directory: the kubelet sets kernel
sysctls (``vm.overcommit_memory``, ``kernel.panic``, ...), keeps its device-plugin directory
at the fixed path ``/var/lib/kubelet/device-plugins``, writes container log links into
``/var/log/containers``; libcni caches results in ``/var/lib/cni``; the bridge plugin creates
a network device; the kubelet makes ``kubepods`` cgroups; containers leave mounts and
processes (runc shims) that outlive containerd. Everything the lab can point into its state
directory is pointed there (see ``realnode``); this module takes care of the rest.

:func:`snapshot` runs before the first real-node process starts and records the sysctl values
and which of the fixed paths and cgroups already existed; :func:`restore` (called by ``down``
and by a failed ``up``) kills what is left of the containers, unmounts everything below the
state directory, deletes the bridge, restores the sysctls, and removes the paths and cgroups
that did not exist before. Every step is best effort and idempotent: a second ``down`` finds
nothing to do, and a crashed lab is cleaned by the next ``up`` from the saved snapshot.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SYSCTLS = (
    "vm.overcommit_memory",
    "vm.panic_on_oom",
    "kernel.panic",
    "kernel.panic_on_oops",
    "kernel.keys.root_maxkeys",
    "kernel.keys.root_maxbytes",
)
"""The kernel tunables the kubelet sets at start (``protectKernelDefaults: false``)."""

FIXED_PATHS = ("/var/lib/kubelet", "/var/log/containers", "/var/lib/cni")
"""Paths the kubelet and libcni use whatever their configuration says."""

CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_NAMES = ("kubepods", "kubepods.slice")
MNT_DETACH = 2


@dataclass
class HostSnapshot:
    """The host as it was before the lab's real nodes started."""

    sysctls: dict[str, str] = field(default_factory=dict)
    existed: list[str] = field(default_factory=list)
    cgroups_existed: list[str] = field(default_factory=list)
    bridges: list[str] = field(default_factory=list)
    links: dict[str, list[str]] = field(default_factory=dict)
    """For fixed directories that already existed: the entries they held then."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> HostSnapshot:
        return cls(
            sysctls={str(k): str(v) for k, v in dict(data.get("sysctls", {})).items()},
            existed=[str(p) for p in data.get("existed", [])],
            cgroups_existed=[str(p) for p in data.get("cgroups_existed", [])],
            bridges=[str(b) for b in data.get("bridges", [])],
            links={str(k): [str(x) for x in v] for k, v in dict(data.get("links", {})).items()},
        )


def _sysctl_path(name: str) -> Path:
    return Path("/proc/sys") / name.replace(".", "/")


def read_sysctls(names: Iterable[str] = SYSCTLS) -> dict[str, str]:
    values = {}
    for name in names:
        with contextlib.suppress(OSError):
            values[name] = _sysctl_path(name).read_text().strip()
    return values


def _cgroups() -> list[Path]:
    if not CGROUP_ROOT.is_dir():
        return []
    found = []
    for controller in CGROUP_ROOT.iterdir():
        for name in CGROUP_NAMES:
            candidate = controller / name
            if candidate.is_dir():
                found.append(candidate)
    return found


def snapshot(bridges: Iterable[str]) -> HostSnapshot:
    """Record the host before a real node starts (see the module docstring)."""
    existed = [path for path in FIXED_PATHS if Path(path).exists()]
    links = {
        path: sorted(entry.name for entry in Path(path).iterdir())
        for path in existed
        if Path(path).is_dir() and path != "/var/lib/kubelet"
    }
    return HostSnapshot(
        sysctls=read_sysctls(),
        existed=existed,
        cgroups_existed=[str(p) for p in _cgroups()],
        bridges=list(bridges),
        links=links,
    )


# -- processes -------------------------------------------------------------------------------


def _processes() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command line) of every process."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        table[int(entry.name)] = (ppid, cmdline)
    return table


def container_processes(marker: str) -> list[int]:
    """Runtime shims whose command line holds ``marker`` (the node's containerd socket or
    state directory) and every descendant of theirs (the containers' processes)."""
    table = _processes()
    roots = {pid for pid, (_, cmd) in table.items() if marker in cmd and "containerd-shim" in cmd}
    found = set(roots)
    grew = True
    while grew:
        children = {pid for pid, (ppid, _) in table.items() if ppid in found} - found
        grew = bool(children)
        found |= children
    return sorted(found)


def kill_containers(marker: str, timeout: float = 10.0) -> int:
    """SIGKILL the shims and containers of one node; the number still there after ``timeout``."""
    pids = container_processes(marker)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while pids and time.monotonic() < deadline:
        for pid in pids:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)
        pids = [pid for pid in pids if Path(f"/proc/{pid}").exists() and not _zombie(pid)]
        time.sleep(0.05)
    return len(pids)


def _zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2 :].split()[0] == "Z"


# -- mounts ----------------------------------------------------------------------------------


def _unescape(field_text: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal (``\\040``)."""
    out, i = [], 0
    while i < len(field_text):
        if field_text[i] == "\\" and field_text[i + 1 : i + 4].isdigit():
            out.append(chr(int(field_text[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field_text[i])
            i += 1
    return "".join(out)


def mounts_under(root: Path) -> list[str]:
    """Mount points at or below ``root``, deepest first."""
    prefix = str(root.resolve())
    found = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            parts = line.split()
            if len(parts) > 4:
                point = _unescape(parts[4])
                if point == prefix or point.startswith(prefix + "/"):
                    found.append(point)
    return sorted(set(found), key=lambda p: (-p.count("/"), p))


def unmount_all(root: Path) -> list[str]:
    """Detach every mount below ``root`` (repeated: stacked mounts show one at a time)."""
    libc = ctypes.CDLL(None, use_errno=True)
    done: list[str] = []
    for _ in range(10):
        points = mounts_under(root)
        if not points:
            break
        for point in points:
            if libc.umount2(point.encode(), MNT_DETACH) == 0:
                done.append(point)
    return done


# -- the rest --------------------------------------------------------------------------------


def delete_bridge(name: str) -> None:
    if Path(f"/sys/class/net/{name}").exists():
        subprocess.run(["ip", "link", "delete", name], capture_output=True, check=False)


def _remove_cgroup_tree(path: Path) -> None:
    for attempt in range(20):
        nested = [p for p in path.rglob("*") if p.is_dir()]
        dirs = [*sorted(nested, key=lambda p: -len(p.parts)), path]
        for directory in dirs:
            with contextlib.suppress(OSError):
                directory.rmdir()
        if not path.exists():
            return
        time.sleep(0.05 * (attempt + 1))


def restore(snap: HostSnapshot) -> list[str]:
    """Undo what real nodes changed (see the module docstring); what could not be undone."""
    problems = []
    for name in snap.bridges:
        delete_bridge(name)
    for name, value in snap.sysctls.items():
        try:
            if _sysctl_path(name).read_text().strip() != value:
                _sysctl_path(name).write_text(value + "\n")
        except OSError as error:
            problems.append(f"sysctl {name}={value}: {error.strerror}")
    for path in FIXED_PATHS:
        target = Path(path)
        if path not in snap.existed:
            shutil.rmtree(target, ignore_errors=True)
        elif path in snap.links and target.is_dir():
            for entry in target.iterdir():
                if entry.name not in snap.links[path]:
                    with contextlib.suppress(OSError):
                        if entry.is_dir() and not entry.is_symlink():
                            shutil.rmtree(entry)
                        else:
                            entry.unlink()
        if path not in snap.existed and target.exists():
            problems.append(f"{path} could not be removed")
    for cgroup in _cgroups():
        if str(cgroup) not in snap.cgroups_existed:
            _remove_cgroup_tree(cgroup)
            if cgroup.exists():
                problems.append(f"cgroup {cgroup} still has processes")
    return problems
