"""DRA objects as a Kubernetes 1.36 API server returns them (resource.k8s.io/v1): quantities in
canonical form, the fields the server and kube-scheduler add (uids, pool generations,
shareIDs, the allocation's node selector, ``status.resourceClaimStatuses``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from vslice_core.dra import DRIVER

A100 = "NVIDIA-A100-SXM4-80GB"


def device(index: int, uuid: str, *, memory: str = "80Gi", slots: str = "4") -> dict[str, Any]:
    return {
        "name": f"gpu-{index}",
        "allowMultipleAllocations": True,
        "attributes": {
            "cordoned": {"bool": False},
            "healthy": {"bool": True},
            "index": {"int": index},
            "model": {"string": A100},
            "numaNode": {"int": 0},
            "uuid": {"string": uuid},
        },
        "capacity": {
            "cores": {
                "value": "100",
                "requestPolicy": {
                    "default": "0",
                    "validRange": {"min": "0", "max": "100", "step": "1"},
                },
            },
            "memory": {
                "value": memory,
                "requestPolicy": {
                    "default": memory,
                    "validRange": {"min": "1Mi", "max": memory, "step": "1Mi"},
                },
            },
            "slots": {"value": slots, "requestPolicy": {"default": "1", "validValues": ["1"]}},
        },
    }


def resource_slice(
    node: str, devices: list[dict[str, Any]], *, generation: int = 1
) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {
            "name": f"{node}-{DRIVER}",
            "uid": f"slice-uid-{node}",
            "resourceVersion": "4711",
            "creationTimestamp": "2026-12-01T10:00:00Z",
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": node, "uid": f"node-uid-{node}"}
            ],
        },
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def claim_spec(memory: str | None = "8Gi", cores: str | None = "30") -> dict[str, Any]:
    exactly: dict[str, Any] = {
        "deviceClassName": DRIVER,
        "allocationMode": "ExactCount",
        "count": 1,
    }
    asked = {k: v for k, v in (("memory", memory), ("cores", cores)) if v is not None}
    if asked:
        exactly["capacity"] = {"requests": asked}
    return {"devices": {"requests": [{"name": "main", "exactly": exactly}]}}


def result(node: str, device_name: str = "gpu-0", **consumed: str) -> dict[str, Any]:
    return {
        "request": "main",
        "driver": DRIVER,
        "pool": node,
        "device": device_name,
        "shareID": "0b7e9c1e-3b1f-4c9e-9d1a-5a2f0c6e8d41",
        "consumedCapacity": consumed or {"cores": "30", "memory": "8Gi", "slots": "1"},
    }


def claim(
    namespace: str,
    name: str,
    *,
    results: list[dict[str, Any]] | None = None,
    reserved: Sequence[tuple[str, str]] = (),
    spec: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A claim; with ``results`` allocated by kube-scheduler, reserved for ``(pod, uid)``."""
    body: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"claim-uid-{namespace}-{name}",
            "resourceVersion": "815",
            "annotations": {"resource.kubernetes.io/pod-claim-name": "vslice-gpu"},
        },
        "spec": spec or claim_spec(),
        "status": {},
    }
    if results is not None:
        node = results[0]["pool"] if results else ""
        body["status"]["allocation"] = {
            "devices": {"results": results},
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            },
            "allocationTimestamp": "2026-12-01T10:05:00Z",
        }
    if reserved:
        body["status"]["reservedFor"] = [
            {"resource": "pods", "name": pod, "uid": uid} for pod, uid in reserved
        ]
    return body


def template(namespace: str, name: str, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace, "uid": f"template-uid-{name}"},
        "spec": {"spec": spec or claim_spec()},
    }


def dra_pod(
    namespace: str,
    name: str,
    *,
    node: str | None = None,
    phase: str = "Running",
    template_name: str | None = "vslice-gpu-8gi",
    claim_name: str | None = None,
    generated: str | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A pod asking its GPU through a claim (no nvidia.com/* limits)."""
    entry: dict[str, Any] = {"name": "vslice-gpu"}
    if claim_name:
        entry["resourceClaimName"] = claim_name
    else:
        entry["resourceClaimTemplateName"] = template_name
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "main",
                "image": "python:3.12",
                "resources": {"claims": [{"name": "vslice-gpu", "request": "main"}]},
            }
        ],
        "resourceClaims": [entry],
    }
    if node:
        spec["nodeName"] = node
    status: dict[str, Any] = {"phase": phase}
    if generated:
        status["resourceClaimStatuses"] = [{"name": "vslice-gpu", "resourceClaimName": generated}]
    metadata: dict[str, Any] = {"namespace": namespace, "name": name, "uid": f"uid-{name}"}
    if annotations:
        metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": status}


def bare_node(name: str, address: str = "") -> dict[str, Any]:
    """A Node without vslice's annotation (a DRA-only node: no device plugin)."""
    node: dict[str, Any] = {"metadata": {"name": name}}
    if address:
        node["status"] = {"addresses": [{"type": "InternalIP", "address": address}]}
    return node
