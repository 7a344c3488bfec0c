"""``vslice serve monitor`` as a process: /healthz, /metrics from real regions, clean SIGTERM,
and no crash when neither NVML nor the API server is there."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import yaml
from vslice_shim.region import DeviceLimit, create_region

VSLICE = str(Path(sys.executable).parent / "vslice")
GPU = "GPU-6c7f0d8e-0000-4000-8000-00000000000a"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def fetch(port: int, path: str) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
        assert answer.status == 200
        return str(answer.read().decode())


def test_serve_exports_regions_and_stops_cleanly_without_nvml_or_api_server(
    tmp_path: Path,
) -> None:
    root = tmp_path / "containers"
    (root / "uid-1" / "main").mkdir(parents=True)
    create_region(root / "uid-1" / "main" / "vslice.cache", [DeviceLimit(GPU, 2**30, 40)])
    port = free_port()
    config = tmp_path / "monitor.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "listen": f"127.0.0.1:{port}",
                "cache_root": str(root),
                "backend": "nvml",  # no driver here: must degrade to container metrics only
                "kubeconfig": str(tmp_path / "missing-kubeconfig"),
            }
        )
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "LD_LIBRARY_PATH": str(tmp_path)}
    process = subprocess.Popen(
        [VSLICE, "serve", "monitor", "--config", str(config)],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 20
        text = ""
        while time.monotonic() < deadline and not text:
            try:
                assert fetch(port, "/healthz") == "ok"
                text = fetch(port, "/metrics")
            except OSError:
                time.sleep(0.1)
        assert f'vslice_container_gpu_memory_limit_bytes{{container="main",gpu="{GPU}"' in text
        assert "vslice_gpu_memory_total_bytes" not in text
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0
    finally:
        if process.poll() is None:
            process.kill()
    lines = [json.loads(line) for line in process.communicate()[1].splitlines()]
    messages = [line["msg"] for line in lines]
    assert any(m.startswith("node GPU metrics off") for m in messages)
    assert "pod names unavailable" in messages
    assert messages[-1] == "stopped"
