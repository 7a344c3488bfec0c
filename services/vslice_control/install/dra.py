"""The DeviceClass ``gpu.vslice.io`` every vslice claim names: vslice's GPUs that are healthy and
not cordoned (``vslice_core.dra.devices.SELECTOR``, one attribute the node publishes).

Installed only where the cluster serves DRA consumable capacity (Kubernetes 1.36 and later,
docs/dra.md): elsewhere a claim could take a whole GPU while meaning to share it.
"""

from __future__ import annotations

from typing import Any

from vslice_core.dra import DEVICE_CLASS
from vslice_core.dra.devices import RESOURCE_API, SELECTOR

from vslice_control.install.namespaces import PART_OF
from vslice_control.install.values import InstallValues


def device_class() -> dict[str, Any]:
    return {
        "apiVersion": RESOURCE_API,
        "kind": "DeviceClass",
        "metadata": {"name": DEVICE_CLASS, "labels": dict(PART_OF)},
        "spec": {"selectors": [{"cel": {"expression": SELECTOR}}]},
    }


def objects(values: InstallValues) -> list[dict[str, Any]]:
    return [device_class()] if values.device_class else []
