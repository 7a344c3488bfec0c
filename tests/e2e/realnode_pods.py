"""Pods on the lab's real node: create sliced pods running ``vslice-smoke``, wait, read logs.

The real node is a kubelet and containerd on this machine (``vslice_lab.realnode``); pods
there really run, with the shim preloaded and the fake driver standing in for the GPUs.
"""

from __future__ import annotations

import json
import ssl
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import LabHandle
from kubernetes.client.exceptions import ApiException
from vslice_build.images import SMOKE_IMAGE
from vslice_core.model import Gpu
from vslice_lab.inventory import load_inventory
from vslice_lab.layout import Layout
from vslice_lab.nodeconfig import NodeLayout
from vslice_lab.realnode import node_layout, node_reader_context

FINISHED = ("Succeeded", "Failed")


def parse_smoke(text: str) -> dict[str, str]:
    """``key=value`` pairs of vslice-smoke's output (later lines win)."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        for word in line.split():
            key, sep, value = word.partition("=")
            if sep and key:
                found[key] = value
    return found


@dataclass
class RealNode:
    lab: LabHandle
    name: str
    gpus: list[Gpu]
    """The node's GPUs on the extender path (what sliced pods of these tests get)."""
    all_gpus: list[Gpu] = field(default_factory=list)
    dra_gpus: tuple[int, ...] = ()
    """Indices of the GPUs on the DRA path (tests/e2e/test_dra_realnode.py)."""

    @property
    def layout(self) -> NodeLayout:
        return node_layout(Layout.at(self.lab.state_dir), self.name)

    def port(self, component: str) -> int:
        return self.lab.record.ports[f"{component}-{self.name}"]

    def smoke_pod(
        self,
        namespace: str,
        name: str,
        args: list[str],
        *,
        memory_mib: int | None = 1024,
        cores: int | None = None,
        gpu: str | None = None,
        restart: str = "Never",
        env: dict[str, str] | None = None,
        command: list[str] | None = None,
        image: str = SMOKE_IMAGE,
        annotations: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """A one-container pod running ``vslice-smoke ARGS`` (or ``command``, in ``image``) on
        one of this node's GPUs (``gpu``: a UUID; default any GPU of this node)."""
        limits = {"nvidia.com/gpu": "1"}
        if memory_mib is not None:
            limits["nvidia.com/gpumem"] = str(memory_mib)
        if cores is not None:
            limits["nvidia.com/gpucores"] = str(cores)
        container: dict[str, Any] = {
            "name": "main",
            "image": image,
            "command": command or ["vslice-smoke", *args],
            "resources": {"limits": limits},
        }
        if env:
            container["env"] = [{"name": k, "value": v} for k, v in env.items()]
        uuids = gpu or ",".join(g.uuid for g in self.gpus)
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "annotations": {"vslice.io/gpu-uuid": uuids, **(annotations or {})},
            },
            "spec": {
                "containers": [container],
                "restartPolicy": restart,
                "terminationGracePeriodSeconds": 0,
            },
        }
        response = self.lab.core.create_namespaced_pod(namespace, body, _preload_content=False)
        created: dict[str, Any] = json.loads(response.data)
        return created

    def wait(
        self,
        namespace: str,
        name: str,
        condition: Callable[[dict[str, Any]], bool],
        what: str,
        timeout: float = 90.0,
    ) -> dict[str, Any]:
        return self.lab.wait_for_pod(namespace, name, condition, what=what, timeout=timeout)

    def wait_finished(self, namespace: str, name: str, timeout: float = 90.0) -> dict[str, Any]:
        return self.wait(namespace, name, finished, "Succeeded or Failed", timeout)

    def wait_running(self, namespace: str, name: str, timeout: float = 90.0) -> dict[str, Any]:
        return self.wait(namespace, name, running, "Running", timeout)

    def logs(self, namespace: str, name: str) -> str:
        text: str = self.lab.core.read_namespaced_pod_log(name, namespace)
        return text

    def run_smoke(self, namespace: str, name: str, args: list[str], **kwargs: Any) -> str:
        """Run vslice-smoke to completion; its output (the test fails if it did not succeed)."""
        self.smoke_pod(namespace, name, args, **kwargs)
        pod = self.wait_finished(namespace, name)
        text = self.logs(namespace, name)
        assert pod["status"]["phase"] == "Succeeded", f"{name} failed: {text}"
        return text

    def shell(self, namespace: str, name: str, script: str, memory_mib: int = 1024) -> str:
        """Run ``sh -c SCRIPT`` in a GPU container of the smoke image; its log once finished."""
        self.smoke_pod(namespace, name, [], memory_mib=memory_mib, command=["sh", "-c", script])
        self.wait_finished(namespace, name)
        return self.logs(namespace, name)

    def events(self, namespace: str, name: str) -> dict[str, str]:
        """Reason -> message of the events about the pod (the latest of each reason)."""
        listed = self.lab.core.list_namespaced_event(
            namespace, field_selector=f"involvedObject.name={name}"
        )
        return {event.reason: event.message for event in listed.items}

    def gone(self, namespace: str, name: str) -> bool:
        """Whether the pod is deleted or its deletion has begun."""
        try:
            pod = self.lab.read_pod(namespace, name)
        except ApiException as error:
            return error.status == 404
        return bool(pod["metadata"].get("deletionTimestamp"))

    def delete_all(self, namespace: str, timeout: float = 60.0) -> None:
        """Delete the namespace's pods and wait until they are gone (frees their slots)."""
        core = self.lab.core
        try:
            core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
        except ApiException as error:
            if error.status != 404:
                raise
        deadline = time.monotonic() + timeout
        while core.list_namespaced_pod(namespace).items:
            if time.monotonic() > deadline:
                pytest.fail(f"pods of {namespace} still there after {timeout:.0f}s")
            time.sleep(0.3)

    def node_client(self) -> ssl.SSLContext:
        return node_reader_context(Layout.at(self.lab.state_dir))

    def plugin_status(self) -> dict[str, Any]:
        url = f"https://127.0.0.1:{self.port('device-plugin')}/status"
        with urllib.request.urlopen(url, timeout=5, context=self.node_client()) as response:
            status: dict[str, Any] = json.loads(response.read())
        return status

    def metrics(self) -> str:
        url = f"https://127.0.0.1:{self.port('monitor')}/metrics"
        with urllib.request.urlopen(url, timeout=5, context=self.node_client()) as response:
            text: str = response.read().decode()
        return text


def running(pod: dict[str, Any]) -> bool:
    statuses = pod.get("status", {}).get("containerStatuses") or []
    return pod.get("status", {}).get("phase") == "Running" and all(
        "running" in (s.get("state") or {}) for s in statuses
    )


def finished(pod: dict[str, Any]) -> bool:
    return pod.get("status", {}).get("phase") in FINISHED


def real_node_of(lab: LabHandle) -> RealNode:
    """The lab's real node; the test fails (never skips) when there is none."""
    if not lab.record.real_nodes:
        why = lab.record.real_node_note or "the inventory marks no node `kubelet: true`"
        pytest.fail(f"this test needs the lab's real node, and the lab has none: {why}")
    name = lab.record.real_nodes[0]
    node = next(n for n in load_inventory(Path(lab.record.inventory)) if n.name == name)

    def ordered(gpus: list[Gpu]) -> list[Gpu]:
        return sorted(gpus, key=lambda g: g.index)

    return RealNode(
        lab,
        name,
        ordered(node.extender_inventory.gpus),
        ordered(node.inventory.gpus),
        node.dra_gpus,
    )
