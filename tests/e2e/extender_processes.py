"""Extra extender replicas for end-to-end tests, and an audit of what the annotations book.

- :func:`start_extender` runs ``vslice serve scheduler`` as its own process against the
  shared lab (a second replica beside the lab's, or one to kill and restart) and waits until
  its ledger is loaded (``/readyz``).
- :func:`audit` reads every node inventory and every bound pod's allocation annotation from
  the API server and lists each GPU whose memory, cores or slots are booked beyond what it
  has, plus allocations that do not match the pod's node: the ground truth of "never
  over-allocate", independent of any extender's memory.
- :func:`free_slices` counts how many more slices of one size the cluster can take.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s
from vslice_core.annotations import ALLOCATION, NODE_GPUS, decode_allocation, decode_node_gpus
from vslice_core.model import Gpu
from vslice_lab.lab import services_kubeconfig_path
from vslice_lab.layout import Layout


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class ExtenderProcess:
    name: str
    port: int
    config: Path
    log: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0, *, until: str = "ready") -> ExtenderProcess:
        """Start and wait ``until`` "ready" (readyz 200) or "serving" (healthz 200: a
        standby replica under leader election answers but is not ready)."""
        with self.log.open("ab") as sink:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "vslice.cli",
                    "serve",
                    "scheduler",
                    "--config",
                    str(self.config),
                ],
                stdout=sink,
                stderr=sink,
            )
        deadline = time.monotonic() + timeout
        while not self._ready("readyz" if until == "ready" else "healthz"):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(
                    f"extender {self.name} did not get ready; log: {self.log.read_text()[-2000:]}"
                )
            time.sleep(0.1)
        return self

    def kill(self) -> None:
        """SIGKILL: no cleanup at all, as a crash."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def stop(self) -> int | None:
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        return self.process.returncode

    def post(self, verb: str, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(
            f"{self.url}/{verb}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            answer: dict[str, Any] = json.loads(response.read())
            return answer

    def metrics(self) -> str:
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=10) as response:
            text: str = response.read().decode()
            return text

    def ready(self) -> bool:
        return self._ready("readyz")

    def _ready(self, route: str = "readyz") -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/{route}", timeout=2) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError):
            return False


def extender_process(
    directory: Path, name: str, kubeconfig: Path, *, port: int | None = None, **settings: Any
) -> ExtenderProcess:
    """An extender replica named ``name`` (its node-lock identity), not started yet."""
    port = port or free_port()
    config = directory / f"{name}.yaml"
    # The lab's services identity, as the lab's own extender uses: the state-annotation policy
    # refuses a Binding that carries an allocation from anyone else (the admin included).
    services = services_kubeconfig_path(Layout.at(kubeconfig.parent))
    values = {
        "kubeconfig": str(services if services.exists() else kubeconfig),
        "listen": f"127.0.0.1:{port}",
        "identity": name,
        **settings,
    }
    keys = kubeconfig.parent / "pki" / "allocation.keys"  # the lab's (vslice_lab.layout)
    if keys.exists():
        values.setdefault("allocation_key_file", str(keys))  # sign like the lab's extender
    config.write_text(yaml.safe_dump(values))
    return ExtenderProcess(name, port, config, directory / f"{name}.log")


@dataclass
class Audit:
    gpus: dict[str, Gpu] = field(default_factory=dict)
    used: dict[str, list[int]] = field(default_factory=lambda: defaultdict(lambda: [0, 0, 0]))
    problems: list[str] = field(default_factory=list)
    allocated_pods: set[str] = field(default_factory=set)


def audit(core: k8s.CoreV1Api) -> Audit:
    result = Audit()
    nodes: Any = json.loads(core.list_node(_preload_content=False).data)
    for item in nodes["items"]:
        value = (item["metadata"].get("annotations") or {}).get(NODE_GPUS)
        if value:
            for gpu in decode_node_gpus(value, item["metadata"]["name"]).gpus:
                result.gpus[gpu.uuid] = gpu
    pods: Any = json.loads(core.list_pod_for_all_namespaces(_preload_content=False).data)
    for pod in pods["items"]:
        value = (pod["metadata"].get("annotations") or {}).get(ALLOCATION)
        node = pod["spec"].get("nodeName")
        if not value or not node or pod["status"].get("phase") in ("Succeeded", "Failed"):
            continue
        key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        result.allocated_pods.add(key)
        allocation = decode_allocation(value)
        if allocation.node != node:
            result.problems.append(f"{key}: allocation names {allocation.node}, bound to {node}")
        for container in allocation.containers:
            for grant in container.gpus:
                used = result.used[grant.uuid]
                used[0] += grant.memory_mib
                used[1] += grant.cores
                used[2] += 1
    for uuid, (memory, cores, slots) in result.used.items():
        gpu = result.gpus.get(uuid)
        if gpu is None:
            result.problems.append(f"{uuid}: booked but no node has it")
        elif memory > gpu.memory_mib or cores > gpu.cores or slots > gpu.slots:
            result.problems.append(
                f"{uuid}: booked {memory} MiB / {cores} cores / {slots} slots, "
                f"has {gpu.memory_mib} / {gpu.cores} / {gpu.slots}"
            )
    return result


def free_slices(booked: Audit, memory_mib: int, cores: int) -> int:
    """How many more single-GPU slices of this size fit, GPU by GPU."""
    total = 0
    for uuid, gpu in booked.gpus.items():
        if not gpu.healthy or gpu.cordoned:
            continue
        memory, used_cores, slots = booked.used.get(uuid, [0, 0, 0])
        by_cores = (gpu.cores - used_cores) // cores if cores else gpu.slots
        total += max(0, min(gpu.slots - slots, (gpu.memory_mib - memory) // memory_mib, by_cores))
    return total


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.5)
