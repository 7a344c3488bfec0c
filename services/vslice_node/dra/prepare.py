"""What a prepared claim gets on this node: the same shim, limits and region as a container
of the device-plugin path, delivered through CDI.

The kubelet names claims (namespace, name, UID); the allocation is read from the claim
itself (``status.allocation``, written by kube-scheduler) and turned into grants by
:func:`vslice_core.dra.allocations.grants`. Per claim request the plugin then

- writes the limits file ``<limits_root>/<claim uid>/<request>/limits`` (mounted read-only at
  ``/run/vslice-limits``) and creates the region directory ``<cache_root>/<claim uid>/<request>``
  (mounted read-write), with the device plugin's own functions (:mod:`..deviceplugin.delivery`);
- writes one CDI spec file per claim (kind ``vslice.io/claim``, one device per request holding
  those mounts and the shim's environment), atomically;
- answers one device per granted GPU, naming two CDI devices: the node-wide
  ``vslice.io/gpu=<uuid>`` (device node, shim library, preload, driver files; written by the
  device plugin's spec file) and the claim's own.

Containers that share a claim share its slice: one limits file and one region per request,
which is what sharing a claim means (the memory limit holds for all of them together).

Idempotent: a claim already in the checkpoint is answered from it without reading the API;
unprepare of an unknown claim succeeds. Files are written before the checkpoint, and removed
after it, so a crash in between leaves only files the next prepare rewrites or the sweep
removes.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from vslice_core.dra import DRIVER
from vslice_core.dra.allocations import grants as claim_grants
from vslice_core.dra.allocations import shares
from vslice_core.dra.devices import device_name
from vslice_core.errors import ClusterError, InvalidRequest
from vslice_core.model import GpuGrant, NodeInventory

from vslice_node.dra.claims import ClaimError, ClaimRef, Prepared, PreparedDevice
from vslice_node.handover import cdispec
from vslice_node.handover.cachedirs import remove_dir
from vslice_node.handover.checkpoint import Checkpoint, PreparedClaim
from vslice_node.handover.container import (
    Handover,
    container_edits,
)
from vslice_node.handover.files import replace_text, write_container_files
from vslice_node.handover.specfile import SPEC_MODE

log = logging.getLogger("vslice.draplugin")

CLAIM_KIND = "vslice.io/claim"
CLAIM_ANNOTATION = "vslice.io/dra-claim"
"""Marks per-claim spec files (never the device plugin's owner annotation: the device plugin
removes files carrying that one as stale)."""


class ClaimReader(Protocol):
    def resource_claim(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """The claim, or None when it does not exist; ClusterError when the API fails."""
        ...


def claim_spec_path(cdi_dir: Path, uid: str) -> Path:
    return cdi_dir / f"vslice.io-claim_{uid}.json"


def claim_device(uid: str, request: str) -> str:
    return cdispec.device_name(f"{uid}-{request}")


class ClaimPreparer:
    """Prepares and unprepares this node's claims (see the module docstring)."""

    def __init__(
        self,
        node: str,
        inventory: Callable[[], NodeInventory],
        reader: ClaimReader,
        handover: Handover,
        cdi_dir: Path,
        checkpoint: Checkpoint,
    ) -> None:
        self.node = node
        self.inventory = inventory
        self.reader = reader
        self.handover = handover
        self.cdi_dir = cdi_dir
        self.checkpoint = checkpoint

    def prepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, Prepared | ClaimError]:
        return {ref.uid: self._prepare_one(ref) for ref in claims}

    def unprepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, ClaimError | None]:
        return {ref.uid: self._unprepare_one(ref) for ref in claims}

    def _prepare_one(self, ref: ClaimRef) -> Prepared | ClaimError:
        done = self.checkpoint.get(ref.uid)
        if done is not None:
            return self._answer(ref.uid, done.grants, done.share_ids)
        try:
            claim = self.reader.resource_claim(ref.namespace, ref.name)
        except ClusterError as error:
            return ClaimError(f"ResourceClaim {ref}: cannot read it: {error}")
        if claim is None:
            return ClaimError(
                f"ResourceClaim {ref} does not exist (deleted before it was prepared)"
            )
        uid = (claim.get("metadata") or {}).get("uid")
        if uid != ref.uid:
            return ClaimError(
                f"ResourceClaim {ref.namespace}/{ref.name} has UID {uid!r}, the kubelet asks "
                f"for {ref.uid!r} (the claim was replaced)"
            )
        try:
            granted = claim_grants(claim, self.inventory(), DRIVER)
            share_ids: dict[str, list[str | None]] = {}
            for share in shares(claim, DRIVER):
                share_ids.setdefault(share.container_request, []).append(share.share_id)
        except InvalidRequest as error:
            log.error("claim allocation unusable", extra={"claim": str(ref), "error": str(error)})
            return ClaimError(str(error))
        if not granted:
            return ClaimError(
                f"ResourceClaim {ref}: no device of {DRIVER} on node {self.node} is allocated "
                "to it (status.allocation has none)"
            )
        try:
            spec_path = self._write_files(ref.uid, granted)
        except OSError as error:
            return ClaimError(
                f"ResourceClaim {ref}: cannot write {error.filename}: {error.strerror}"
            )
        self.checkpoint.put(
            ref.uid, PreparedClaim(ref.namespace, ref.name, granted, str(spec_path), share_ids)
        )
        log.info(
            "claim prepared",
            extra={"claim": str(ref), "gpus": sum(len(g) for g in granted.values())},
        )
        return self._answer(ref.uid, granted, share_ids)

    def _write_files(self, uid: str, granted: Mapping[str, list[GpuGrant]]) -> Path:
        devices = []
        for request, grants in granted.items():
            write_container_files(self.handover, grants, uid, request)
            edits = container_edits(self.handover, grants, uid, request)
            devices.append(
                {
                    "name": claim_device(uid, request),
                    "containerEdits": cdispec.container_edits(edits, {}),
                }
            )
        document = {
            "cdiVersion": cdispec.CDI_VERSION,
            "kind": CLAIM_KIND,
            "annotations": {CLAIM_ANNOTATION: uid},
            "devices": devices,
        }
        path = claim_spec_path(self.cdi_dir, uid)
        replace_text(path, json.dumps(document, indent=2) + "\n", SPEC_MODE)
        return path

    def _answer(
        self,
        uid: str,
        granted: Mapping[str, list[GpuGrant]],
        share_ids: Mapping[str, list[str | None]],
    ) -> Prepared:
        inventory = {gpu.uuid: gpu for gpu in self.inventory().gpus}
        devices = []
        for request, grants in granted.items():
            own = f"{CLAIM_KIND}={claim_device(uid, request)}"
            ids = share_ids.get(request) or []
            for i, grant in enumerate(grants):
                gpu = inventory.get(grant.uuid)
                name = device_name(gpu) if gpu is not None else f"gpu-{grant.index}"
                devices.append(
                    PreparedDevice(
                        request_names=(request,),
                        pool_name=self.node,
                        device_name=name,
                        cdi_device_ids=(
                            cdispec.qualified_name(self.handover.cdi_kind, grant.uuid),
                            own,
                        ),
                        share_id=ids[i] if i < len(ids) else None,
                    )
                )
        return Prepared(devices=tuple(devices))

    def _unprepare_one(self, ref: ClaimRef) -> ClaimError | None:
        done = self.checkpoint.get(ref.uid)
        layout = self.handover.layout
        try:
            claim_spec_path(self.cdi_dir, ref.uid).unlink(missing_ok=True)
            for root in (layout.limits_root, layout.cache_root):
                if root.is_dir():
                    # The claim's region directory is the tenant's to write: no rmtree, which
                    # a deep enough nest there turns into a RecursionError.
                    remove_dir(root, ref.uid)
        except OSError as error:
            where = error.filename or f"the files of claim {ref.uid}"
            return ClaimError(f"ResourceClaim {ref}: cannot remove {where}: {error.strerror}")
        self.checkpoint.drop(ref.uid)
        if done is not None:
            log.info("claim unprepared", extra={"claim": str(ref)})
        return None
