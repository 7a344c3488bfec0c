"""A fingerprint of what a lab with real nodes may touch on the host outside its state dir,
taken before ``lab up`` and compared after ``lab down`` (tests/e2e/test_lab_down.py).

It is deliberately independent of ``vslice_lab.hostchanges``: the lab's own record of what
it changed is what is under test here.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

SYSCTLS = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
    "net/ipv4/ip_forward",
)
PATHS = (
    "/var/lib/kubelet",
    "/var/log/containers",
    "/var/log/pods",
    "/var/lib/cni",
    "/etc/cni",
    "/opt/cni",
    "/var/lib/containerd",
    "/run/containerd",
    "/opt/containerd",
    "/etc/containerd",
    "/var/run/netns",
    "/etc/cdi",
    "/var/run/cdi",
    "/var/run/nri",
    "/etc/kubernetes",
    "/run/vslice-lab-real-node",
)
PROCESS_NAMES = ("kubelet", "containerd", "containerd-shim", "runc", "vslice-smoke", "pause")


@dataclass(frozen=True)
class HostPrint:
    sysctls: dict[str, str]
    paths: dict[str, bool]
    mounts: frozenset[str]
    links: frozenset[str]
    cgroups: frozenset[str]
    processes: frozenset[str]


def _processes() -> frozenset[str]:
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                comm = (entry / "comm").read_text().strip()
                stat = (entry / "stat").read_text()
                dead = stat[stat.rindex(")") + 2 :].startswith("Z")  # exited, not yet reaped
                if not dead and any(comm.startswith(name) for name in PROCESS_NAMES):
                    found.add(f"{entry.name}:{comm}")
    return frozenset(found)


def fingerprint() -> HostPrint:
    sysctls = {}
    for name in SYSCTLS:
        with contextlib.suppress(OSError):
            sysctls[name] = (Path("/proc/sys") / name).read_text().strip()
    mounts = frozenset(
        line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()
    )
    cgroup_root = Path("/sys/fs/cgroup")
    cgroups = frozenset(
        str(c / "kubepods") for c in cgroup_root.iterdir() if (c / "kubepods").exists()
    )
    paths = {path: Path(path).exists() for path in PATHS}
    paths |= {str(p): True for p in Path("/run").glob("vslice-lab-*")}
    return HostPrint(
        sysctls=sysctls,
        paths=paths,
        mounts=mounts,
        links=frozenset(p.name for p in Path("/sys/class/net").iterdir()),
        cgroups=cgroups,
        processes=_processes(),
    )


def differences(before: HostPrint, after: HostPrint) -> list[str]:
    """What ``after`` has that ``before`` did not (and sysctls that changed)."""
    found = [
        f"sysctl {name}: {before.sysctls.get(name)} -> {value}"
        for name, value in after.sysctls.items()
        if before.sysctls.get(name) != value
    ]
    found += [
        f"path {p} now exists"
        for p, there in after.paths.items()
        if there and not before.paths.get(p)
    ]
    found += [f"mount {m}" for m in sorted(after.mounts - before.mounts)]
    found += [f"network device {d}" for d in sorted(after.links - before.links)]
    found += [f"cgroup {c}" for c in sorted(after.cgroups - before.cgroups)]
    found += [f"process {p}" for p in sorted(after.processes - before.processes)]
    return found
