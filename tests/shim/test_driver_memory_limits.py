"""Driver-enforced memory limits: NVIDIA's R615 drivers cap a cgroup's GPU memory themselves
(nvmlDeviceSetMemoryLimits_v1), and vslice's createRuntime hook (shim/hook) sets that cap on a
container's cgroup. The fake driver keeps the limits in the node's shared state and enforces
them below any shim, so these tests put real processes into real cgroups: they need root (CI
runs as root) and a cgroup hierarchy they may write (v1's memory controller, or v2).

The NVML side is driven by build/tests/memlimits, the CUDA side by build/tests/probe, and the
hook is build/hook/vslice-memory-limit."""

from __future__ import annotations

import errno
import os
import secrets
import stat
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import GIB, MIB, Outcome, Probe

GPU0 = "GPU-4c1f0e3a-0000-4000-8000-0000000000a0"
GPU1 = "GPU-4c1f0e3a-0000-4000-8000-0000000000a1"
NODE = {"FAKE_NVIDIA_GPUS": f"{GPU0},Fake-H100,8g;{GPU1},Fake-H100,8g"}
MAX = 2**64 - 1  # VSLICE_NVML_MEMORY_LIMIT_MAX: "no limit"

NVML_SUCCESS = 0
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_RESOURCES = 23
CUDA_SUCCESS = 0
CUDA_ERROR_OUT_OF_MEMORY = 2

HOOK_FAILED, HOOK_USAGE, HOOK_UNAVAILABLE = 1, 2, 3
LIMITS_TABLE = 256  # FAKE_MAX_LIMITS (shim/fake/device.h)


NOBODY = 65534


def run(
    argv: list[str],
    env: dict[str, str],
    cgroup: Path | None = None,
    stdin: str = "",
    user: int | None = None,
) -> Outcome:
    """Runs argv, first moved into cgroup when one is given; as ``user`` (uid and gid, no
    supplementary groups) when one is given."""
    if cgroup is not None:
        argv = ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(cgroup), *argv]
    who: dict[str, object] = (
        {} if user is None else {"user": user, "group": user, "extra_groups": []}
    )
    result = subprocess.run(
        argv, env=env, input=stdin, capture_output=True, text=True, timeout=60, **who
    )
    return Outcome(result.returncode, result.stdout, result.stderr)


@dataclass
class Node:
    """The fake node of one test (two 8 GiB GPUs, one shared state) and its programs."""

    probe: Probe

    def env(self, shim: bool = False, **extra: str) -> dict[str, str]:
        return self.probe.env(shim, **NODE, **extra)

    def program(self, name: str) -> str:
        return str(self.probe.build / "tests" / name)

    def memlimits(self, *commands: str, cgroup: Path | None = None) -> Outcome:
        return run([self.program("memlimits"), *commands], self.env(), cgroup)

    def cuda(
        self, *commands: str, cgroup: Path | None = None, shim: bool = False, **env: str
    ) -> Outcome:
        """The probe program on the fake driver, without the shim unless asked."""
        return run([self.program("probe"), *commands], self.env(shim, **env), cgroup)

    def hook(self, *args: str, stdin: str = "", **env: str) -> Outcome:
        hook = str(self.probe.build / "hook" / "vslice-memory-limit")
        return run([hook, *args], self.env(False, **env), stdin=stdin)


@pytest.fixture
def node(probe: Probe) -> Node:
    return Node(probe)


@pytest.fixture
def root() -> None:
    # A failure, not a skip: these are the driver backend's only checks outside the lab, and
    # CI runs as root (so does the lab, which needs cgroups too).
    if os.geteuid() != 0:
        pytest.fail("setting a driver memory limit and moving processes between cgroups need root")


@dataclass
class Cgroups:
    """Throwaway cgroups: base (made first) and below it, and the processes put into them."""

    base: Path
    made: list[Path] = field(default_factory=list)
    processes: list[subprocess.Popen[str]] = field(default_factory=list)

    def make(self, *names: str) -> Path:
        path = self.base.joinpath(*names)
        path.mkdir()
        self.made.append(path)
        return path

    def start(self, cgroup: Path, argv: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
        process = subprocess.Popen(
            ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(cgroup), *argv],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.processes.append(process)
        return process

    def hold(self, node: Node, cgroup: Path, *commands: str) -> Outcome:
        """The probe program running commands in cgroup, then holding what it took until the
        test ends; what it printed before holding."""
        holder = self.start(cgroup, [node.program("probe"), *commands, "hold"], node.env())
        assert holder.stdout is not None
        printed: list[str] = []
        for line in holder.stdout:
            if line.strip() == "ready":
                return Outcome(0, "".join(printed), "")
            printed.append(line)
        raise AssertionError(f"holder ended early: {holder.stderr.read() if holder.stderr else ''}")

    def sleeper(self, cgroup: Path) -> int:
        """A process in cgroup (once this returns), as a container's first process."""
        pid = self.start(cgroup, ["sleep", "60"], dict(os.environ)).pid
        deadline = time.monotonic() + 10
        while str(pid) not in (cgroup / "cgroup.procs").read_text().split():
            assert time.monotonic() < deadline, f"pid {pid} never reached {cgroup}"
            time.sleep(0.01)
        return pid

    def remove(self) -> None:
        for process in self.processes:
            process.kill()
            process.communicate()
        for path in reversed(self.made):
            for _ in range(50):  # a cgroup empties a moment after its last process is reaped
                try:
                    path.rmdir()
                    break
                except OSError:
                    time.sleep(0.02)


def cgroup_root() -> Path:
    """Where this host keeps the memory controller's hierarchy: v1's own, or v2's one tree."""
    v1 = Path("/sys/fs/cgroup/memory")
    return v1 if v1.is_dir() else Path("/sys/fs/cgroup")


@pytest.fixture
def cgroups(root: None) -> Iterator[Cgroups]:
    groups = Cgroups(cgroup_root() / f"vslice-test-{secrets.token_hex(4)}")
    groups.make()
    try:
        yield groups
    finally:
        groups.remove()


def limit(node: Node, cgroup: Path, bytes_: int, gpu: int = 0) -> None:
    assert node.memlimits(f"set:{gpu}:{cgroup}:0:{bytes_}").code("set") == NVML_SUCCESS


# ---- the C layout is NVIDIA's


def test_the_limit_structs_are_laid_out_as_in_nvidias_bindings(shim_build: Path) -> None:
    # cuda-bindings is in the dev environment: its absence is a setup failure, not a skip.
    from cuda.bindings import nvml  # type: ignore[import-untyped]

    out = subprocess.run(
        [str(shim_build / "tests" / "abi_values")], capture_output=True, text=True, check=True
    ).stdout
    c = dict(line.rsplit(" ", 1) for line in out.splitlines())
    names = {"name_space": "nameSpace", "soft_limit": "softLimit", "hard_limit": "hardLimit"}
    names["current_used"] = "currentUsed"
    for struct, dtype in [
        ("nvmlSetMemoryLimits_v1_t", nvml.set_memory_limits_v1_dtype),
        ("nvmlGetMemoryLimits_v1_t", nvml.get_memory_limits_v1_dtype),
    ]:
        assert int(c[f"sizeof({struct})"]) == dtype.itemsize
        for name, (_, offset) in dtype.fields.items():
            assert int(c[f"offsetof({struct}, {names[name]})"]) == offset, f"{struct}.{name}"
    assert int(c["NVML_ERROR_NO_PERMISSION"]) == int(nvml.Return.ERROR_NO_PERMISSION)
    assert int(c["NVML_ERROR_INSUFFICIENT_RESOURCES"]) == int(
        nvml.Return.ERROR_INSUFFICIENT_RESOURCES
    )


def test_the_fake_nvml_exports_the_entry_points_and_its_r570_build_does_not(
    shim_build: Path,
) -> None:
    def exported(library: Path) -> set[str]:
        out = subprocess.run(
            ["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True, check=True
        ).stdout
        return {line.split()[-1] for line in out.splitlines()}

    wanted = {"nvmlDeviceSetMemoryLimits_v1", "nvmlDeviceGetMemoryLimits_v1"}
    assert wanted <= exported(shim_build / "fake" / "libnvidia-ml.so.1")
    assert not wanted & exported(shim_build / "tests" / "r570" / "libnvidia-ml.so.1")


# ---- the cgroup rule shared by the fake and the hook


@pytest.mark.parametrize(
    ("text", "namespace"),
    [
        ("12:pids:/\n4:memory:/kubepods/p1/c\n0::/\n", "/sys/fs/cgroup/memory/kubepods/p1/c"),
        ("5:cpu,memory:/a/b/\n", "/sys/fs/cgroup/memory/a/b"),
        ("0::/kubepods.slice/c.scope\n", "/sys/fs/cgroup/kubepods.slice/c.scope"),
        ("0::/init.scope\n7:memory:/x\n", "/sys/fs/cgroup/memory/x"),  # hybrid: v1's memory wins
        ("0::/\n", "/sys/fs/cgroup"),  # a private cgroup namespace: the fake's blind spot
        ("3:cpu,cpuacct:/a\n2:memoryx:/b\n", None),
        ("", None),
    ],
)  # fmt: skip
def test_a_process_namespace_is_its_memory_cgroups_directory(
    node: Node, text: str, namespace: str | None
) -> None:
    file = node.probe.tmp / "cgroup"
    file.write_text(text)
    line = node.memlimits(f"rule:{file}").line("rule")
    assert line[1:] == (["0", namespace] if namespace else [str(errno.ENODATA), "-"])


# ---- probe


def test_probe_finds_the_fake_driver_able_to_enforce_limits(node: Node) -> None:
    out = node.hook("probe")
    assert (out.returncode, out.stdout) == (0, "available: driver 570.00, 2 GPU(s)\n"), out.stderr


def test_probe_is_unavailable_when_nvml_cannot_be_loaded(node: Node) -> None:
    missing = node.probe.tmp / "libnvidia-ml.so.1"
    out = node.hook("probe", "--nvml", str(missing))
    assert out.returncode == HOOK_UNAVAILABLE
    assert out.stdout.startswith(f"unavailable: cannot load {missing}: ")
    assert "No such file or directory" in out.stdout


def test_probe_is_unavailable_on_a_driver_older_than_r615(node: Node) -> None:
    r570 = node.probe.build / "tests" / "r570" / "libnvidia-ml.so.1"
    out = node.hook("probe", "--nvml", str(r570))
    assert out.returncode == HOOK_UNAVAILABLE
    assert out.stdout == (
        "unavailable: nvmlDeviceSetMemoryLimits_v1 missing: driver 570.00 is older than R615\n"
    )


def test_probe_is_unavailable_on_a_library_that_is_not_nvml(node: Node) -> None:
    out = node.hook("probe", "--nvml", "libc.so.6")
    assert out.returncode == HOOK_UNAVAILABLE
    assert out.stdout == "unavailable: libc.so.6 has no nvmlInit_v2: not NVML\n"


def test_probe_is_unavailable_without_gpus(node: Node) -> None:
    out = node.hook("probe", NVIDIA_VISIBLE_DEVICES="none")
    assert (out.returncode, out.stdout) == (
        HOOK_UNAVAILABLE,
        "unavailable: no GPUs (driver 570.00)\n",
    )


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ([], "no command"),
        (["limit"], "unknown command 'limit'"),
        (["set"], "set needs at least one UUID=BYTES"),
        (["set", f"{GPU0}=12m"], f"'{GPU0}=12m': BYTES must be a decimal count of bytes"),
        (["set", f"{GPU0}=-1"], f"'{GPU0}=-1': BYTES must be a decimal count of bytes"),
        (["set", GPU0], f"'{GPU0}' is not UUID=BYTES"),
        (["set", "--pid", "0", f"{GPU0}=1"], "--pid '0' is not a positive integer"),
        (["set", "--pid", "12x", f"{GPU0}=1"], "--pid '12x' is not a positive integer"),
        (["show", "--pid", "1", "--namespace", "/tmp"], "--pid and --namespace exclude each other"),
        (["probe", "--mark", "/tmp/m"], "--mark is not an option of probe"),
        (["probe", GPU0], "probe takes no arguments"),
        (["set", "--mark"], "--mark needs a value"),
    ],
)
def test_bad_usage_exits_2_and_says_what_is_wrong(node: Node, args: list[str], said: str) -> None:
    out = node.hook(*args)
    assert out.returncode == HOOK_USAGE
    assert out.stderr.startswith(f"vslice-memory-limit: {said}\nusage: ")


# ---- set and show


def oci_state(pid: int | str) -> str:
    """The state a runtime hands a createRuntime hook; decoys named "pid" deeper inside."""
    return (
        '{"ociVersion": "1.2.0", "id": "ctr", "status": "created", '
        '"annotations": {"pid": 1, "note": "\\"pid\\": 2, {["}, '
        f'"pid": {pid}, "bundle": "/run/containerd/ctr"}}'
    )


def test_set_limits_the_cgroup_of_the_pid_in_the_oci_state(node: Node, cgroups: Cgroups) -> None:
    container = cgroups.make("ctr")
    mark = node.probe.tmp / "limits.mark"
    state = oci_state(cgroups.sleeper(container))
    limits = (f"{GPU0}={3 * GIB // 2}", f"{GPU1}=1024")
    out = node.hook("set", "--mark", str(mark), *limits, stdin=state)
    assert (out.returncode, out.stdout, out.stderr) == (0, "", "")
    assert mark.read_text().splitlines() == ["backend=driver", f"namespace={container}", *limits]
    assert stat.S_IMODE(mark.stat().st_mode) == 0o444
    assert not list(node.probe.tmp.glob("limits.mark.*"))  # no temporary file left
    shown = node.hook("show", "--namespace", str(container))
    assert (
        shown.stdout
        == f"{GPU0} soft=0 hard={3 * GIB // 2} used=0\n{GPU1} soft=0 hard=1024 used=0\n"
    )
    # by pid, one GPU, and the cgroup above, which has no limit of its own
    assert node.hook("show", "--pid", str(cgroups.processes[0].pid), GPU1).stdout == (
        f"{GPU1} soft=0 hard=1024 used=0\n"
    )
    assert node.hook("show", "--namespace", str(cgroups.base), GPU0).stdout == (
        f"{GPU0} soft=0 hard=max used=0\n"
    )


def test_set_again_replaces_the_limit_and_rewrites_the_mark(node: Node, cgroups: Cgroups) -> None:
    container = cgroups.make("ctr")
    pid = str(cgroups.sleeper(container))
    mark = node.probe.tmp / "limits.mark"
    assert node.hook("set", "--pid", pid, "--mark", str(mark), f"{GPU0}={GIB}").returncode == 0
    assert node.hook("set", "--pid", pid, "--mark", str(mark), f"{GPU0}={2 * GIB}").returncode == 0
    assert mark.read_text().splitlines()[-1] == f"{GPU0}={2 * GIB}"
    assert node.memlimits(f"get:0:{container}").values("get")["hard"] == 2 * GIB


@pytest.mark.parametrize(
    ("stdin", "said"),
    [
        ("", 'the OCI state on stdin has no "pid" that is a positive integer (0 bytes read)'),
        (oci_state('"1234"'), 'no "pid" that is a positive integer'),
        (oci_state(-5), 'no "pid" that is a positive integer'),
        (oci_state(0), 'no "pid" that is a positive integer'),
        (oci_state("12.5"), 'no "pid" that is a positive integer'),
        (oci_state(99999999999), 'no "pid" that is a positive integer'),
        ('{"id": "ctr", "annotations": {"pid": 1}}', 'no "pid" that is a positive integer'),
        (oci_state(2147483646), "no cgroup for pid 2147483646 in /proc/2147483646/cgroup: No such"),
    ],
)
def test_a_hook_without_a_container_pid_fails_closed(node: Node, stdin: str, said: str) -> None:
    out = node.hook("set", f"{GPU0}={GIB}", stdin=stdin)
    assert out.returncode == HOOK_FAILED
    assert out.stderr.startswith("vslice-memory-limit: ") and said in out.stderr
    assert len(out.stderr.splitlines()) == 1


def test_a_hook_for_an_unknown_gpu_fails_naming_it(node: Node) -> None:
    # The unknown GPU first: the hook stops before setting anything, so this needs no root.
    unknown = "GPU-00000000-0000-4000-8000-00000000dead"
    out = node.hook("set", "--pid", str(os.getpid()), f"{unknown}=1024", f"{GPU0}={GIB}")
    assert out.returncode == HOOK_FAILED
    namespace = node.memlimits("rule:/proc/self/cgroup").line("rule")[2]
    assert out.stderr == (
        f"vslice-memory-limit: no GPU {unknown} for a limit of 1024 bytes on {namespace}: "
        "nvmlDeviceGetHandleByUUID: Not Found (6)\n"
    )


def test_a_hook_on_a_driver_older_than_r615_fails(node: Node) -> None:
    r570 = str(node.probe.build / "tests" / "r570" / "libnvidia-ml.so.1")
    out = node.hook("set", "--nvml", r570, "--pid", str(os.getpid()), f"{GPU0}={GIB}")
    assert out.returncode == HOOK_FAILED
    assert out.stderr == (
        "vslice-memory-limit: nvmlDeviceSetMemoryLimits_v1 missing: driver 570.00 is older "
        "than R615\n"
    )


def test_a_mark_that_cannot_be_written_fails_the_hook(node: Node, root: None) -> None:
    mark = node.probe.tmp / "no-such-folder" / "limits.mark"
    out = node.hook("set", "--pid", str(os.getpid()), "--mark", str(mark), f"{GPU0}={GIB}")
    assert out.returncode == HOOK_FAILED
    assert out.stderr == (
        f"vslice-memory-limit: cannot write the mark file {mark}: No such file or directory\n"
    )


# ---- enforcement by the fake driver, below any shim


def test_a_process_in_a_limited_cgroup_is_stopped_at_the_limit(
    node: Node, cgroups: Cgroups
) -> None:
    container = cgroups.make("ctr")
    limit(node, container, 3 * GIB // 2)
    commands = ("ctx:0", "alloc:1g", "alloc:1g", "alloc:512m", "info", "nvml")
    inside = node.cuda(*commands, cgroup=container)
    allocations = [
        inside.code("alloc:1g", 0),
        inside.code("alloc:1g", 1),
        inside.code("alloc:512m"),
    ]
    assert allocations == [CUDA_SUCCESS, CUDA_ERROR_OUT_OF_MEMORY, CUDA_SUCCESS]
    assert inside.values("info") == {"free": 0, "total": 3 * GIB // 2}
    nvml = inside.nvml(0)
    assert (nvml["total2"], nvml["free2"], nvml["used2"]) == (3 * GIB // 2, 0, 3 * GIB // 2)
    assert nvml["total"] == 8 * GIB  # the v1 form stays the card's
    # The control: the same program outside the cgroup gets all of it.
    outside = node.cuda(*commands)
    allocations = [
        outside.code("alloc:1g", 0),
        outside.code("alloc:1g", 1),
        outside.code("alloc:512m"),
    ]
    assert allocations == [CUDA_SUCCESS] * 3
    assert outside.values("info")["total"] == 8 * GIB


def test_the_limit_is_per_gpu(node: Node, cgroups: Cgroups) -> None:
    container = cgroups.make("ctr")
    limit(node, container, GIB, gpu=1)
    out = node.cuda("ctx:0", "alloc:2g", "ctx:1", "alloc:2g", "info", cgroup=container)
    assert out.code("alloc:2g", 0) == CUDA_SUCCESS
    assert out.code("alloc:2g", 1) == CUDA_ERROR_OUT_OF_MEMORY
    assert out.values("info")["total"] == GIB


def test_the_processes_of_one_cgroup_share_its_limit(node: Node, cgroups: Cgroups) -> None:
    container = cgroups.make("ctr")
    limit(node, container, 3 * GIB // 2)
    cgroups.hold(node, container, "ctx:0", "alloc:1g")
    second = node.cuda("ctx:0", "alloc:1g", "alloc:256m", "info", cgroup=container)
    assert second.code("alloc:1g") == CUDA_ERROR_OUT_OF_MEMORY
    assert second.code("alloc:256m") == CUDA_SUCCESS
    assert second.values("info") == {"free": 256 * MIB, "total": 3 * GIB // 2}
    # The second process has ended: only the holder's memory is counted.
    assert node.memlimits(f"get:0:{container}").values("get") == {
        "soft": 0,
        "hard": 3 * GIB // 2,
        "used": GIB,
    }


def test_a_cgroup_below_a_limited_one_is_bound_by_its_limit(node: Node, cgroups: Cgroups) -> None:
    parent = cgroups.make("pod")
    child = cgroups.make("pod", "ctr")
    limit(node, parent, GIB)
    cgroups.hold(node, parent, "ctx:0", "alloc:512m")
    out = cgroups.hold(node, child, "ctx:0", "alloc:768m", "alloc:512m", "info")
    assert out.code("alloc:768m") == CUDA_ERROR_OUT_OF_MEMORY
    assert out.code("alloc:512m") == CUDA_SUCCESS
    assert out.values("info") == {"free": 0, "total": GIB}


def test_a_cgroup_below_counts_in_its_parents_usage_and_the_tighter_limit_wins(
    node: Node, cgroups: Cgroups
) -> None:
    parent = cgroups.make("pod")
    child = cgroups.make("pod", "ctr")
    limit(node, parent, 2 * GIB)
    limit(node, child, GIB // 4)
    cgroups.hold(node, child, "ctx:0", "alloc:200m")
    assert node.memlimits(f"get:0:{parent}").values("get")["used"] == 200 * MIB
    assert node.memlimits(f"get:0:{child}").values("get")["used"] == 200 * MIB
    out = node.cuda("ctx:0", "info", cgroup=child)
    assert out.values("info") == {"free": 56 * MIB, "total": GIB // 4}


def test_under_the_shim_the_smaller_of_slice_and_driver_limit_is_seen(
    node: Node, cgroups: Cgroups
) -> None:
    # The shim keeps its own slice; the driver's limit lies underneath and shows through.
    container = cgroups.make("ctr")
    limit(node, container, GIB)
    sliced = {"CUDA_DEVICE_MEMORY_LIMIT": "2g", "VSLICE_CONTEXT_OVERHEAD": "0"}
    out = node.cuda("ctx:0", "info", "alloc:1536m", "nvml", cgroup=container, shim=True, **sliced)
    assert out.values("info")["total"] == GIB
    assert out.code("alloc:1536m") == CUDA_ERROR_OUT_OF_MEMORY
    assert out.nvml(0)["total2"] == GIB


# ---- what nvmlDeviceSetMemoryLimits_v1 refuses, and Get


def test_set_is_refused_to_a_caller_who_is_not_root_and_get_is_not(node: Node, root: None) -> None:
    env = node.env()
    del env["FAKE_CUDA_STATE"]  # nobody may not open the test's state file: a private card
    out = run([node.program("memlimits"), "set:0:/tmp:0:1024", "get:0:/tmp"], env, user=NOBODY)
    assert out.code("set") == NVML_ERROR_NO_PERMISSION
    assert out.values("get") == {"soft": 0, "hard": MAX, "used": 0}
    hook = str(node.probe.build / "hook" / "vslice-memory-limit")
    failed = run([hook, "set", "--pid", str(os.getpid()), f"{GPU1}=1024"], env, user=NOBODY)
    assert failed.returncode == HOOK_FAILED
    assert failed.stderr.startswith(
        f"vslice-memory-limit: nvmlDeviceSetMemoryLimits_v1 of {GPU1} on "
    )
    assert failed.stderr.endswith(" to 1024 bytes: Insufficient Permissions (4)\n")


def test_set_refuses_limits_it_cannot_keep(node: Node, root: None) -> None:
    tmp = node.probe.tmp
    (tmp / "file").write_text("")
    deep = tmp.joinpath(*["d" * 60] * 9)  # an existing directory too long for the table
    deep.mkdir(parents=True)
    out = node.memlimits(
        f"set:0:{tmp}:2048:1024",  # soft above hard
        f"set:0:{tmp}/gone:0:1024",
        "set:0:relative/path:0:1024",
        f"set:0:{tmp}/file:0:1024",
        "set:0:null:0:1024",
        f"set:0:{deep}:0:1024",
        "set:9:/tmp:0:1024",  # no such GPU: no handle
    )
    assert [out.code("set", n) for n in range(7)] == [
        NVML_ERROR_INVALID_ARGUMENT,
        NVML_ERROR_NOT_FOUND,
        NVML_ERROR_NOT_FOUND,
        NVML_ERROR_NOT_FOUND,
        NVML_ERROR_INVALID_ARGUMENT,
        NVML_ERROR_INVALID_ARGUMENT,
        NVML_ERROR_INVALID_ARGUMENT,
    ]


def test_get_without_a_namespace_answers_for_the_callers_cgroup(
    node: Node, cgroups: Cgroups
) -> None:
    container = cgroups.make("ctr")
    limit(node, container, GIB)
    inside = node.memlimits("get:0:null", "get:0:self", cgroup=container)
    assert inside.values("get", 0) == inside.values("get", 1) == {"soft": 0, "hard": GIB, "used": 0}
    assert node.memlimits("get:0:null").values("get")["hard"] == MAX


def test_soft_0_and_hard_max_remove_a_limit(node: Node, cgroups: Cgroups) -> None:
    container = cgroups.make("ctr")
    limit(node, container, GIB)
    out = node.memlimits(f"set:0:{container}/:0:max", f"get:0:{container}")  # trailing '/' too
    assert out.code("set") == NVML_SUCCESS
    assert out.values("get") == {"soft": 0, "hard": MAX, "used": 0}
    assert node.cuda("ctx:0", "alloc:2g", cgroup=container).code("alloc:2g") == CUDA_SUCCESS


def test_a_soft_limit_is_kept_and_answered(node: Node, cgroups: Cgroups) -> None:
    container = cgroups.make("ctr")
    out = node.memlimits(f"set:0:{container}:{GIB}:{2 * GIB}", f"get:0:{container}")
    assert out.values("get") == {"soft": GIB, "hard": 2 * GIB, "used": 0}


def test_a_full_table_refuses_more_until_a_limited_cgroup_is_deleted(
    node: Node, root: None
) -> None:
    folders = [node.probe.tmp / f"cg{i}" for i in range(LIMITS_TABLE + 1)]
    for folder in folders:
        folder.mkdir()
    out = node.memlimits(*(f"set:0:{folder}:0:1024" for folder in folders))
    codes = [out.code("set", n) for n in range(len(folders))]
    assert codes == [NVML_SUCCESS] * LIMITS_TABLE + [NVML_ERROR_INSUFFICIENT_RESOURCES]
    folders[0].rmdir()  # its limit goes with it, making room
    assert node.memlimits(f"set:0:{folders[-1]}:0:1024").code("set") == NVML_SUCCESS
