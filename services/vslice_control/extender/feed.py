"""Feeding the ledger from the cluster: node inventories and pod allocations.

The ledger must equal what the annotations say, so a restarted extender rebuilds it from the
first list of nodes and pods and loses nothing:

- :class:`NodeFeed`: a node's GPUs come from ``vslice.io/node-gpus`` (HAMi's
  ``hami.io/node-nvidia-register`` is read when that is absent). A node without a readable
  inventory is taken out of the ledger; the allocations on it stay and return with it. A GPU
  UUID that another node already claims is refused on the node that claimed it later: it is
  kept in the ledger as cordoned (nothing is placed on it), reported, and returns when the
  first claim goes away.
- :class:`PodFeed`: a bound pod's ``vslice.io/allocation`` is recorded until the pod
  finishes (Succeeded/Failed) or is deleted. Without a valid ``vslice.io/allocation-proof``
  (when the extender has keys) it is recorded as *unproven*: counted on the pod's node beside
  what the pod held before, never freeing room, and reported. Removing the annotation from a
  bound pod frees nothing either. A value that cannot be read blocks the pod's node for new
  slices (which GPUs it holds is unknown), is reported and never erases what the ledger
  already holds for that pod; after a restart the first list blocks the node again. An
  allocation on a pod that is not bound does not count: vslice writes it together with the
  Binding, so it can only come from someone else and books nothing.
- :class:`~vslice_control.extender.holds.Holds` (in ``holds``) keeps what this replica reserved
  and no annotation shows yet; :class:`PodFeed` releases a hold when the annotation arrives.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from vslice_core.annotations import (
    HAMI_NODE_REGISTER,
    NODE_GPUS,
    decode_allocation,
)
from vslice_core.clusterobjects import (
    HeldBy,
    allocation_value,
    annotations_of,
    held_by,
    metadata_of,
    node_inventory,
    node_name,
    object_name,
    pod_finished,
)
from vslice_core.dra.preemptviews import waits_for_claims
from vslice_core.errors import DecodeError
from vslice_core.ledger import Ledger
from vslice_core.model import Gpu, NodeInventory
from vslice_core.proof import PROOF

from vslice_control.extender.holds import Holds
from vslice_control.extender.trust import Proofs, Reports

log = logging.getLogger("vslice.extender.feed")


class NodeFeed:
    """Watch handler for Nodes."""

    def __init__(self, ledger: Ledger, reports: Reports | None = None) -> None:
        self._ledger = ledger
        self._reports = reports or Reports()
        self._applied: dict[str, tuple[Any, Any]] = {}  # name -> annotation values applied
        self._inventories: dict[str, NodeInventory] = {}  # readable inventories, as written
        self._claims: dict[str, list[str]] = {}  # GPU uuid -> nodes claiming it, owner first
        self._refused: dict[str, dict[str, str]] = {}  # node -> {refused uuid: owner}
        # Guards the tables above; taken before the ledger's lock, never after it.
        self._lock = threading.Lock()

    def refused(self) -> dict[str, dict[str, str]]:
        """``{node: {gpu uuid: node that owns it}}``: GPUs refused as claimed twice."""
        with self._lock:
            return {node: dict(gpus) for node, gpus in sorted(self._refused.items()) if gpus}

    def replace(self, items: list[dict[str, Any]]) -> None:
        with self._ledger.bulk():  # a full list: rank the nodes once, at the end
            present = set()
            for node in items:
                present.add(str(metadata_of(node).get("name", "")))
                self._apply(node)
            for name in set(self._ledger.node_names()) - present:
                self._forget(name)

    def apply(self, event: str, obj: dict[str, Any]) -> None:
        if event == "DELETED":
            self._forget(str(metadata_of(obj).get("name", "")))
        else:
            self._apply(obj)

    def _apply(self, node: Mapping[str, Any]) -> None:
        name = object_name(node)
        found = annotations_of(node)
        values = (found.get(NODE_GPUS), found.get(HAMI_NODE_REGISTER))
        with self._lock:
            if self._applied.get(name) == values:
                return  # heartbeats and lock changes: the inventory did not change
            self._applied[name] = values
        try:
            inventory = node_inventory(node)
        except DecodeError as exc:
            log.warning(
                "node inventory unreadable; node left out", extra={"node": name, "error": str(exc)}
            )
            inventory = None
        with self._lock:
            self._claim(name, inventory)

    def _forget(self, name: str) -> None:
        with self._lock:
            self._applied.pop(name, None)
            self._claim(name, None)

    def _claim(self, name: str, inventory: NodeInventory | None) -> None:
        """Record the node's GPU claims and publish it and every node whose claims changed."""
        before = self._inventories.pop(name, None)
        old = {gpu.uuid for gpu in before.gpus} if before else set()
        new = {gpu.uuid for gpu in inventory.gpus} if inventory else set()
        affected = {name}
        for uuid in old - new:
            claimants = self._claims[uuid]
            claimants.remove(name)
            if claimants:
                affected.add(claimants[0])  # the next claimant owns it now
            else:
                del self._claims[uuid]
        for uuid in sorted(new - old):
            self._claims.setdefault(uuid, []).append(name)
        if inventory is not None:
            self._inventories[name] = inventory
        for node in sorted(affected):
            self._publish(node)

    def _publish(self, name: str) -> None:
        inventory = self._inventories.get(name)
        if inventory is None:
            for uuid in self._refused.pop(name, {}):
                self._reports.forget(f"{name}/{uuid}")
            self._ledger.remove_node(name)
            return
        refused = {
            gpu.uuid: self._claims[gpu.uuid][0]
            for gpu in inventory.gpus
            if self._claims[gpu.uuid][0] != name
        }
        for uuid in set(self._refused.get(name, {})) - set(refused):
            self._reports.forget(f"{name}/{uuid}")  # resolved: a new claim is reported anew
        self._refused[name] = refused
        for uuid, owner in sorted(refused.items()):
            self._reports.duplicate_gpu(uuid, name, owner)
        self._ledger.set_node(_without(inventory, set(refused)) if refused else inventory)


def _without(inventory: NodeInventory, refused: set[str]) -> NodeInventory:
    """The inventory with the refused GPUs cordoned: counted, never given a new slice."""
    gpus: list[Gpu] = [
        gpu.model_copy(update={"cordoned": True}) if gpu.uuid in refused else gpu
        for gpu in inventory.gpus
    ]
    return inventory.model_copy(update={"gpus": gpus})


class PodFeed:
    """Watch handler for Pods (see the module docstring)."""

    def __init__(
        self,
        ledger: Ledger,
        holds: Holds,
        proofs: Proofs | None = None,
        reports: Reports | None = None,
    ) -> None:
        self._ledger = ledger
        self._holds = holds
        self._proofs = proofs or Proofs()
        self._reports = reports or Reports()
        self._known: set[str] = set()  # uids of the pods the watch shows (any phase)
        # What is known of the pods whose allocation is recorded (only those: every pod of a
        # large cluster would cost memory for nothing): names for the metrics that name pods,
        # priorities and start times for preemption.
        self._pods: dict[str, HeldBy] = {}
        # Pending pods kube-scheduler could not place that use ResourceClaims: the DRA-path
        # preemption reads them from here instead of listing pending pods itself.
        self._claim_waiters: dict[str, dict[str, Any]] = {}
        self._names_lock = threading.Lock()  # the watch writes, scrapes and filters read

    def exists(self, uid: str) -> bool:
        """Whether the pod watch shows a pod with this uid."""
        return uid in self._known

    def names(self) -> dict[str, str]:
        """``{uid: pod name}`` of the pods whose allocation the watch has recorded."""
        with self._names_lock:
            return {uid: held.name for uid, held in self._pods.items()}

    def lowest_priority(self) -> int | None:
        """The lowest priority among the pods holding slices (None: no pod holds one)."""
        with self._names_lock:
            return min((held.priority for held in self._pods.values()), default=None)

    def claim_waiters(self) -> list[dict[str, Any]]:
        """The unbound pods marked Unschedulable that use ResourceClaims, as last watched."""
        with self._names_lock:
            return list(self._claim_waiters.values())

    def held_by(self, uid: str) -> HeldBy | None:
        """The pod of a recorded allocation: name, priority, start."""
        with self._names_lock:
            return self._pods.get(uid)

    def replace(self, items: list[dict[str, Any]]) -> None:
        present = {str(metadata_of(pod).get("uid", "")) for pod in items}
        self._known = present
        with self._ledger.bulk():  # every bound pod: rank the nodes once, at the end
            for pod in items:
                self._apply(pod)
            for uid in set(self._ledger.pod_uids()) - present:
                if uid not in self._holds:
                    self._ledger.release(uid)
            for blocks in self._ledger.blocked_nodes().values():
                for uid in set(blocks) - present:
                    self._gone(uid)
        with self._names_lock:
            self._pods = {uid: held for uid, held in self._pods.items() if uid in present}
            self._claim_waiters = {
                uid: pod for uid, pod in self._claim_waiters.items() if uid in present
            }
        self._reports.overbooked(self._ledger.overbooked())

    def catch_up(self, items: Iterable[dict[str, Any]]) -> None:
        """Feed a re-read of pods (a new leader term's list of every bound pod) exactly as
        their watch events would be fed, ranking the nodes once at the end."""
        with self._ledger.bulk():
            for pod in items:
                self.apply("MODIFIED", pod)

    def apply(self, event: str, obj: dict[str, Any]) -> None:
        if event == "DELETED":
            uid = str(metadata_of(obj).get("uid", ""))
            self._known.discard(uid)
            self._holds.drop(uid)
            self._gone(uid)
        else:
            self._known.add(str(metadata_of(obj).get("uid", "")))
            self._apply(obj)
        self._reports.overbooked(self._ledger.overbooked())

    def _gone(self, uid: str) -> None:
        """The pod finished or was deleted: everything it held or blocked is free again."""
        self._ledger.release(uid)
        self._ledger.unblock(uid)
        self._reports.forget(uid)
        with self._names_lock:
            self._pods.pop(uid, None)
            self._claim_waiters.pop(uid, None)

    def _apply(self, pod: Mapping[str, Any]) -> None:
        meta = metadata_of(pod)
        uid = str(meta.get("uid", ""))
        value = allocation_value(pod)
        node = node_name(pod)
        with self._names_lock:
            if waits_for_claims(pod):
                self._claim_waiters[uid] = dict(pod)
            else:
                self._claim_waiters.pop(uid, None)
        if pod_finished(pod):
            self._holds.drop(uid)
            self._gone(uid)
        elif value is not None and node:
            self._record(uid, node, value, meta, held_by(pod))
        elif node:
            pass  # a bound pod's allocation removed: what it held stays booked until it ends
        elif uid not in self._holds:
            self._ledger.release(uid)

    def _record(
        self, uid: str, node: str, value: str, meta: Mapping[str, Any], held: HeldBy
    ) -> None:
        namespace = str(meta.get("namespace", "default"))
        name = str(meta.get("name", ""))
        try:
            allocation = decode_allocation(value)
        except DecodeError as exc:
            # Which GPUs it holds is unknown: keep what was recorded, block the whole node.
            self._ledger.block_node(node, uid, f"pod {namespace}/{name}: {exc}")
            self._reports.unreadable(namespace, name, uid, node, str(exc))
            return
        self._ledger.unblock(uid)
        with self._names_lock:
            self._pods[uid] = held
        proof = annotations_of({"metadata": meta}).get(PROOF)
        why = self._proofs.problem(str(proof) if proof else None, uid, node, value)
        if why is None:
            self._ledger.add(uid, allocation, namespace)
            self._holds.drop(uid)
            return
        if uid in self._holds:  # bound by someone else: this replica's hold is moot
            self._holds.drop(uid)
            self._ledger.release(uid)
        # Counted where the pod runs, whatever node the value names.
        here = (
            allocation if allocation.node == node else allocation.model_copy(update={"node": node})
        )
        self._ledger.add(uid, here, namespace, proven=False)
        self._reports.unproven(namespace, name, uid, node, why)
