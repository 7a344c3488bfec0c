"""The device plugin against the lab's real API server: it lists the pods bound to its node,
hands the kubelet (played over gRPC by the test) the pod's slice, and records the delivery and
the node's inventory through real patches."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import INVENTORY, LabHandle
from kubernetes import client as k8s
from vslice_core import annotations as ann
from vslice_core.model import Allocation, ContainerAllocation, GpuGrant
from vslice_kube.client import api_client
from vslice_kube.nodestate import NodeState
from vslice_lab.lab import services_kubeconfig_path
from vslice_lab.layout import Layout
from vslice_node.agent.nodeagent import NodeAgent
from vslice_node.agent.settings import NodeAgentSettings
from vslice_node.deviceplugin.api import deviceplugin_pb2 as pb
from vslice_node.gpus.backends.static import StaticBackend

# The kubelet's side of the protocol lives with the service tests.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "services"))
from kubelet import Kubelet, plugin_client

NODE = "lab-t4"
GPU = "GPU-t400-0000-0000-0000-000000000002"


def _services_kubeconfig(lab: LabHandle) -> Path:
    return services_kubeconfig_path(Layout.at(lab.state_dir))


@pytest.fixture
def plugin(lab: LabHandle, tmp_path: Path) -> Iterator[tuple[NodeAgent, Path]]:
    directory = Path(tempfile.mkdtemp(prefix="vsdp-", dir="/tmp"))
    settings = NodeAgentSettings(
        node_name=NODE,
        backend="static",
        inventory=str(INVENTORY),
        device_plugin_dir=str(directory),
        cache_root=str(tmp_path / "containers"),
        shim_library=str(tmp_path / "libvslice.so"),
        preload_file=str(tmp_path / "ld.so.preload"),
        cdi_spec_dir=str(tmp_path / "cdi"),
        kubeconfig=str(_services_kubeconfig(lab)),
    )
    kubelet = Kubelet(directory)
    # vslice's own identity: the state-annotation policy refuses vslice.io/delivered from others.
    api = NodeState.connect(str(_services_kubeconfig(lab)))
    running = NodeAgent(settings, StaticBackend(INVENTORY, NODE), api)
    running.start()
    kubelet.next_registration(timeout_s=20)
    yield running, directory
    running.stop()
    kubelet.stop()
    shutil.rmtree(directory, ignore_errors=True)


def test_allocate_finds_the_pod_through_the_api_server_and_records_delivery(
    lab: LabHandle, namespace: str, plugin: tuple[NodeAgent, Path]
) -> None:
    _, directory = plugin
    grant = GpuGrant(uuid=GPU, index=2, memory_mib=4096, cores=25)
    allocation = Allocation(node=NODE, containers=[ContainerAllocation(name="main", gpus=[grant])])
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "sliced"},
        "spec": {
            "nodeName": NODE,
            "containers": [{"name": "main", "image": "registry.invalid/sleep:1"}],
            "terminationGracePeriodSeconds": 0,
        },
    }
    lab.core.create_namespaced_pod(namespace, body, _preload_content=False)
    # The webhook removes vslice's annotations at creation; write the allocation afterwards
    # the way only vslice may (the extender's identity), as its Binding would.
    services = api_client(_services_kubeconfig(lab))
    patch = {"metadata": {"annotations": {ann.ALLOCATION: ann.encode_allocation(allocation)}}}
    k8s.CoreV1Api(services).patch_namespaced_pod("sliced", namespace, patch, _preload_content=False)
    services.close()  # type: ignore[no-untyped-call]
    client = plugin_client(directory / "vslice.sock")
    request = pb.AllocateRequest(
        container_requests=[pb.ContainerAllocateRequest(devices_ids=[f"{GPU}::0"])]
    )
    answer = client.Allocate(request, timeout=20).container_responses[0]
    assert answer.envs["NVIDIA_VISIBLE_DEVICES"] == GPU
    assert answer.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "4096m"
    assert answer.envs["CUDA_DEVICE_SM_LIMIT"] == "25"
    # The delivered record is written after the answer, off the kubelet's path (a background
    # writer, docs/device-plugin.md): wait for it rather than read it at once.
    deadline = time.monotonic() + 20
    pod = lab.read_pod(namespace, "sliced")
    while ann.DELIVERED not in (pod["metadata"].get("annotations") or {}):
        assert time.monotonic() < deadline, pod["metadata"].get("annotations")
        time.sleep(0.2)
        pod = lab.read_pod(namespace, "sliced")
    uid = pod["metadata"]["uid"]
    assert answer.envs["CUDA_DEVICE_MEMORY_SHARED_CACHE"] == f"/run/vslice/{uid}/main/vslice.cache"
    delivered = ann.decode_delivered(pod["metadata"]["annotations"][ann.DELIVERED])
    assert delivered.node == NODE
    assert delivered.containers == ["main"]


def test_the_node_inventory_annotation_is_written_through_the_api_server(
    lab: LabHandle, plugin: tuple[NodeAgent, Path]
) -> None:
    running, _ = plugin
    deadline = time.monotonic() + 20
    while running.annotation.state != "written" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert running.annotation.state == "written"
    node = lab.core.read_node(NODE, _preload_content=False)
    annotations = json.loads(node.data)["metadata"]["annotations"]
    inventory = ann.decode_node_gpus(annotations[ann.NODE_GPUS], NODE)
    assert [gpu.uuid for gpu in inventory.gpus][2] == GPU
    assert sum(gpu.slots for gpu in inventory.gpus) == 16
