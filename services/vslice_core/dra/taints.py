"""Device taints: how a GPU that failed or that an operator cordoned keeps claims off itself.

A ResourceSlice device may carry taints (KEP-5055: beta and on by default from Kubernetes
1.36, GA in 1.37). kube-scheduler's allocator does not give a tainted device to a claim that
does not tolerate the taint, and for ``NoExecute`` the device-taint eviction controller of
kube-controller-manager deletes the pods whose claims hold the device. vslice's node agent
publishes:

- ``gpu.vslice.io/unhealthy`` with ``NoExecute`` on a GPU the node marks unhealthy (a critical
  XID on the NVML backend, ``healthy: false`` in a static inventory): the card is lost to its
  processes, so their pods are ended where Kubernetes can restart them;
- ``gpu.vslice.io/cordoned`` with ``NoSchedule`` on a GPU an operator cordoned: no new claim,
  the running ones stay.

The ``allocatable`` attribute the DeviceClass selects on stays as well, so a cluster that
drops taints (the feature gate off) still gives a failed GPU no new claim; it evicts nothing.
A claim that must keep a failed GPU (a post-mortem job) tolerates the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vslice_core.model import Gpu

UNHEALTHY = "gpu.vslice.io/unhealthy"
CORDONED = "gpu.vslice.io/cordoned"
NO_EXECUTE = "NoExecute"
NO_SCHEDULE = "NoSchedule"


def device_taints(gpu: Gpu) -> list[dict[str, str]]:
    """The taints vslice puts on the GPU's device (none on a healthy, uncordoned GPU)."""
    taints = []
    if not gpu.healthy:
        taints.append({"key": UNHEALTHY, "effect": NO_EXECUTE})
    if gpu.cordoned:
        taints.append({"key": CORDONED, "effect": NO_SCHEDULE})
    return taints


def normal(device: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """A device's taints as vslice compares them: key, value, effect, sorted. The API server
    adds ``timeAdded``, which says when, not what."""
    taints = device.get("taints") or []
    if not isinstance(taints, list):
        return []
    return sorted(
        (str(t.get("key", "")), str(t.get("value") or ""), str(t.get("effect", "")))
        for t in taints
        if isinstance(t, Mapping)
    )


def carry_times(stored: Mapping[str, Any], wanted: Mapping[str, Any]) -> None:
    """Give each of ``wanted``'s taints the ``timeAdded`` the stored slice has for the same
    taint of the same device, in place. Rewriting the slice for another device's sake must not
    restart a taint's clock: eviction delays (``tolerationSeconds``) count from it."""
    times: dict[tuple[str, tuple[str, str, str]], Any] = {}
    for device in (stored.get("spec") or {}).get("devices") or []:
        if not isinstance(device, Mapping):
            continue
        for taint in device.get("taints") or []:
            if isinstance(taint, Mapping) and taint.get("timeAdded"):
                key = (str(taint.get("key", "")), str(taint.get("value") or ""))
                times[(str(device.get("name")), (*key, str(taint.get("effect", ""))))] = taint[
                    "timeAdded"
                ]
    for device in (wanted.get("spec") or {}).get("devices") or []:
        for taint in device.get("taints") or []:
            found = times.get(
                (
                    str(device.get("name")),
                    (taint["key"], taint.get("value") or "", taint["effect"]),
                )
            )
            if found is not None:
                taint["timeAdded"] = found


def has_taints(published: Mapping[str, Any]) -> bool:
    devices = (published.get("spec") or {}).get("devices") or []
    return any(isinstance(d, Mapping) and d.get("taints") for d in devices)
