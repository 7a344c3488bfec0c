"""The monitor names pods by their uid through the lab's real API server."""

from __future__ import annotations

import urllib.request
from pathlib import Path

from conftest import LabHandle
from prometheus_client.parser import text_string_to_metric_families
from vslice_kube.nodestate import NodeState
from vslice_node.monitor.main import metrics_service
from vslice_node.monitor.podnames import PodNames
from vslice_node.monitor.settings import MonitorSettings
from vslice_shim.region import DeviceLimit, create_region

NODE = "lab-t4"
GPU = "GPU-6c7f0d8e-0000-4000-8000-00000000000a"


def test_metrics_carry_the_namespace_and_name_of_the_pod_owning_each_region(
    lab: LabHandle, namespace: str, tmp_path: Path
) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "owner"},
        "spec": {
            "nodeName": NODE,
            "containers": [{"name": "main", "image": "registry.invalid/sleep:1"}],
            "terminationGracePeriodSeconds": 0,
        },
    }
    lab.core.create_namespaced_pod(namespace, body, _preload_content=False)
    uid = lab.read_pod(namespace, "owner")["metadata"]["uid"]
    root = tmp_path / "containers"
    (root / uid / "main").mkdir(parents=True)
    create_region(root / uid / "main" / "vslice.cache", [DeviceLimit(GPU, 2**30, 30)])
    names = PodNames(NodeState.connect(str(lab.kubeconfig)), NODE, every_s=30)
    names.refresh()
    settings = MonitorSettings(
        listen="127.0.0.1:0", backend="static", cache_root=str(root), pod_names=False
    )
    http, _ = metrics_service(settings, names)
    http.start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{http.port}/metrics", timeout=5) as r:
            text = r.read().decode()
    finally:
        http.stop()
    limits = [
        sample
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "vslice_container_gpu_memory_limit_bytes"
    ]
    assert [(s.labels["namespace"], s.labels["pod"], s.labels["pod_uid"]) for s in limits] == [
        (namespace, "owner", uid)
    ]
