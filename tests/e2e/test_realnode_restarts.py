"""Restarts under running pods on the real node: the kubelet, and vslice's device plugin.

USERS.md: "Device-plugin or kubelet restarts break running pods or stop new ones from starting."
"""

from __future__ import annotations

import time

import pytest
import yaml
from kubernetes.client.exceptions import ApiException
from realnode_pods import RealNode, parse_smoke
from vslice_lab import lab as lab_module
from vslice_lab.health import Probe

pytestmark = pytest.mark.timeout(240)
REREGISTER_LIMIT_S = 5.0


def _holder(node: RealNode, namespace: str, name: str, memory_mib: int) -> dict[str, object]:
    node.smoke_pod(
        namespace,
        name,
        ["hold", "--memory", f"{memory_mib // 2}m", "--seconds", "600"],
        memory_mib=memory_mib,
    )
    pod = node.wait_running(namespace, name)
    deadline = time.monotonic() + 30
    while "held_mib" not in node.logs(namespace, name):
        assert time.monotonic() < deadline, node.logs(namespace, name)
        time.sleep(0.3)
    return pod


def _container_id(pod: dict[str, object]) -> str:
    statuses = pod["status"]["containerStatuses"]  # type: ignore[index]
    return str(statuses[0]["containerID"])  # type: ignore[index]


def _still_running(node: RealNode, namespace: str, name: str, container: str) -> None:
    pod = node.lab.read_pod(namespace, name)
    status = pod["status"]["containerStatuses"][0]
    assert pod["status"]["phase"] == "Running", pod["status"]
    assert status["restartCount"] == 0 and status["containerID"] == container, status
    # A kubelet that has just started serves a pod's logs once it has synced its pods again.
    deadline = time.monotonic() + 30
    while True:
        try:
            logs = parse_smoke(node.logs(namespace, name))
            break
        except ApiException as error:
            assert error.status == 404 and time.monotonic() < deadline, error
            time.sleep(0.5)
    assert logs["held_mib"] and "hold_error" not in logs and "error" not in logs, logs


def test_a_kubelet_restart_keeps_pods_and_slices_and_the_plugin_registers_again_at_once(
    real_node: RealNode, namespace: str
) -> None:
    pod = _holder(real_node, namespace, "before", 2048)
    container = _container_id(pod)
    registrations = real_node.plugin_status()["kubelet"]["registrations"]
    kubelet = f"kubelet-{real_node.name}"
    lab_module.restart(real_node.lab.state_dir, kubelet)
    probe = Probe(f"http://127.0.0.1:{real_node.port('kubelet-healthz')}/healthz")
    deadline = time.monotonic() + 60
    while probe.check() is not None:
        assert time.monotonic() < deadline, "the restarted kubelet never answered /healthz"
        time.sleep(0.1)
    answered = time.monotonic()
    while real_node.plugin_status()["kubelet"]["registrations"] <= registrations:
        waited = time.monotonic() - answered
        assert waited < REREGISTER_LIMIT_S, f"not registered again {waited:.1f}s after restart"
        time.sleep(0.05)
    _still_running(real_node, namespace, "before", container)
    text = real_node.run_smoke(namespace, "after", ["memory"], memory_mib=3072)
    assert parse_smoke(text)["device.0.total_mib"] == "3072"


def test_a_device_plugin_restart_leaves_running_pods_alone_and_new_pods_start(
    real_node: RealNode, namespace: str
) -> None:
    pod = _holder(real_node, namespace, "before", 2048)
    container = _container_id(pod)
    lab_module.restart(real_node.lab.state_dir, f"device-plugin-{real_node.name}", kill=True)
    _wait_registered(real_node)
    _still_running(real_node, namespace, "before", container)
    text = real_node.run_smoke(namespace, "after", ["memory"], memory_mib=1536)
    assert parse_smoke(text)["device.0.total_mib"] == "1536"


def test_without_cdi_the_plain_mounts_fallback_gives_a_container_the_same_slice(
    real_node: RealNode, namespace: str
) -> None:
    """``injection: mounts`` (runtimes without CDI): the same shim, driver, devices and limits
    reach the container through Allocate's mounts, env and device nodes."""
    settings_file = real_node.layout.settings("device-plugin")
    original = settings_file.read_text()
    component = f"device-plugin-{real_node.name}"
    # The DRA path needs CDI (the kubelet names DRA devices to the runtime only as CDI
    # devices), so the node agent serves the device-plugin path alone in this mode.
    plain = {**yaml.safe_load(original), "injection": "mounts", "dra": False}
    settings_file.write_text(yaml.safe_dump(plain))
    try:
        lab_module.restart(real_node.lab.state_dir, component)
        _wait_registered(real_node)
        assert real_node.plugin_status()["injection"] == "mounts"
        text = real_node.run_smoke(namespace, "plain", ["memory"], memory_mib=2560, cores=40)
        seen = parse_smoke(text)
        assert seen["device.0.total_mib"] == "2560" and seen["nvml.0.total_mib"] == "2560"
        assert seen["oom_error"] == "CUDA_ERROR_OUT_OF_MEMORY"
        assert 2560 - 256 < int(seen["max_allocated_mib"]) <= 2560
    finally:
        settings_file.write_text(original)
        lab_module.restart(real_node.lab.state_dir, component)
        _wait_registered(real_node)
    assert real_node.plugin_status()["injection"] == "cdi"


def _wait_registered(node: RealNode, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if node.plugin_status()["kubelet"]["state"] == "registered":
                return
        except OSError:
            pass
        assert time.monotonic() < deadline, "the restarted device plugin never registered"
        time.sleep(0.2)
