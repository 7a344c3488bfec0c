"""vslice's DRA driver ``gpu.vslice.io``, in pure functions: what a node publishes
(:mod:`.devices`, with :mod:`.taints` for failed and cordoned GPUs), what a claim asks
(:mod:`.claims`) and what an allocation grants (:mod:`.allocations`). docs/dra.md describes
the mapping; the adapters in ``vslice_kube`` and the kubelet plugin in ``vslice_node.dra``
only move these dicts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

DRIVER = "gpu.vslice.io"
"""The driver name: ResourceSlices' ``spec.driver``, the DeviceClass' name, the attribute and
capacity domain, the kubelet plugin's registration name."""

DEVICE_CLASS = DRIVER
"""The DeviceClass every vslice claim names (healthy, uncordoned vslice GPUs)."""

MEMORY = "memory"
"""Capacity: device memory in bytes; a claim consumes what it asks (default: all of it)."""
CORES = "cores"
"""Capacity: percent of the GPU's SMs; a claim consumes what it asks (default: 0)."""
SLOTS = "slots"
"""Capacity: how many slices the GPU holds at once; every claim consumes exactly one."""

MIB = 2**20


def claim_label(claim: Mapping[str, Any]) -> str:
    """``namespace/name`` of a claim (or template), for messages."""
    meta = claim.get("metadata") or {}
    return f"{meta.get('namespace', '?')}/{meta.get('name', '?')}"
