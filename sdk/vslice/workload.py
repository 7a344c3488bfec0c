"""``Workload``: the handle ``client.run`` and ``client.submit`` return.

It names one Pod or Job and reads its state from the cluster on every call (it caches
nothing that could go stale): ``wait()`` polls until the pod is scheduled, running or done,
``allocation`` reads the extender's decision back from the pod (on the DRA path: the pod's
allocated ResourceClaims), ``logs()`` and ``delete()`` do what they say. For a Job, the pod
is the newest one the Job created.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, Literal

from vslice_core.annotations import ALLOCATION, decode_allocation
from vslice_core.clusterobjects import allocation_value, node_inventory
from vslice_core.dra import DRIVER
from vslice_core.errors import DecodeError
from vslice_core.requests import uses_gpus

from vslice.errors import ClusterError, InvalidRequest, Timeout
from vslice.snapshot import ClusterSnapshot
from vslice.tables import AllocationRow, AllocationTable, Placement

if TYPE_CHECKING:
    from vslice_kube.workloads import Workloads

Until = Literal["scheduled", "running", "completed"]
UNTIL: Final = ("scheduled", "running", "completed")
POLL_FIRST_S: Final = 0.2
POLL_MAX_S: Final = 1.0


def check_timeout(timeout: float) -> float:
    """A wait's limit in seconds (inf waits forever); a negative or NaN limit is a mistake."""
    if math.isnan(timeout) or timeout < 0:
        raise InvalidRequest(
            f"timeout must be a number of seconds >= 0, got {timeout!r}",
            field="timeout",
            value=timeout,
        )
    return timeout


class Workload:
    """A Pod or Job created through vslice (or found by name)."""

    def __init__(self, calls: Workloads, kind: str, namespace: str, name: str) -> None:
        self._calls = calls
        self.kind = kind
        self.namespace = namespace
        self.name = name

    def __repr__(self) -> str:
        return f"<Workload {self.kind} {self.namespace}/{self.name}>"

    # --- state -------------------------------------------------------------------------

    def pod(self) -> dict[str, Any] | None:
        """The pod as the API has it now (None while a Job has not created one)."""
        if self.kind == "Pod":
            return self._calls.get_pod(self.namespace, self.name)
        pods = self._calls.job_pods(self.namespace, self.name)
        return pods[-1] if pods else None

    @property
    def phase(self) -> str:
        """Pending, Running, Succeeded, Failed (or Unknown; empty before a Job's pod exists)."""
        pod = self.pod()
        return str((pod or {}).get("status", {}).get("phase") or "")

    @property
    def allocation(self) -> Placement | None:
        """Node, GPUs (UUIDs and models), memory and cores; None until the pod is placed."""
        pod = self.pod()
        value = None if pod is None else allocation_value(pod)
        if pod is not None and value is None and _on_dra_path(pod):
            return self._dra_allocation(pod)
        if pod is None or value is None:
            return None
        allocation = decode_allocation(value)
        models = self._models(allocation.node)
        phase = str(pod.get("status", {}).get("phase") or "")
        rows = [
            AllocationRow(
                namespace=self.namespace,
                pod=pod["metadata"]["name"],
                node=allocation.node,
                container=container.name,
                gpu_index=grant.index,
                gpu_uuid=grant.uuid,
                gpu_model=models.get(grant.uuid, "unknown"),
                memory_mib=grant.memory_mib,
                cores=grant.cores,
                phase=phase,
            )
            for container in allocation.containers
            for grant in container.gpus
        ]
        return Placement(
            self.namespace, pod["metadata"]["name"], allocation.node, AllocationTable(rows)
        )

    def _dra_allocation(self, pod: dict[str, Any]) -> Placement | None:
        """The pod's allocated claims, read as the views read them (one snapshot of its node,
        its namespace's claims and the driver's slices)."""
        node = str(pod.get("spec", {}).get("nodeName") or "")
        if not node:
            return None
        try:
            nodes = [self._calls.get_node(node)]
        except ClusterError:
            nodes = []  # the slice still describes the node's GPUs
        snapshot = ClusterSnapshot.read(
            nodes,
            [pod],
            self._calls.list_resource_slices(DRIVER),
            self._calls.list_resource_claims(self.namespace),
        )
        name = pod["metadata"]["name"]
        rows = [row for row in snapshot.allocations(self.namespace) if row.pod == name]
        if not rows:
            return None
        return Placement(self.namespace, name, rows[0].node, AllocationTable(rows))

    def _models(self, node: str) -> dict[str, str]:
        """GPU UUID -> model from the node's inventory (empty when it cannot be read)."""
        try:
            found = self._calls.get_node(node)
            inventory = node_inventory(found)
        except (ClusterError, DecodeError):
            inventory = None  # gone or unreadable: the grants still say where and how much
        return {gpu.uuid: gpu.model for gpu in inventory.gpus} if inventory else {}

    # --- waiting -----------------------------------------------------------------------

    def wait(self, timeout: float = 120.0, *, until: Until = "running") -> Workload:
        """Block until the pod is ``scheduled`` (placed, allocation written), ``running``
        (or already finished) or ``completed`` (Succeeded). Raises :class:`vslice.Timeout`
        with the scheduler's last word when the deadline passes, and
        :class:`vslice.ClusterError` when the pod fails first."""
        if until not in UNTIL:
            raise InvalidRequest(
                f"until must be one of {', '.join(UNTIL)}, got {until!r}", field="until"
            )
        reached = _CONDITIONS[until]
        deadline = time.monotonic() + check_timeout(timeout)
        pause = POLL_FIRST_S
        while True:
            pod = self.pod()
            if pod is not None:
                _raise_if_failed(pod, until)
                if reached(pod):
                    return self
            if time.monotonic() >= deadline:
                raise Timeout(
                    f"{self.kind} {self.namespace}/{self.name} is not {until} after "
                    f"{timeout:g}s: {self._why_waiting(pod)}"
                )
            time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
            pause = min(POLL_MAX_S, pause * 1.5)

    def _why_waiting(self, pod: dict[str, Any] | None) -> str:
        if pod is None:
            return "the Job has not created a pod yet"
        status = pod.get("status") or {}
        words = [f"phase {status.get('phase') or 'unknown'}"]
        for condition in status.get("conditions") or []:
            if condition.get("type") == "PodScheduled" and condition.get("status") != "True":
                words.append(
                    f"not scheduled: {condition.get('message') or condition.get('reason')}"
                )
        return "; ".join(words)

    # --- output and cleanup --------------------------------------------------------------

    def logs(self, container: str | None = None, *, tail: int | None = None) -> str:
        """The container's output so far (the pod's only or first container by default)."""
        pod = self.pod()
        if pod is None:
            raise ClusterError(f"Job {self.namespace}/{self.name} has no pod yet")
        return self._calls.logs(
            self.namespace, pod["metadata"]["name"], container=container, tail_lines=tail
        )

    def delete(self) -> bool:
        """Delete the Pod (or the Job and its pods); False when it was already gone."""
        if self.kind == "Job":
            return self._calls.delete_job(self.namespace, self.name)
        return self._calls.delete_pod(self.namespace, self.name)


def _on_dra_path(pod: dict[str, Any]) -> bool:
    """Claims and no ``nvidia.com/*`` limits: kube-scheduler's DRA allocator places it."""
    return bool(pod.get("spec", {}).get("resourceClaims")) and not uses_gpus(pod)


def _scheduled(pod: dict[str, Any]) -> bool:
    annotations = pod.get("metadata", {}).get("annotations") or {}
    if not pod.get("spec", {}).get("nodeName"):
        return False
    # kube-scheduler binds a DRA pod only after its claims are allocated: bound is placed.
    return ALLOCATION in annotations or _on_dra_path(pod)


def _running(pod: dict[str, Any]) -> bool:
    return str(pod.get("status", {}).get("phase")) in ("Running", "Succeeded")


def _completed(pod: dict[str, Any]) -> bool:
    return str(pod.get("status", {}).get("phase")) == "Succeeded"


_CONDITIONS: Final[dict[str, Callable[[dict[str, Any]], bool]]] = {
    "scheduled": _scheduled,
    "running": _running,
    "completed": _completed,
}


def _raise_if_failed(pod: dict[str, Any], until: str) -> None:
    status = pod.get("status") or {}
    if status.get("phase") != "Failed":
        return
    name = f"{pod['metadata'].get('namespace')}/{pod['metadata'].get('name')}"
    detail = status.get("message") or status.get("reason") or "see its logs and events"
    if until == "scheduled" and _scheduled(pod):
        return
    raise ClusterError(f"pod {name} failed before it was {until}: {detail}")
