"""A GPU on the DRA path that fails or that an operator cordons, on the lab's real node: the node
agent taints its device in the ResourceSlice (vslice_core.dra.taints), kube-controller-manager
evicts the pods of a failed GPU (NoExecute) and kube-scheduler gives a cordoned one no new
claim (NoSchedule) while its running pods stay.

The GPU fails the way a lab GPU can: ``healthy: false`` in the node agent's copy of the
inventory (NodeLayout.gpus_file), which the static backend re-reads within a second; on a
GPU node the NVML backend marks a GPU unhealthy on a critical XID instead, and the publishing
from there on is the same code."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException
from realnode_pods import RealNode, running
from test_dra_realnode import SLEEP, claim_pod, dra_gpu, resource, template, wait
from vslice_core.dra import taints
from vslice_core.dra.devices import slice_name

pytestmark = pytest.mark.timeout(300)

GpuState = Callable[..., None]


@pytest.fixture
def gpu_state(real_node: RealNode) -> Iterator[GpuState]:
    """Sets fields of one GPU of the real node in the agent's inventory; put back afterwards,
    waiting until the slice is untainted again."""
    path = real_node.layout.gpus_file
    original = path.read_text()

    def change(index: int, **fields: Any) -> None:
        data = yaml.safe_load(path.read_text())
        (entry,) = [n for n in data["nodes"] if n["name"] == real_node.name]
        entry["gpus"][index].update(fields)
        path.write_text(yaml.safe_dump(data, sort_keys=False))

    try:
        yield change
    finally:
        path.write_text(original)
        wait(lambda: not _taints(real_node), "the slice untainted again", timeout=30)


def _device(node: RealNode) -> dict[str, Any]:
    response = resource(node).read_resource_slice(slice_name(node.name), _preload_content=False)
    published: dict[str, Any] = json.loads(response.data)
    index = dra_gpu(node).index
    (device,) = [d for d in published["spec"]["devices"] if d["name"] == f"gpu-{index}"]
    return device


def _taints(node: RealNode) -> list[tuple[str, str, str]]:
    return taints.normal(_device(node))


def _gone_or_ending(node: RealNode, namespace: str, name: str) -> bool:
    try:
        pod = node.lab.read_pod(namespace, name)
    except ApiException as error:
        return error.status == 404
    return bool(pod["metadata"].get("deletionTimestamp"))


def _running_claim_pod(node: RealNode, namespace: str, name: str) -> None:
    """A pod holding a 1 GiB claim on the DRA GPU, running."""
    template(node, namespace, "one-gib", memory="1Gi")
    claim_pod(node, namespace, name, "one-gib", SLEEP)
    node.wait_running(namespace, name)


def _stays_unplaced(node: RealNode, namespace: str, name: str) -> None:
    """A new claim pod on the node's one DRA GPU is not placed within 5 s."""
    claim_pod(node, namespace, name, "one-gib", SLEEP)
    time.sleep(5)
    pod = node.lab.read_pod(namespace, name)
    assert not pod["spec"].get("nodeName"), f"{name} was placed on the tainted GPU"


def test_a_failed_gpu_is_tainted_and_its_pods_are_evicted(
    real_node: RealNode, namespace: str, gpu_state: GpuState
) -> None:
    gpu = dra_gpu(real_node)
    _running_claim_pod(real_node, namespace, "on-failing")

    gpu_state(gpu.index, healthy=False)
    wait(
        lambda: _taints(real_node) == [(taints.UNHEALTHY, "", "NoExecute")],
        "the NoExecute taint on the failed GPU's device",
        timeout=30,
    )
    assert _device(real_node)["taints"][0].get("timeAdded")  # stamped by the API server
    wait(
        lambda: _gone_or_ending(real_node, namespace, "on-failing"),
        "kube-controller-manager evicting the pod on the failed GPU",
        timeout=60,
    )
    _stays_unplaced(real_node, namespace, "after")  # the node's only DRA GPU has failed


def test_a_cordoned_gpu_keeps_its_pods_and_takes_no_new_claim(
    real_node: RealNode, namespace: str, gpu_state: GpuState
) -> None:
    gpu = dra_gpu(real_node)
    _running_claim_pod(real_node, namespace, "before")

    gpu_state(gpu.index, cordoned=True)
    wait(
        lambda: _taints(real_node) == [(taints.CORDONED, "", "NoSchedule")],
        "the NoSchedule taint on the cordoned GPU's device",
        timeout=30,
    )
    _stays_unplaced(real_node, namespace, "waiting")
    assert running(real_node.lab.read_pod(namespace, "before"))  # NoSchedule evicts nothing

    gpu_state(gpu.index, cordoned=False)
    real_node.wait_running(namespace, "waiting", timeout=60)
