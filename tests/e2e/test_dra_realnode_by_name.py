"""Whole GPUs by their usual name, ``nvidia.com/gpu: 1`` and nothing else, in a namespace on the
DRA path, on the lab's real node (docs/kubernetes-versions.md, "Extended resources served by
DRA"). The lab's DeviceClass declares ``extendedResourceName: nvidia.com/gpu``, and the webhook
leaves such a pod as it is. Where it lands depends on the node, as KEP-5004 rules:

- the node as the lab starts it serves the name through the device plugin (GPUs 0 and 1; GPU
  2 is on DRA): the pod takes the extender path there, and gets a whole GPU with the
  extender's allocation;
- the same node with every GPU on DRA (``dra_gpus`` changed and the node agent restarted,
  then put back) advertises no ``nvidia.com/gpu``: kube-scheduler makes the pod's claim
  itself, the extender passes the node and binds without an allocation, and the kubelet
  plugin prepares the claim, so the container gets the same shim and a whole card.

Every other lab test runs with the DeviceClass mapping the name as well: vslice's own scheduler
profile runs without the DynamicResources plugin, which would otherwise refuse every sliced pod
("cannot fit resource").
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from realnode_pods import RealNode, parse_smoke
from test_dra_realnode import wait
from vslice_build.images import SMOKE_IMAGE
from vslice_core.annotations import ALLOCATION, NODE_GPUS, decode_allocation, decode_node_gpus
from vslice_core.dra import DRIVER
from vslice_core.dra.devices import slice_name
from vslice_lab import lab as lab_module

pytestmark = pytest.mark.timeout(300)

EXTENDED_CLAIM = "resource.kubernetes.io/extended-resource-claim"


def dra_namespace(node: RealNode, namespace: str) -> None:
    node.lab.core.patch_namespace(namespace, {"metadata": {"labels": {"vslice.io/path": "dra"}}})
    time.sleep(1.0)  # the webhook follows namespace labels through a watch


def whole_gpu_pod(
    node: RealNode, namespace: str, name: str, command: list[str] | None = None
) -> dict[str, Any]:
    """``vslice-smoke memory`` (or ``command``) asking ``nvidia.com/gpu: 1`` alone, on the
    real node."""
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "nodeSelector": {"kubernetes.io/hostname": node.name},
            "containers": [
                {
                    "name": "main",
                    "image": SMOKE_IMAGE,
                    "command": command or ["vslice-smoke", "memory"],
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ],
        },
    }
    response = node.lab.core.create_namespaced_pod(namespace, body, _preload_content=False)
    created: dict[str, Any] = json.loads(response.data)
    return created


def left_alone(created: dict[str, Any]) -> None:
    """The webhook neither converted the pod into a claim nor routed it to vslice's profile."""
    spec = created["spec"]
    assert not spec.get("resourceClaims"), spec.get("resourceClaims")
    assert spec["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert spec.get("schedulerName", "default-scheduler") == "default-scheduler"


def ran_on_a_whole_card(node: RealNode, namespace: str, name: str) -> dict[str, str]:
    pod = node.wait_finished(namespace, name)
    text = node.logs(namespace, name)
    assert pod["status"]["phase"] == "Succeeded", text
    return saw_a_whole_card(node, text)


def saw_a_whole_card(node: RealNode, text: str) -> dict[str, str]:
    seen = parse_smoke(text)
    assert "max_allocated_mib" in seen, text
    total = node.all_gpus[0].memory_mib
    assert seen["device.0.total_mib"] == str(total), text
    assert int(seen["max_allocated_mib"]) <= total, text
    return seen


def logs_of(node: RealNode, namespace: str, name: str) -> str:
    """The container's log so far; empty while it has not started."""
    try:
        return node.logs(namespace, name) or ""  # the client answers None for an empty log
    except ApiException:
        return ""


def node_allocatable(node: RealNode) -> str:
    read = node.lab.core.read_node(node.name, _preload_content=False)
    allocatable: dict[str, str] = json.loads(read.data)["status"]["allocatable"]
    return allocatable.get("nvidia.com/gpu", "0")


def extender_gpus(node: RealNode) -> int:
    read = node.lab.core.read_node(node.name, _preload_content=False)
    annotations = json.loads(read.data)["metadata"].get("annotations") or {}
    return len(decode_node_gpus(annotations[NODE_GPUS], node.name).gpus)


def published(node: RealNode) -> int:
    api: Any = k8s.ResourceV1Api(node.lab.api)
    read = api.read_resource_slice(slice_name(node.name), _preload_content=False)
    return len(json.loads(read.data)["spec"]["devices"])


def set_dra_gpus(node: RealNode, gpus: list[int]) -> None:
    """Rewrite the node agent's ``dra_gpus`` and restart it (what an operator does to move
    GPUs between the paths, docs/dra.md, "Mixing paths")."""
    path = node.layout.settings("device-plugin")
    settings = yaml.safe_load(path.read_text())
    settings["dra_gpus"] = gpus
    path.write_text(yaml.safe_dump(settings, sort_keys=True))
    lab_module.restart(node.lab.state_dir, f"device-plugin-{node.name}")


@pytest.fixture
def all_on_dra(real_node: RealNode, namespace: str) -> Iterator[RealNode]:
    """The real node with every GPU on the DRA path; the lab's layout is put back afterwards,
    waiting until the kubelet, the extender's annotation and the slice show it again."""
    settings = real_node.layout.settings("device-plugin")
    original = settings.read_text()
    slots = sum(gpu.slots for gpu in real_node.gpus)
    everything = [gpu.index for gpu in real_node.all_gpus]
    try:
        set_dra_gpus(real_node, everything)
        wait(lambda: node_allocatable(real_node) == "0", "nvidia.com/gpu allocatable 0")
        wait(lambda: extender_gpus(real_node) == 0, "an empty GPU list for the extender")
        wait(lambda: published(real_node) == len(everything), "every GPU in the slice")
        yield real_node
    finally:
        real_node.delete_all(namespace)
        settings.write_text(original)
        lab_module.restart(real_node.lab.state_dir, f"device-plugin-{real_node.name}")
        wait(lambda: node_allocatable(real_node) == str(slots), f"{slots} devices again")
        wait(lambda: extender_gpus(real_node) == len(real_node.gpus), "the GPU list again")
        wait(lambda: published(real_node) == len(real_node.dra_gpus), "the slice again")


def test_on_the_mixed_node_the_name_takes_the_device_plugin_path_and_a_whole_card(
    real_node: RealNode, namespace: str
) -> None:
    dra_namespace(real_node, namespace)
    left_alone(whole_gpu_pod(real_node, namespace, "by-name"))
    ran_on_a_whole_card(real_node, namespace, "by-name")
    pod = real_node.lab.read_pod(namespace, "by-name")
    allocation = decode_allocation(pod["metadata"]["annotations"][ALLOCATION])
    ((grant,),) = [c.gpus for c in allocation.containers]
    assert grant.uuid in {gpu.uuid for gpu in real_node.gpus}  # GPU 0 or 1, not the DRA one
    assert not (pod.get("status") or {}).get("extendedResourceClaimStatus")


def test_on_a_node_with_every_gpu_on_dra_the_scheduler_claims_a_whole_gpu(
    all_on_dra: RealNode, namespace: str
) -> None:
    node = all_on_dra
    dra_namespace(node, namespace)
    # It stays Running after the smoke program: the claim kube-scheduler made is deleted once
    # its pod has ended, and the test reads it.
    script = "vslice-smoke memory && sleep 300"
    left_alone(whole_gpu_pod(node, namespace, "by-claim", ["sh", "-c", script]))
    wait(lambda: "max_allocated_mib=" in logs_of(node, namespace, "by-claim"), "the smoke run")
    seen = saw_a_whole_card(node, logs_of(node, namespace, "by-claim"))
    pod = node.lab.read_pod(namespace, "by-claim")
    assert ALLOCATION not in (pod["metadata"].get("annotations") or {})
    status = pod["status"]["extendedResourceClaimStatus"]
    claim_name = status["resourceClaimName"]
    assert [m["resourceName"] for m in status["requestMappings"]] == ["nvidia.com/gpu"]
    api: Any = k8s.ResourceV1Api(node.lab.api)
    read = api.read_namespaced_resource_claim(claim_name, namespace, _preload_content=False)
    claim = json.loads(read.data)
    assert claim["metadata"]["annotations"][EXTENDED_CLAIM] == "true"
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert (result["driver"], result["pool"]) == (DRIVER, node.name)
    card = next(g for g in node.all_gpus if f"gpu-{g.index}" == result["device"])
    assert result["consumedCapacity"]["memory"] == f"{card.memory_mib}Mi"
    assert seen["device.0.uuid"] == card.uuid
