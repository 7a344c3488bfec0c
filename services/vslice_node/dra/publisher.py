"""Keeping the node's ResourceSlice equal to its GPUs.

The slice is rewritten only when what it says changes (a GPU added, gone, unhealthy,
cordoned): then its pool generation goes up by one, so the scheduler drops what it knew of
older generations. Without a change nothing is written, not even at a restart; the stored
slice is still read every ``every_s`` (someone may have deleted or edited it). The write
carries the stored resourceVersion: two writers (a plugin restarted while the old one still
runs) make one of them fail and retry on fresh data instead of overwriting each other.

A failed or cordoned GPU's device carries a taint (``vslice_core.dra.taints``); a rewrite
keeps each taint's ``timeAdded``. An API server without device taints (the DRADeviceTaints
feature gate off) drops them from what it stores: the publisher reads a slice it wrote with
taints back once, and when they are gone says so in its log and its state and stops comparing
taints, so it does not rewrite the slice every resync. A taint someone removes later is
written again.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Protocol

from vslice_core.dra import taints
from vslice_core.dra.devices import resource_slice, same_devices, slice_name
from vslice_core.errors import ClusterError
from vslice_core.model import NodeInventory

log = logging.getLogger("vslice.draplugin")


class SliceApi(Protocol):
    def resource_slice(self, name: str) -> Mapping[str, Any] | None: ...

    def put_resource_slice(self, body: Mapping[str, Any], resource_version: str | None) -> None: ...

    def node_uid(self, name: str) -> str | None: ...


class SlicePublisher:
    def __init__(self, api: SliceApi, node: str, *, every_s: float = 30.0) -> None:
        self.api = api
        self.node = node
        self.every_s = every_s
        self.state = "not yet published"
        self._published: NodeInventory | None = None
        self._due = 0.0
        self._node_uid: str | None = None
        self.taints_dropped = False  # the API server stores no device taints

    def maybe_publish(self, inventory: NodeInventory, now: float) -> None:
        """Publish when the GPUs changed since the last good write, or the resync is due."""
        if inventory == self._published and now < self._due:
            return
        self._due = now + self.every_s
        try:
            self.publish(inventory)
        except ClusterError as error:
            self._published = None  # try again on the next pass
            state = f"failing: {error}"
            if state != self.state:
                log.error(
                    "cannot publish the ResourceSlice; will retry", extra={"error": str(error)}
                )
            self.state = state
            return
        self._published = inventory
        self.state = (
            "published (this API server drops device taints: a failed GPU takes no new claim "
            "but its pods are not evicted)"
            if self.taints_dropped
            else "published"
        )

    def _check_taints_kept(self) -> None:
        """Read the slice just written back: an API server without device taints has dropped
        them (a taint someone removes later is not this, and is written again)."""
        written = self.api.resource_slice(slice_name(self.node))
        if written is None or taints.has_taints(written):
            return
        self.taints_dropped = True
        log.warning(
            "the API server dropped the devices' taints (is the DRADeviceTaints feature gate "
            "off?): failed GPUs take no new claim, but the pods on them are not evicted",
            extra={"slice": slice_name(self.node)},
        )

    def publish(self, inventory: NodeInventory) -> bool:
        """Bring the stored slice to ``inventory``; whether it wrote."""
        if self._node_uid is None:
            self._node_uid = self.api.node_uid(self.node)
        stored = self.api.resource_slice(slice_name(self.node))
        generation = 1
        version = None
        if stored is not None:
            generation = (
                int(((stored.get("spec") or {}).get("pool") or {}).get("generation") or 0) + 1
            )
            version = str((stored.get("metadata") or {}).get("resourceVersion") or "") or None
        wanted = resource_slice(inventory, generation, self._node_uid)
        if stored is not None:
            taints.carry_times(stored, wanted)
            if same_devices(stored, wanted, with_taints=not self.taints_dropped):
                return False
        self.api.put_resource_slice(wanted, version)
        if taints.has_taints(wanted) and not self.taints_dropped:
            self._check_taints_kept()
        log.info(
            "ResourceSlice published",
            extra={
                "slice": slice_name(self.node),
                "generation": generation,
                "devices": len(inventory.gpus),
            },
        )
        return True
