"""The last of the lab's tests (each asks for ``stopped_lab``, which runs them after every
other test): ``down`` leaves nothing of a lab with a real node behind on the host: no process,
mount, network device, sysctl change, cgroup or file outside the state dir, compared with the
fingerprint the ``lab`` fixture took before ``up``. Then, with the machine free for another
real node, ``up`` with a kubelet or a runtime that fails: one message naming the component and
its log, and nothing half-started; and README's first command.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import StoppedLab
from hostprint import differences, fingerprint
from vslice_build import binaries
from vslice_lab import lab as lab_module
from vslice_lab import nodeconfig, state
from vslice_lab.layout import Layout


def test_down_leaves_nothing_of_the_real_node_on_the_host(stopped_lab: StoppedLab) -> None:
    lab, stopped = stopped_lab.handle, stopped_lab.stopped
    assert lab.record.real_nodes, f"the lab has no real node: {lab.record.real_node_note}"
    assert stopped is not None and f"kubelet-{lab.record.real_nodes[0]}" in stopped
    assert differences(lab.host_before, fingerprint()) == []
    assert lab_module.down(lab.state_dir) is None  # a second down finds no lab


def _broken_up(tmp_path: Path) -> lab_module.LabError | binaries.BinaryError:
    inventory = tmp_path / "inventory.yaml"
    gpu = {"uuid": "GPU-bad00000-0000-4000-8000-000000000000", "model": "NVIDIA-L4"}
    node = {"name": "broken", "kubelet": True, "gpus": [{**gpu, "memory_mib": 1024, "slots": 2}]}
    inventory.write_text(yaml.safe_dump({"nodes": [node]}))
    before = fingerprint()
    # A short state dir, as a user's would be: the kubelet's unix sockets live below it.
    state_dir = Path(tempfile.mkdtemp(prefix="vsl-broken-", dir="/tmp"))
    options = lab_module.LabOptions(state_dir=state_dir, inventory=inventory, timeout=60)
    try:
        with pytest.raises((lab_module.LabError, binaries.BinaryError)) as failure:
            lab_module.up(options)
    finally:
        lab_module.down(state_dir)  # a no-op when up cleaned up, as it must
    assert state.load(Layout.at(state_dir)) is None  # nothing recorded as running
    assert lab_module.status(state_dir) is None
    assert differences(before, fingerprint()) == []  # and nothing left on the host
    return failure.value


def test_a_kubelet_that_fails_to_start_is_named_with_its_log_and_nothing_is_left(
    stopped_lab: StoppedLab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = nodeconfig.kubelet_config

    def broken(*args: Any, **kwargs: Any) -> dict[str, Any]:
        # Out of range: the kubelet's own configuration validation refuses it at start.
        return {**real(*args, **kwargs), "healthzPort": 70000}

    monkeypatch.setattr(nodeconfig, "kubelet_config", broken)
    error = _broken_up(tmp_path)
    assert isinstance(error, lab_module.LabError) and error.component == "kubelet-broken"
    assert error.log is not None and error.log.name == "kubelet-broken.log"
    assert "kubelet-broken exited during start" in str(error)
    assert "70000" in str(error)  # the log's tail shows the kubelet's own reason


def test_a_runc_that_fails_is_named_with_what_it_said_and_nothing_is_left(
    stopped_lab: StoppedLab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "runc"
    fake.write_text("#!/bin/sh\necho 'runc: broken on purpose' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setitem(binaries.SYSTEM_TOOLS, "runc", (str(fake),))
    error = _broken_up(tmp_path)
    assert isinstance(error, binaries.BinaryError) and error.component == "runc"
    assert "broken on purpose" in str(error) and str(fake) in str(error)


def test_missing_cni_plugins_are_named_with_the_package_to_install(
    stopped_lab: StoppedLab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(binaries.SYSTEM_TOOLS, "cni-plugins", (str(tmp_path / "no/bridge"),))
    error = _broken_up(tmp_path)
    assert isinstance(error, binaries.BinaryError) and error.component == "cni-plugins"
    assert "apt-get install containernetworking-plugins" in str(error)


def test_the_readme_command_runs_a_first_slice_on_the_real_node_and_down_stops_it(
    stopped_lab: StoppedLab, tmp_path: Path
) -> None:
    """README's "Try it": ``vslice lab up --example`` prints the smoke's view of its slice."""
    # A short state dir, as a user's would be: the kubelet's unix sockets live below it.
    state_dir = Path(tempfile.mkdtemp(prefix="vsl-readme-", dir="/tmp"))
    before = fingerprint()

    def vslice(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "vslice.cli", "lab", *args, "--state-dir", str(state_dir)],
            capture_output=True,
            text=True,
            cwd=Path(__file__).resolve().parents[2],
            timeout=300,
            check=False,
        )

    try:
        up = vslice("up", "--example")
        assert up.returncode == 0, up.stderr
        # stdout is exactly the line to eval; progress and the example go to stderr.
        assert up.stdout == f"export KUBECONFIG={state_dir.resolve() / 'kubeconfig'}\n"
        assert "example-slice on node lab-l4" in up.stderr
        assert "device.0.total_mib=4096" in up.stderr  # the slice, seen from inside
        assert "oom_error=CUDA_ERROR_OUT_OF_MEMORY" in up.stderr
        status = vslice("status")
        assert status.returncode == 0, status.stdout
        assert "UNHEALTHY" not in status.stdout and "kubelet-lab-l4" in status.stdout
        assert "nodes Ready 4/4" in status.stdout and "real node(s): lab-l4" in status.stdout
    finally:
        down = vslice("down")
    assert down.returncode == 0, down.stderr
    assert "kube-apiserver" in down.stdout and "kubelet-lab-l4" in down.stdout
    assert differences(before, fingerprint()) == []
    after = vslice("status")
    assert after.returncode == 1
    assert "no lab recorded" in after.stdout
