"""A namespace's GPU quota holds on the DRA path (docs/dra.md, "Quotas"): kube-scheduler's
writes of a vslice claim's allocation go through the webhook, which counts every allocated
claim of the namespace under one lock; a claim that alone cannot fit is refused at creation.

The pods run on the lab's simulated nodes, whose ResourceSlices kube-scheduler's DRA allocator
allocates from as it does a real node's; what is checked is the API server's own record.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from conftest import LabHandle
from dra_claims import claim_spec, create_template
from kubernetes import client as k8s
from vslice_core.dra import DRIVER, MIB
from vslice_core.quantities import parse_quantity

pytestmark = pytest.mark.timeout(300)
CLAIM = "gpu"
REFUSED = "more than its quota allows (ResourceQuota requests.nvidia.com/gpumem = 3072)"


def resource(lab: LabHandle) -> k8s.ResourceV1Api:
    return k8s.ResourceV1Api(lab.api)


def gpu_quota(lab: LabHandle, namespace: str, mib: int) -> None:
    quota: Any = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "gpu"},
        "spec": {"hard": {"requests.nvidia.com/gpumem": str(mib)}},
    }
    lab.core.create_namespaced_resource_quota(namespace, quota, _preload_content=False)
    time.sleep(2)  # the webhook's quota watch


def claim_pod(lab: LabHandle, namespace: str, name: str, template: str) -> None:
    body: Any = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "resourceClaims": [{"name": CLAIM, "resourceClaimTemplateName": template}],
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/sleep:1",
                    "resources": {"claims": [{"name": CLAIM}]},
                }
            ],
        },
    }
    lab.core.create_namespaced_pod(namespace, body, _preload_content=False)


def pods(lab: LabHandle, namespace: str) -> list[dict[str, Any]]:
    response: Any = lab.core.list_namespaced_pod(namespace, _preload_content=False)
    body = json.loads(response.data)
    items: list[dict[str, Any]] = body["items"]
    return items


def refusal(pod: dict[str, Any]) -> str:
    for condition in pod.get("status", {}).get("conditions") or []:
        if condition["type"] == "PodScheduled" and REFUSED in (condition.get("message") or ""):
            return str(condition["message"])
    return ""


def unschedulable(pod: dict[str, Any]) -> bool:
    """kube-scheduler has tried the pod and left it pending (for whatever reason)."""
    return any(
        c["type"] == "PodScheduled" and c["status"] == "False"
        for c in pod.get("status", {}).get("conditions") or []
    )


def events_of(lab: LabHandle, namespace: str, name: str) -> list[str]:
    response: Any = lab.core.list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name}", _preload_content=False
    )
    return [str(e.get("message")) for e in json.loads(response.data)["items"]]


def refusal_event(lab: LabHandle, namespace: str, name: str) -> str:
    return next((m for m in events_of(lab, namespace, name) if REFUSED in m), "")


def allocated_mib(lab: LabHandle, namespace: str) -> list[int]:
    response: Any = resource(lab).list_namespaced_resource_claim(namespace, _preload_content=False)
    found = []
    for item in json.loads(response.data)["items"]:
        allocation = (item.get("status") or {}).get("allocation") or {}
        for result in (allocation.get("devices") or {}).get("results") or []:
            if result["driver"] == DRIVER:
                memory = result["consumedCapacity"]["memory"]
                found.append(int(parse_quantity(memory, "memory") // MIB))
    return found


def test_of_ten_1024_mib_claims_at_once_a_3072_mib_quota_lets_three_be_allocated(
    services: LabHandle, namespace: str
) -> None:
    gpu_quota(services, namespace, 3072)
    create_template(resource(services), namespace, "one-gib", "1024Mi")
    with ThreadPoolExecutor(10) as pool:
        list(pool.map(lambda i: claim_pod(services, namespace, f"p{i}", "one-gib"), range(10)))

    deadline = time.monotonic() + 120
    while True:
        listed = pods(services, namespace)
        bound = [p for p in listed if p["spec"].get("nodeName")]
        tried = [p for p in listed if not p["spec"].get("nodeName") and unschedulable(p)]
        if len(bound) + len(tried) == 10 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    time.sleep(3)  # kube-scheduler keeps retrying the others: nothing more may get through
    listed = pods(services, namespace)
    bound = [p for p in listed if p["spec"].get("nodeName")]
    waiting = [p for p in listed if not p["spec"].get("nodeName")]
    assert len(bound) == 3, [p["metadata"]["name"] for p in bound]
    assert allocated_mib(services, namespace) == [1024, 1024, 1024]
    # Each waiting pod was either refused by the allocation check (its condition, or its
    # FailedScheduling events once a retry replaced the condition) or found no device with a
    # free slot left by kube-scheduler's own count (the card's slices), never bound.
    refused = [
        refusal(pod) or refusal_event(services, namespace, pod["metadata"]["name"])
        for pod in waiting
    ]
    said = [message for message in refused if message]
    assert said, [events_of(services, namespace, p["metadata"]["name"]) for p in waiting]
    for message in said:
        assert "gpu-claim-allocations.vslice.io" in message, message
        assert "gives it 1024 MiB of GPU memory" in message, message
        assert "already hold 3072: 4096 in all" in message, message


def test_a_claim_without_a_memory_request_in_a_2048_mib_namespace_is_refused_at_creation(
    services: LabHandle, namespace: str
) -> None:
    gpu_quota(services, namespace, 2048)
    body: Any = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "whole"},
        "spec": claim_spec(None),
    }
    with pytest.raises(k8s.ApiException) as caught:
        resource(services).create_namespaced_resource_claim(namespace, body, _preload_content=False)
    assert caught.value.status == 403
    message = json.loads(str(caught.value.body))["message"]
    assert f"ResourceClaim {namespace}/whole: spec.devices.requests ask at least" in message
    assert "takes a whole card, and the smallest the cluster lists has" in message, message
    assert "(ResourceQuota requests.nvidia.com/gpumem = 2048); ask at most 2048Mi" in message


def test_a_namespace_using_both_paths_is_held_to_one_quota(
    services: LabHandle, namespace: str
) -> None:
    """An extender-path pod counts against a claim's allocation, and an allocated claim against
    the extender's bind (before, each path counted only its own against the whole quota)."""
    gpu_quota(services, namespace, 3072)
    for name, size in (("two-gib", "2048Mi"), ("one-gib", "1024Mi")):
        create_template(resource(services), namespace, name, size)
    services.create_pod(
        namespace, "notebook", limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "2048"}
    )
    services.wait_for_pod(
        namespace, "notebook", lambda p: bool(p["spec"].get("nodeName")), what="bound"
    )
    time.sleep(2)  # the webhook's pod watch

    claim_pod(services, namespace, "training", "two-gib")
    both = (
        f"the pods of namespace {namespace!r} on the extender path already hold 2048: 4096 in all"
    )

    def refused(pod: dict[str, Any]) -> bool:
        conditions = pod.get("status", {}).get("conditions") or []
        said = [c.get("message") or "" for c in conditions if c["type"] == "PodScheduled"]
        said += events_of(services, namespace, "training")
        return any(both in message for message in said)

    pod = services.wait_for_pod(namespace, "training", refused, what="refused for quota")
    assert not pod["spec"].get("nodeName")
    services.core.delete_namespaced_pod("training", namespace, _preload_content=False)

    claim_pod(services, namespace, "small", "one-gib")
    services.wait_for_pod(
        namespace, "small", lambda p: bool(p["spec"].get("nodeName")), what="bound"
    )
    assert allocated_mib(services, namespace) == [1024]
    time.sleep(2)  # the extender's claim watch

    services.create_pod(
        namespace, "second", limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1024"}
    )

    def over_quota(pod: dict[str, Any]) -> bool:
        return any(
            "quota_exceeded" in (c.get("message") or "")
            for c in pod["status"].get("conditions") or []
        )

    pod = services.wait_for_pod(namespace, "second", over_quota, what="refused for quota")
    assert not pod["spec"].get("nodeName")
