"""The DeviceClass ``gpu.vslice.io`` every vslice claim names: vslice's GPUs that are healthy and
not cordoned (``vslice_core.dra.devices.SELECTOR``, one attribute the node publishes).

Installed only where the cluster serves DRA consumable capacity (Kubernetes 1.36 and later,
docs/dra.md): elsewhere a claim could take a whole GPU while meaning to share it. By default
it also declares the GPU resource name as its ``extendedResourceName`` (see
:func:`device_class`).
"""

from __future__ import annotations

from typing import Any

from vslice_core.dra import DEVICE_CLASS
from vslice_core.dra.devices import RESOURCE_API, SELECTOR

from vslice_control.install.namespaces import PART_OF
from vslice_control.install.values import InstallValues


def device_class(extended_resource: str | None = None) -> dict[str, Any]:
    """The class; with ``extended_resource`` (the GPU resource name) a pod asking that name
    alone gets whole GPUs of this class through a claim kube-scheduler makes (KEP-5004, beta
    in 1.36, GA in 1.37), on nodes where no device plugin advertises the name."""
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": SELECTOR}}]}
    if extended_resource:
        spec["extendedResourceName"] = extended_resource
    return {
        "apiVersion": RESOURCE_API,
        "kind": "DeviceClass",
        "metadata": {"name": DEVICE_CLASS, "labels": dict(PART_OF)},
        "spec": spec,
    }


def maps_gpu_name(values: InstallValues) -> bool:
    """Whether the installed DeviceClass maps the GPU resource name (what the scheduler
    profile and the webhook must agree with)."""
    return values.device_class and values.device_class_extended_resource


def objects(values: InstallValues) -> list[dict[str, Any]]:
    if not values.device_class:
        return []
    return [device_class(values.resources.gpu if maps_gpu_name(values) else None)]
