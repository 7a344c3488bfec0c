"""Priority preemption on the extender path, on the lab's real node (docs/preemption.md): a pod
of a higher PriorityClass that fits on no GPU evicts, through the Eviction API, the fewest
lower-priority slices that make room (then the lowest priorities, then the youngest), and
runs there once they are gone; equal priority evicts nothing; a PodDisruptionBudget keeps its
pod, and another is chosen.

Every pod names the node's first extender GPU (``vslice.io/gpu-uuid``), so the GPU is full
for the pending pod although the second one is free: the test is about that one GPU.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes import client as k8s
from realnode_pods import RealNode, running
from vslice import Client
from vslice_build.images import SMOKE_IMAGE

pytestmark = pytest.mark.timeout(300)

SLEEP = ["sh", "-c", "sleep 600"]


def slice_pod(
    node: RealNode, namespace: str, name: str, memory_mib: int, priority_class: str
) -> None:
    gpu = node.gpus[0]
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"app": name},
            "annotations": {"vslice.io/gpu-uuid": gpu.uuid},
        },
        "spec": {
            "priorityClassName": priority_class,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": SMOKE_IMAGE,
                    "command": SLEEP,
                    "resources": {
                        "limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(memory_mib)}
                    },
                }
            ],
        },
    }
    node.lab.core.create_namespaced_pod(namespace, body, _preload_content=False)


def full_gpu(node: RealNode, namespace: str, low: str) -> None:
    """GPU 0 (23,034 MiB) holds ``old`` (12,000 MiB) and, started after it, ``young``
    (8,000 MiB), both of the low class: 3,034 MiB stay free."""
    slice_pod(node, namespace, "old", 12000, low)
    node.wait_running(namespace, "old")
    time.sleep(1.1)  # start times have a resolution of one second
    slice_pod(node, namespace, "young", 8000, low)
    node.wait_running(namespace, "young")


def test_a_high_priority_pod_evicts_the_youngest_slice_that_frees_enough_and_runs(
    real_node: RealNode, namespace: str, classes: dict[str, str]
) -> None:
    full_gpu(real_node, namespace, classes["low"])
    slice_pod(real_node, namespace, "train", 10000, classes["high"])
    # Either low pod alone frees enough (10,000 MiB needed, 3,034 free): the younger goes.
    pod = real_node.wait(namespace, "train", running, "Running after preemption", timeout=60)
    assert pod["spec"]["nodeName"] == real_node.name
    assert real_node.gone(namespace, "young")
    assert real_node.lab.read_pod(namespace, "old")["status"]["phase"] == "Running"
    said = real_node.events(namespace, "train")
    assert "Preempting" in said and "young" in said["Preempting"], said
    victim = real_node.events(namespace, "young")
    assert "priority 1000 > 0" in victim.get("Preempted", ""), victim
    # What a data scientist's notebook sees of its evicted pod.
    with Client(real_node.lab.kubeconfig, namespace=namespace) as client:
        status = client.workload("young").status
    assert status.preempted_by == f"{namespace}/train", status
    assert status.phase in ("Evicted", "Terminating"), status


def test_equal_priority_evicts_nothing_and_the_pod_says_why_it_waits(
    real_node: RealNode, namespace: str, classes: dict[str, str]
) -> None:
    full_gpu(real_node, namespace, classes["low"])
    slice_pod(real_node, namespace, "peer", 10000, classes["low"])
    time.sleep(5)
    pod = real_node.lab.read_pod(namespace, "peer")
    assert not pod["spec"].get("nodeName")
    message = " ".join(c.get("message", "") for c in pod["status"].get("conditions") or [])
    assert "vslice:" in message, message
    assert not real_node.gone(namespace, "old") and not real_node.gone(namespace, "young")


def test_a_disruption_budget_keeps_its_pod_and_the_other_is_evicted(
    real_node: RealNode, namespace: str, classes: dict[str, str]
) -> None:
    policy: Any = k8s.PolicyV1Api(real_node.lab.api)
    budget = {
        "metadata": {"name": "keep-young"},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "young"}}},
    }
    policy.create_namespaced_pod_disruption_budget(namespace, budget, _preload_content=False)
    full_gpu(real_node, namespace, classes["low"])
    slice_pod(real_node, namespace, "train", 10000, classes["high"])
    real_node.wait(namespace, "train", running, "Running after preemption", timeout=90)
    assert real_node.gone(namespace, "old")
    assert real_node.lab.read_pod(namespace, "young")["status"]["phase"] == "Running"
