"""The lab's answers to bad input and missing tools, without starting a control plane."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from vslice_build import binaries
from vslice_lab import configs, pki
from vslice_lab.inventory import load_inventory

REPO = Path(__file__).resolve().parents[2]


def _vslice(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vslice.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
        check=False,
    )


def test_a_missing_go_toolchain_is_named_with_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    monkeypatch.delenv("VSLICE_LAB_BIN_DIR", raising=False)
    monkeypatch.setattr(binaries, "GO_CANDIDATES", ())
    monkeypatch.setattr(binaries.shutil, "which", lambda _name: None)
    with pytest.raises(binaries.BinaryError) as failure:
        binaries.ensure("v1.34.4")
    assert failure.value.component == "go"
    assert "Go toolchain" in str(failure.value)
    assert "KUBEBUILDER_ASSETS" in str(failure.value)


def test_a_failing_build_names_the_component_and_the_build_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_go = tmp_path / "go"
    fake_go.write_text("#!/bin/sh\necho 'go: module lookup disabled' >&2\nexit 1\n")
    fake_go.chmod(0o755)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    monkeypatch.delenv("VSLICE_LAB_BIN_DIR", raising=False)
    monkeypatch.setattr(binaries, "GO_CANDIDATES", (str(fake_go),))
    monkeypatch.setattr(
        binaries.shutil, "which", lambda name: "/usr/bin/etcd" if name == "etcd" else None
    )
    with pytest.raises(binaries.BinaryError) as failure:
        binaries.ensure("v1.34.4", quiet=True)
    log = tmp_path / "cache" / "vslice" / "k8s" / "v1.34.4" / "build.log"
    assert failure.value.component == "kube-apiserver+kube-scheduler+kube-controller-manager"
    assert failure.value.log == log
    assert str(log) in str(failure.value)
    assert "module lookup disabled" in log.read_text()


def test_binaries_in_kubebuilder_assets_are_used_before_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in binaries.ALL_BINARIES:
        (tmp_path / name).write_text("#!/bin/sh\n")
        (tmp_path / name).chmod(0o755)
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path))
    found = binaries.ensure("v0.0.0-never-built")
    assert found.kube_apiserver == (tmp_path / "kube-apiserver").resolve()
    assert found.kwok == (tmp_path / "kwok").resolve()


def test_a_missing_inventory_file_is_rejected_with_exit_status_2(tmp_path: Path) -> None:
    result = _vslice(
        "lab", "up", "--state-dir", str(tmp_path / "s"), "--inventory", "nope.yaml", cwd=tmp_path
    )
    assert result.returncode == 2
    assert "inventory file 'nope.yaml' does not exist" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "s" / "lab.json").exists()


def test_an_invalid_inventory_names_the_field_and_value(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "nodes:\n  - name: n1\n    gpus:\n      - {uuid: G0, model: T4, memory_mib: -5, slots: 2}\n"
    )
    result = _vslice(
        "lab", "up", "--state-dir", str(tmp_path / "s"), "--inventory", str(bad), cwd=tmp_path
    )
    assert result.returncode == 2
    assert "memory_mib" in result.stderr
    assert "-5" in result.stderr
    assert "Traceback" not in result.stderr


def test_status_and_down_without_a_lab_say_so(tmp_path: Path) -> None:
    status = _vslice("lab", "status", "--state-dir", str(tmp_path), cwd=tmp_path)
    assert status.returncode == 1
    assert "no lab recorded" in status.stdout
    down = _vslice("lab", "down", "--state-dir", str(tmp_path), cwd=tmp_path)
    assert down.returncode == 0
    assert "nothing to stop" in down.stdout


def test_the_example_inventory_gives_four_nodes_one_real_with_one_device_per_slot() -> None:
    nodes = {node.name: node for node in load_inventory(REPO / "inventory/lab/cluster.yaml")}
    assert {name: node.gpu_devices for name, node in nodes.items()} == {
        "lab-a100": 20,
        "lab-t4": 16,
        "lab-h100": 64,
        "lab-l4": 8,
    }
    assert [name for name, node in nodes.items() if node.kubelet] == ["lab-l4"]
    h100 = nodes["lab-h100"].inventory
    assert (
        h100.link("GPU-h100-0000-0000-0000-000000000000", "GPU-h100-0000-0000-0000-000000000001")
        == 100
    )
    manifest = nodes["lab-t4"].manifest()
    assert manifest["status"]["allocatable"]["nvidia.com/gpu"] == "16"
    assert manifest["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
    assert json.loads(manifest["metadata"]["annotations"]["vslice.io/node-gpus"])["version"] == 1


def test_the_scheduler_configuration_registers_the_extender_for_vslice_resources(
    tmp_path: Path,
) -> None:
    path = configs.write_scheduler_config(
        tmp_path / "s.yaml", tmp_path / "kubeconfig", "http://127.0.0.1:9999"
    )
    document = yaml.safe_load(path.read_text())
    assert [p["schedulerName"] for p in document["profiles"]] == [
        "default-scheduler",
        "vslice-scheduler",
    ]
    (extender,) = document["extenders"]
    assert extender["urlPrefix"] == "http://127.0.0.1:9999"
    assert (extender["filterVerb"], extender["bindVerb"], extender["nodeCacheCapable"]) == (
        "filter",
        "bind",
        True,
    )
    assert {m["name"]: m["ignoredByScheduler"] for m in extender["managedResources"]} == {
        "nvidia.com/gpu": False,
        "nvidia.com/gpumem": True,
        "nvidia.com/gpumem-percentage": True,
        "nvidia.com/gpucores": True,
    }


def test_certificates_are_reused_unless_their_hosts_change(tmp_path: Path) -> None:
    ca = pki.ensure_ca(tmp_path)
    first = pki.issue(ca, tmp_path, "web", common_name="web", hosts=("127.0.0.1",), server=True)
    before = first.cert.read_bytes()
    again = pki.issue(ca, tmp_path, "web", common_name="web", hosts=("127.0.0.1",), server=True)
    assert again.cert.read_bytes() == before
    changed = pki.issue(
        ca, tmp_path, "web", common_name="web", hosts=("127.0.0.1", "localhost"), server=True
    )
    assert changed.cert.read_bytes() != before
