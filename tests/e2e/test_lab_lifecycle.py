"""``up``/``down`` of whole labs: restart, crash recovery, and failures that name their cause.

These tests run their own small labs (one node, no vslice services) next to the session lab,
in their own state directories, and check that nothing they started survives them.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s
from vslice_build.binaries import ALL_BINARIES, ensure
from vslice_kube.client import api_client
from vslice_lab import lab as lab_module
from vslice_lab import processes, state
from vslice_lab.layout import Layout

pytestmark = pytest.mark.timeout(300)

ONE_NODE = """
nodes:
  - name: solo
    gpus:
      - {uuid: GPU-solo-0, model: Tesla-T4, memory_mib: 15360, slots: 4}
"""


def _processes_using(state_dir: Path) -> list[int]:
    """Pids whose command line mentions the state dir (every component's does)."""
    needle = str(state_dir.resolve()).encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        zombie = stat[stat.rindex(")") + 2] == "Z"
        if needle in cmdline and not zombie:
            pids.append(int(entry.name))
    return pids


@pytest.fixture
def small_lab(tmp_path: Path) -> Iterator[lab_module.LabOptions]:
    """Options for a one-node lab without services in a fresh state dir; downed afterwards."""
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(ONE_NODE)
    options = lab_module.LabOptions(
        state_dir=tmp_path / "state", inventory=inventory, services=False, timeout=90
    )
    yield options
    lab_module.down(options.state_dir)
    assert _processes_using(options.state_dir) == []


def _schedule_a_pod(kubeconfig: Path) -> str:
    core = k8s.CoreV1Api(api_client(kubeconfig))
    body = {
        "metadata": {"name": "probe"},
        "spec": {"containers": [{"name": "main", "image": "registry.invalid/sleep:1"}]},
    }
    deadline = time.monotonic() + 60
    while True:  # the default service account appears shortly after the namespace
        try:
            core.create_namespaced_pod("default", body)
            break
        except k8s.ApiException as error:
            if time.monotonic() > deadline:
                raise
            assert error.status in (403, 404, 500), error
            time.sleep(0.2)
    while time.monotonic() < deadline:
        pod = core.read_namespaced_pod("probe", "default")
        if pod.status.phase == "Running":
            return str(pod.spec.node_name)
        time.sleep(0.2)
    pytest.fail(f"pod never ran: {pod.status}")


def test_down_then_up_gives_a_working_lab_again(small_lab: lab_module.LabOptions) -> None:
    first = lab_module.up(small_lab)
    assert _schedule_a_pod(Layout.at(small_lab.state_dir).kubeconfig) == "solo"
    stopped = lab_module.down(small_lab.state_dir)
    assert stopped is not None and set(stopped) == {
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kwok",
    }
    assert _processes_using(small_lab.state_dir) == []
    assert not Path(first.etcd_data).exists()
    assert state.load(Layout.at(small_lab.state_dir)) is None

    lab_module.up(small_lab)
    # A fresh, empty cluster: the old pod is gone and a new one schedules.
    assert _schedule_a_pod(Layout.at(small_lab.state_dir).kubeconfig) == "solo"


def test_up_refuses_to_start_a_second_lab_in_the_same_state_dir(
    small_lab: lab_module.LabOptions,
) -> None:
    record = lab_module.up(small_lab)
    with pytest.raises(lab_module.LabError, match="already running"):
        lab_module.up(small_lab)
    assert all(processes.alive(p) for p in record.processes)


def test_up_after_a_crash_stops_the_leftovers_and_starts_clean(
    small_lab: lab_module.LabOptions,
) -> None:
    crashed = lab_module.up(small_lab)
    etcd = next(p for p in crashed.processes if p.name == "etcd")
    os.kill(etcd.pid, signal.SIGKILL)  # the lab is now half dead; its record remains
    while processes.alive(etcd):
        time.sleep(0.05)

    lab_module.up(small_lab)
    survivors = [p.name for p in crashed.processes if processes.alive(p)]
    assert survivors == []
    assert not Path(crashed.etcd_data).exists()
    assert _schedule_a_pod(Layout.at(small_lab.state_dir).kubeconfig) == "solo"


def test_a_port_in_use_fails_up_naming_the_component_and_its_log(
    small_lab: lab_module.LabOptions,
) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        options = lab_module.LabOptions(
            state_dir=small_lab.state_dir,
            inventory=small_lab.inventory,
            services=False,
            ports={"kube-apiserver": port},
        )
        with pytest.raises(lab_module.LabError) as failure:
            lab_module.up(options)
    message = str(failure.value)
    assert failure.value.component == "kube-apiserver"
    assert f"127.0.0.1:{port} is already in use" in message
    assert str(Layout.at(small_lab.state_dir).log("kube-apiserver")) in message
    # etcd had already started; nothing of this lab may be left running.
    assert _processes_using(small_lab.state_dir) == []
    assert state.load(Layout.at(small_lab.state_dir)) is None


def test_a_component_that_dies_during_up_is_named_with_the_end_of_its_log(
    small_lab: lab_module.LabOptions, tmp_path: Path
) -> None:
    real = ensure(small_lab.version)
    bins = tmp_path / "bin"
    bins.mkdir()
    for name in ALL_BINARIES:
        (bins / name).symlink_to(real.path(name))
    (bins / "kube-scheduler").unlink()
    broken = bins / "kube-scheduler"
    broken.write_text("#!/bin/sh\necho 'scheduler config rejected: boom' >&2\nexit 3\n")
    broken.chmod(0o755)
    options = lab_module.LabOptions(
        state_dir=small_lab.state_dir,
        inventory=small_lab.inventory,
        services=False,
        bin_dirs=(bins,),
    )
    with pytest.raises(lab_module.LabError) as failure:
        lab_module.up(options)
    message = str(failure.value)
    assert failure.value.component == "kube-scheduler"
    assert "kube-scheduler exited during start" in message
    assert "scheduler config rejected: boom" in message
    assert str(Layout.at(small_lab.state_dir).log("kube-scheduler")) in message
    assert _processes_using(small_lab.state_dir) == []
