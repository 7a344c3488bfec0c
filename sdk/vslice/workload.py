"""``Workload``: the handle ``client.run`` and ``client.submit`` return.

It names one Pod or Job and reads its state from the cluster on every call (it caches
nothing that could go stale): ``wait()`` polls until the pod is scheduled, running or done,
and says why it does not progress as soon as Kubernetes knows (:mod:`vslice.progress`),
``allocation`` reads the extender's decision back from the pod (on the DRA path: the pod's
allocated ResourceClaims), ``logs()`` and ``delete()`` do what they say. For a Job, the pod
is the newest one the Job created.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final, Literal

from vslice_core.annotations import ALLOCATION, decode_allocation
from vslice_core.clusterobjects import allocation_value, node_inventory, node_name
from vslice_core.dra import DRIVER
from vslice_core.errors import DecodeError
from vslice_core.idle import RECLAIMED
from vslice_core.preemption import PREEMPTED, preemptor_of
from vslice_core.queueing import QueueState, state_of_job
from vslice_core.requests import uses_gpus

from vslice import progress
from vslice.errors import ClusterError, InvalidRequest, Stalled, Timeout
from vslice.snapshot import ClusterSnapshot, idle_mark, shown_phase
from vslice.tables import AllocationRow, AllocationTable, IdleMark, Placement
from vslice.views import idle_words

if TYPE_CHECKING:
    from vslice_kube.workloads import Workloads

Until = Literal["scheduled", "running", "completed"]
UNTIL: Final = ("scheduled", "running", "completed")
POLL_FIRST_S: Final = 0.2
POLL_MAX_S: Final = 1.0
EVICTED: Final = "Evicted"
QUEUED: Final = "Queued"
"""The phase of a Job that waits in a Kueue queue (suspended, no pod yet)."""


def check_timeout(timeout: float) -> float:
    """A wait's limit in seconds (inf waits forever); a negative or NaN limit is a mistake."""
    if math.isnan(timeout) or timeout < 0:
        raise InvalidRequest(
            f"timeout must be a number of seconds >= 0, got {timeout!r}",
            field="timeout",
            value=timeout,
        )
    return timeout


@dataclass(frozen=True)
class WorkloadStatus:
    """Where a workload stands, and whether vslice took its GPU room away: preempted by a pod
    of higher priority (docs/preemption.md) or given back idle (docs/idle.md)."""

    phase: str
    """Pending, Running, Succeeded, Failed, Terminating; ``Evicted`` once vslice evicted the
    pod and it is gone (a Job then makes a new one); empty before a Job's pod exists."""
    node: str = ""
    preempted_by: str | None = None
    """``namespace/name`` of the pod whose room vslice made by evicting this one."""
    evicted: str | None = None
    """vslice's own words for the latest eviction (preemption or idle reclaim), with numbers."""
    evicted_at: datetime | None = None
    idle: IdleMark | None = None
    """Set while the pod's slices are idle; ``idle.reclaim_at`` once it is warned."""
    queue: QueueState | None = None
    """A Job in a Kueue LocalQueue: its queue, position while it waits, and Kueue's reason
    for not admitting it (docs/kueue.md); None for anything Kueue does not manage."""

    def __str__(self) -> str:
        words = [self.phase or "no pod yet"] + ([f"on {self.node}"] if self.node else [])
        if self.queue is not None and (self.queue.queued or not self.phase):
            words.append("- " + self.queue.words())
        if self.idle is not None:
            words.append("- " + idle_words(self.idle, datetime.now(UTC)))
        if self.evicted is not None:
            when = f" at {self.evicted_at:%Y-%m-%d %H:%M:%S} UTC" if self.evicted_at else ""
            words.append(f"- evicted{when}: {self.evicted}")
        return " ".join(words)


def _event_time(event: Mapping[str, Any]) -> datetime | None:
    for key in ("lastTimestamp", "eventTime", "firstTimestamp"):
        value = event.get(key)
        if isinstance(value, str) and value:
            try:
                return datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                continue
    return None


class Workload:
    """A Pod or Job created through vslice (or found by name)."""

    def __init__(
        self,
        calls: Workloads,
        kind: str,
        namespace: str,
        name: str,
        *,
        snapshot: Callable[[], ClusterSnapshot] | None = None,
    ) -> None:
        self._calls = calls
        self.kind = kind
        self.namespace = namespace
        self.name = name
        # How a wait reads the whole cluster to add vslice's why-not to the scheduler's word
        # (the Client's reading, DRA path included); None: the scheduler's word alone.
        self._snapshot = snapshot

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
    def status(self) -> WorkloadStatus:
        """Phase and node, the idle mark, and whether vslice evicted the pod (or, for a Job,
        one of its pods) and why: read from the pod and its events, which outlive it."""
        try:
            pod = self.pod()
        except ClusterError as exc:
            if exc.code != 404:
                raise
            pod = None  # evicted and gone, or deleted
        eviction = self._latest_eviction(pod)
        idle = None
        if pod is not None:
            with contextlib.suppress(DecodeError):  # a malformed mark is no mark
                idle = idle_mark(pod.get("metadata") or {})
        message = str(eviction.get("message") or "") if eviction else None
        queue = self._queue_or_none()  # Kueue's trouble never hides the pod's state
        phase = shown_phase(pod) if pod is not None else (EVICTED if eviction else "")
        if pod is None and queue is not None and queue.queued:
            phase = QUEUED
        return WorkloadStatus(
            # A pod vslice evicted is gone (a Job's replacement, if any, is the pod here).
            phase=phase,
            node=node_name(pod) if pod is not None else "",
            preempted_by=preemptor_of(message) if message else None,
            evicted=message,
            evicted_at=_event_time(eviction) if eviction else None,
            idle=idle,
            queue=queue,
        )

    def queue_state(self) -> QueueState | None:
        """Where this Job stands in Kueue (None for a Pod, or a Job Kueue does not manage)."""
        if self.kind != "Job":
            return None
        return state_of_job(self._calls.kueue.workloads(self.namespace), self.namespace, self.name)

    def _latest_eviction(self, pod: Mapping[str, Any] | None) -> dict[str, Any] | None:
        """The newest event by which vslice evicted this pod or one of this Job's pods (for a
        Pod that exists, only events about it: an older pod of the same name is another)."""
        found: list[dict[str, Any]] = []
        for reason in (PREEMPTED, RECLAIMED):
            try:
                found += self._calls.events_with_reason(self.namespace, reason)
            except ClusterError:
                continue  # no right to list events: the status says what the pod says
        uid = str(((pod or {}).get("metadata") or {}).get("uid", "")) if self.kind == "Pod" else ""
        mine = [
            e
            for e in found
            if self._about_me(str((e.get("involvedObject") or {}).get("name", "")))
            and (not uid or str((e.get("involvedObject") or {}).get("uid", "")) in ("", uid))
        ]
        if not mine:
            return None
        return max(mine, key=lambda e: _event_time(e) or datetime.min.replace(tzinfo=UTC))

    def _about_me(self, name: str) -> bool:
        if self.kind == "Pod":
            return name == self.name
        # A Job's pods are named <job>-<5 characters>.
        prefix, _, suffix = name.rpartition("-")
        return prefix == self.name and len(suffix) == 5

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

    def read_node(self, name: str) -> dict[str, Any] | None:
        """The Node as the API has it; None when it cannot be read (gone, or a user without
        the viewer role): the waits then go without what only the node tells."""
        if not name:
            return None
        try:
            return self._calls.get_node(name)
        except ClusterError:
            return None

    # --- waiting -----------------------------------------------------------------------

    def wait(
        self,
        timeout: float = 120.0,
        *,
        until: Until = "running",
        report: Callable[[str], None] | None = None,
    ) -> Workload:
        """Block until the pod is ``scheduled`` (placed, allocation written), ``running``
        (or already finished) or ``completed`` (Succeeded).

        Raises :class:`vslice.errors.Stalled` (a ClusterError) as soon as the pod cannot get
        there without a change (an image that cannot be pulled, a crash loop, a missing
        Secret, a node kwok simulates for ``completed``, a deletion; see
        :mod:`vslice.progress`), :class:`vslice.ClusterError` when the pod fails first or
        is deleted, and :class:`vslice.Timeout` with the scheduler's last word (and vslice's
        why-not) when the deadline passes. ``report`` gets one line each time the reason the
        pod waits changes (``report=print`` shows it in a notebook)."""
        if until not in UNTIL:
            raise InvalidRequest(
                f"until must be one of {', '.join(UNTIL)}, got {until!r}", field="until"
            )
        reached = _CONDITIONS[until]
        deadline = time.monotonic() + check_timeout(timeout)
        pause = POLL_FIRST_S
        said = ""
        why = _WhyWaiting(self)
        nodes: dict[str, dict[str, Any] | None] = {}  # read once: kwok or not does not change
        while True:
            pod = self._pod_while_waiting(until)
            found: progress.Blocker | None = None
            queue = self._queue_or_none() if pod is None else None
            if queue is not None:
                line = queue.words()
                if queue.state == "Inadmissible":
                    raise Stalled(
                        f"Job {self.namespace}/{self.name} will not be {until}: Kueue does not "
                        f"admit it: {queue.reason or 'see its Workload ' + queue.workload}",
                        reason="Inadmissible",
                        pod=f"{self.namespace}/{self.name}",
                    )
                if report is not None and line != said:
                    report(f"{self.kind} {self.namespace}/{self.name}: {line}")
                    said = line
            if pod is not None:
                _raise_if_failed(pod, until)
                if reached(pod):
                    return self
                where = node_name(pod)
                if where not in nodes:
                    nodes[where] = self.read_node(where)
                found = progress.blocker(pod, nodes[where])
                if found is not None and found.final:
                    raise self._stalled(pod, found, until)
                line = why.line(found, pod)
                if report is not None and line and line != said:
                    report(f"{self.kind} {self.namespace}/{self.name}: {line}")
                    said = line
            if time.monotonic() >= deadline:
                raise Timeout(
                    f"{self.kind} {self.namespace}/{self.name} is not {until} after "
                    f"{timeout:g}s: {why.at_timeout(pod, found, queue)}"
                )
            time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
            pause = min(POLL_MAX_S, pause * 1.5)

    def _pod_while_waiting(self, until: str) -> dict[str, Any] | None:
        try:
            return self.pod()
        except ClusterError as exc:
            if exc.code != 404:
                raise
            raise ClusterError(
                f"pod {self.namespace}/{self.name} was deleted before it was {until}",
                code=404,
                status=exc.status,
            ) from exc

    def _queue_or_none(self) -> QueueState | None:
        """The Job's place in Kueue; None where the cluster cannot say (an error reading
        Kueue's objects is no queue, not a failed status or wait)."""
        try:
            return self.queue_state()
        except ClusterError:
            return None

    def _stalled(self, pod: dict[str, Any], found: progress.Blocker, until: str) -> Stalled:
        holder = f"{self.namespace}/{pod['metadata']['name']}"
        detail = found.line()
        if found.kind == "simulated":
            detail += (
                f"; wait until='running' (it is), or run it on {self._real_nodes()}"
                if until == "completed"
                else ""
            )
        return Stalled(
            f"pod {holder} will not be {until}: {detail}", reason=found.reason, pod=holder
        )

    def _real_nodes(self) -> str:
        try:
            return progress.real_gpu_nodes(self._calls.list_nodes())
        except ClusterError:
            return "a node that is not simulated"

    # --- output and cleanup --------------------------------------------------------------

    def logs(self, container: str | None = None, *, tail: int | None = None) -> str:
        """The container's output so far (the pod's only or first container by default).
        When the API has none to give and the pod says why (it runs on a node kwok
        simulates, its image cannot be pulled, it is not scheduled), the ClusterError says
        that in one line, keeping the API's code and Status."""
        pod = self.pod()
        if pod is None:
            raise ClusterError(f"Job {self.namespace}/{self.name} has no pod yet")
        name = pod["metadata"]["name"]
        try:
            return self._calls.logs(self.namespace, name, container=container, tail_lines=tail)
        except ClusterError as exc:
            found = progress.blocker(pod, self.read_node(node_name(pod)))
            if found is None:
                raise
            detail = found.line()
            if found.kind == "simulated":
                detail += f"; for real output run it on {self._real_nodes()}"
            raise ClusterError(
                f"no logs of pod {self.namespace}/{name}: {detail} (the API server answered "
                f"{exc.code or 'no code'})",
                code=exc.code,
                status=exc.status,
            ) from exc

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


class _WhyWaiting:
    """What one wait says about a pod that waits: the blocker's line, with vslice's why-not
    beside kube-scheduler's word (the cluster is read again only when that word changes)."""

    def __init__(self, workload: Workload) -> None:
        self.workload = workload
        self._said: dict[str, str] = {}

    def line(self, found: progress.Blocker | None, pod: Mapping[str, Any]) -> str:
        if found is None:
            return ""
        if found.kind != "unschedulable":
            return found.line()
        if found.detail not in self._said:
            ours = self._vslice_why_not(str(pod["metadata"]["name"]))
            self._said[found.detail] = found.line() + (f"; vslice: {ours}" if ours else "")
        return self._said[found.detail]

    def _vslice_why_not(self, pod: str) -> str | None:
        """The engine's cause for ``pod`` (the Pod itself, or a Job's newest pod: a Job
        Kueue admitted still needs a GPU its slice fits on)."""
        read = self.workload._snapshot
        if read is None:
            return None
        try:
            snapshot = read()
        except ClusterError:
            return None  # e.g. no right to list every pod: the scheduler's word stands alone
        return progress.vslice_why_not(snapshot, self.workload.namespace, pod)

    def at_timeout(
        self,
        pod: dict[str, Any] | None,
        found: progress.Blocker | None,
        queue: QueueState | None = None,
    ) -> str:
        """``phase Pending, no node yet; not scheduled: ...; vslice: ...`` (or the newest
        Warning event when the pod's status names no cause; Kueue's word for a queued Job)."""
        if pod is None:
            return queue.words() if queue is not None else "the Job has not created a pod yet"
        node = node_name(pod)
        words = [
            f"phase {shown_phase(pod) or 'unknown'}" + (f" on {node}" if node else ", no node yet")
        ]
        if found is not None:
            words.append(self.line(found, pod))
        else:
            warning = self._last_warning(pod)
            words += [f"last warning event: {warning}"] if warning else []
        return "; ".join(words)

    def _last_warning(self, pod: dict[str, Any]) -> str | None:
        try:
            events = self.workload._calls.pod_events(
                self.workload.namespace, pod["metadata"]["name"]
            )
        except ClusterError:
            return None
        return progress.last_warning(events)
