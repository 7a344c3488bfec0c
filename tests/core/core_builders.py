"""Small builders for core tests: GPUs, nodes, clusters and Pod manifests as plain data."""

from __future__ import annotations

from typing import Any

from vslice_core.cluster import Cluster, build_ledger, parse_cluster
from vslice_core.ledger import Ledger
from vslice_core.model import PodRequest
from vslice_core.requests import pod_request

A100 = "NVIDIA-A100-SXM4-80GB"
T4 = "Tesla-T4"

RESOURCE = {
    "gpu": "nvidia.com/gpu",
    "mem": "nvidia.com/gpumem",
    "pct": "nvidia.com/gpumem-percentage",
    "cores": "nvidia.com/gpucores",
}


def gpu(uuid: str, **fields: Any) -> dict[str, Any]:
    """A CLUSTER GPU entry; defaults: an 80 GiB A100 with 10 slots."""
    entry: dict[str, Any] = {"uuid": uuid, "model": A100, "memory_mib": 81920, "slots": 10}
    entry.update(fields)
    return entry


def used(slots: int = 1, memory_mib: int = 0, cores: int = 0) -> dict[str, int]:
    return {"slots": slots, "memory_mib": memory_mib, "cores": cores}


def node(
    name: str, *gpus: dict[str, Any], topology: dict[str, int] | None = None
) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": name, "gpus": list(gpus)}
    if topology:
        entry["topology"] = topology
    return entry


def cluster(*nodes: dict[str, Any], quotas: dict[str, Any] | None = None) -> Cluster:
    return parse_cluster({"nodes": list(nodes), "quotas": quotas or {}})


def ledger(*nodes: dict[str, Any], quotas: dict[str, Any] | None = None) -> Ledger:
    return build_ledger(cluster(*nodes, quotas=quotas))


def container(name: str = "main", **limits: Any) -> dict[str, Any]:
    """A container; keyword limits use the short names gpu, mem, pct, cores."""
    resolved = {RESOURCE.get(key, key): value for key, value in limits.items()}
    return {"name": name, "image": "busybox", "resources": {"limits": resolved}}


def pod(
    *containers: dict[str, Any],
    init: tuple[dict[str, Any], ...] = (),
    annotations: dict[str, str] | None = None,
    namespace: str = "default",
    name: str = "p",
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers)}
    if init:
        spec["initContainers"] = list(init)
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"uid-{name}"}
    if annotations:
        metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def request(*containers: dict[str, Any], **pod_fields: Any) -> PodRequest:
    return pod_request(pod(*containers, **pod_fields))
