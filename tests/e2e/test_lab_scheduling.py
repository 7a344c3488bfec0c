"""Pods created through the lab's real API server are scheduled onto its simulated GPU nodes."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from conftest import LabHandle
from kubernetes.client.exceptions import ApiException

pytestmark = pytest.mark.timeout(120)


def _running(pod: dict[str, Any]) -> bool:
    return pod["spec"].get("nodeName") is not None and pod["status"].get("phase") == "Running"


def test_a_plain_pod_is_scheduled_onto_a_simulated_node_and_runs(
    lab: LabHandle, namespace: str
) -> None:
    lab.create_pod(namespace, "plain", limits={"cpu": "1", "memory": "1Gi"})
    pod = lab.wait_for_pod(namespace, "plain", _running, what="bound and Running")
    assert pod["spec"]["nodeName"] in lab.record.nodes
    # A pod without GPU resources never reaches the extender.
    assert lab.extender.calls_for("filter", "plain") == []


def test_simulated_nodes_advertise_one_gpu_device_per_slot_and_their_inventory(
    lab: LabHandle,
) -> None:
    from vslice_core.annotations import NODE_GPUS, decode_node_gpus

    node = lab.core.read_node("lab-a100")
    assert node.status.allocatable["nvidia.com/gpu"] == "20"  # 2 GPUs x 10 slots
    inventory = decode_node_gpus(node.metadata.annotations[NODE_GPUS], "lab-a100")
    assert [gpu.model for gpu in inventory.gpus] == ["NVIDIA-A100-SXM4-80GB"] * 2
    assert inventory.gpus[0].memory_mib == 81920


def test_a_gpu_pod_is_sent_to_the_extender_configured_in_the_scheduler(
    lab: LabHandle, namespace: str
) -> None:
    lab.create_pod(
        namespace,
        "sliced",
        limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "10240", "nvidia.com/gpucores": "30"},
        scheduler_name="vslice-scheduler",
    )
    pod = lab.wait_for_pod(namespace, "sliced", _running, what="bound and Running")

    filters = lab.extender.calls_for("filter", "sliced")
    assert filters, "kube-scheduler never called the extender's filter verb for the GPU pod"
    sent = filters[0].body
    # nodeCacheCapable: node names only, and every simulated node with free GPU devices.
    assert sent.get("Nodes") is None
    assert set(sent["NodeNames"]) == set(lab.record.nodes)
    limits = sent["Pod"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpumem"] == "10240"
    assert sent["Pod"]["metadata"]["namespace"] == namespace

    binds = lab.extender.calls_for("bind", "sliced")
    assert len(binds) == 1
    assert binds[0].body["PodNamespace"] == namespace
    assert binds[0].body["PodUID"] == pod["metadata"]["uid"]
    assert binds[0].body["Node"] == pod["spec"]["nodeName"]
    assert binds[0].answer == {"Error": ""} or not binds[0].answer.get("Error")


def test_a_gpu_pod_no_node_can_hold_stays_pending_without_reaching_the_extender(
    lab: LabHandle, namespace: str
) -> None:
    # More devices than any simulated node advertises: kube-scheduler's own fit check stops it.
    lab.create_pod(namespace, "too-big", limits={"nvidia.com/gpu": "1000"})
    pod = lab.wait_for_pod(
        namespace,
        "too-big",
        lambda p: any(
            c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
            for c in p["status"].get("conditions") or []
        ),
        what="Unschedulable",
    )
    assert pod["spec"].get("nodeName") is None
    assert lab.extender.calls_for("bind", "too-big") == []


def test_a_resource_quota_is_counted_and_enforced_by_the_control_plane(
    lab: LabHandle, namespace: str
) -> None:
    quota = {"metadata": {"name": "one-pod"}, "spec": {"hard": {"pods": "1"}}}
    lab.core.create_namespaced_resource_quota(namespace, quota, _preload_content=False)
    deadline = time.monotonic() + 30
    while not (lab.core.read_namespaced_resource_quota("one-pod", namespace).status.hard or {}):
        assert time.monotonic() < deadline, "the quota controller never filled in status.hard"
        time.sleep(0.2)
    lab.create_pod(namespace, "first")
    with pytest.raises(ApiException) as refused:
        lab.create_pod(namespace, "second")
    assert refused.value.status == 403
    assert "exceeded quota: one-pod" in str(refused.value.body)


def test_a_deleted_namespace_is_emptied_and_removed(lab: LabHandle) -> None:
    name = f"e2e-doomed-{uuid.uuid4().hex[:5]}"
    lab.core.create_namespace({"metadata": {"name": name}}, _preload_content=False)
    deadline = time.monotonic() + 30
    while True:  # the service account controller creates "default"
        try:
            lab.core.read_namespaced_service_account("default", name)
            break
        except ApiException:
            assert time.monotonic() < deadline, "no default service account appeared"
            time.sleep(0.2)
    lab.create_pod(name, "tenant")
    lab.wait_for_pod(name, "tenant", _running, what="bound and Running")
    lab.core.delete_namespace(name, _preload_content=False)
    deadline = time.monotonic() + 60
    while True:
        try:
            lab.core.read_namespace(name)
        except ApiException as gone:
            assert gone.status == 404
            return
        assert time.monotonic() < deadline, "the namespace was never removed"
        time.sleep(0.5)
