"""The spec of a claim on vslice's device class, and its ResourceClaimTemplate, as the DRA lab
tests write them."""

from __future__ import annotations

from typing import Any

from kubernetes import client as k8s
from vslice_core.dra import DEVICE_CLASS


def claim_spec(memory: str | None, cores: int | None = None) -> dict[str, Any]:
    """One request, ``main``, of one device; no memory asked means the whole card."""
    capacity: dict[str, str] = {}
    if memory is not None:
        capacity["memory"] = memory
    if cores is not None:
        capacity["cores"] = str(cores)
    exactly: dict[str, Any] = {"deviceClassName": DEVICE_CLASS, "count": 1}
    if capacity:
        exactly["capacity"] = {"requests": capacity}
    return {"devices": {"requests": [{"name": "main", "exactly": exactly}]}}


def create_template(
    api: k8s.ResourceV1Api, namespace: str, name: str, memory: str | None, cores: int | None = None
) -> None:
    """A ResourceClaimTemplate ``name`` of one :func:`claim_spec` device."""
    body: Any = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": claim_spec(memory, cores)},
    }
    api.create_namespaced_resource_claim_template(namespace, body, _preload_content=False)
