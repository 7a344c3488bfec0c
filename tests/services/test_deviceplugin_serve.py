"""``vslice serve device-plugin`` as a process: settings from YAML, /healthz and /status, no
kubelet and no API server at first, registration once a kubelet appears, clean SIGTERM."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubelet import Kubelet

NODE = "gpu-node-1"
SPEC = "vslice.io-gpu.json"
VSLICE = str(Path(sys.executable).parent / "vslice")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def wait_for(condition: Any, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError("condition not met in time")


def unreachable_kubeconfig(path: Path) -> Path:
    """A kubeconfig whose API server refuses connections (nothing listens on port 1)."""
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return path


@pytest.fixture
def plugin_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="vsdp-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_serve_keeps_running_without_kubelet_or_api_server_and_stops_on_sigterm(
    tmp_path: Path, plugin_dir: Path
) -> None:
    inventory = tmp_path / "inventory.yaml"
    gpu = {"uuid": "GPU-a", "model": "NVIDIA-L4", "memory_mib": 23034, "slots": 3}
    inventory.write_text(yaml.safe_dump({"nodes": [{"name": NODE, "gpus": [gpu]}]}))
    port = free_port()
    config = tmp_path / "device-plugin.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "listen": f"127.0.0.1:{port}",
                "node_name": NODE,
                "backend": "static",
                "inventory": str(inventory),
                "device_plugin_dir": str(plugin_dir),
                "cache_root": str(tmp_path / "containers"),
                "limits_root": str(tmp_path / "limits"),
                "shim_library": str(tmp_path / "libvslice.so"),
                "preload_file": str(tmp_path / "ld.so.preload"),
                "cdi_spec_dir": str(tmp_path / "cdi"),
                "host_dev_dir": str(tmp_path / "dev"),
                "kubeconfig": str(unreachable_kubeconfig(tmp_path / "kubeconfig")),
            }
        )
    )
    process = subprocess.Popen(
        [VSLICE, "serve", "device-plugin", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: get(port, "/healthz") == (200, "ok"))
        # The release the process runs, as the installed distribution says.
        assert json.loads(get(port, "/version")[1]) == {"version": metadata.version("vslice")}
        status = json.loads(get(port, "/status")[1])
        assert status["kubelet"]["state"] == "waiting for kubelet"
        assert status["devices"] == 3
        assert status["shim"].endswith("missing: GPU containers cannot start")
        assert (tmp_path / "ld.so.preload").read_text() == f"{tmp_path / 'libvslice.so'}\n"
        assert status["cdi_spec"] == {"path": str(tmp_path / "cdi" / SPEC), "state": "written"}
        assert status["host_files"].startswith(f"missing: {tmp_path / 'dev' / 'nvidia0'}, ")
        wait_for(lambda: "failing" in json.loads(get(port, "/status")[1])["inventory_annotation"])
        kubelet = Kubelet(plugin_dir)
        try:
            _, request = kubelet.next_registration(timeout_s=10)
            assert request.resource_name == "nvidia.com/gpu"
            wait_for(
                lambda: json.loads(get(port, "/status")[1])["kubelet"]["state"] == "registered"
            )
        finally:
            kubelet.stop()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0
    finally:
        if process.poll() is None:
            process.kill()
    _, stderr = process.communicate(timeout=5)
    lines = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    messages = [line["msg"] for line in lines]
    assert "registered with the kubelet" in messages
    assert "CDI spec written" in messages
    missing = [line["path"] for line in lines if line["msg"].startswith("host file for GPU")]
    assert missing[0] == str(tmp_path / "dev" / "nvidia0")
    assert json.loads((tmp_path / "cdi" / SPEC).read_text())["devices"][0]["name"] == "GPU-a"
    assert "stopped" in messages
    refused = [line for line in lines if line["msg"].startswith("cannot write the node's GPU")]
    assert refused and "cannot reach the API server" in refused[0]["error"]
    assert not (plugin_dir / "vslice.sock").exists()


def test_serve_refuses_an_unknown_node_in_the_inventory_naming_the_known_ones(
    tmp_path: Path, plugin_dir: Path
) -> None:
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(yaml.safe_dump({"nodes": [{"name": "node-a", "gpus": []}]}))
    config = tmp_path / "device-plugin.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "node_name": "node-z",
                "backend": "static",
                "inventory": str(inventory),
                "device_plugin_dir": str(plugin_dir),
            }
        )
    )
    result = subprocess.run(
        [VSLICE, "serve", "device-plugin", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "has no node 'node-z'; nodes in the file: node-a" in result.stderr


@pytest.mark.parametrize(
    ("setting", "value", "message"),
    [
        ("resource_name", "gpu", "device_plugin.resource_name must be 'domain/name', got 'gpu'"),
        ("backend", "cuda", "backend"),
        ("inventory", "", "backend static needs inventory"),
        ("slots_per_gpu", 0, "slots_per_gpu"),
        ("cdi_kind", "gpu", "cdi.kind must be 'vendor/class' with one '/', got 'gpu'"),
        ("host_dev_dir", "dev", "driver.host_dev_dir must be an absolute path, got 'dev'"),
    ],
)
def test_invalid_settings_exit_2_naming_the_setting(
    tmp_path: Path, setting: str, value: object, message: str
) -> None:
    config = tmp_path / "device-plugin.yaml"
    values = {"backend": "static", "inventory": "x.yaml", setting: value}
    config.write_text(yaml.safe_dump(values))
    result = subprocess.run(
        [VSLICE, "serve", "device-plugin", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert message in result.stderr
