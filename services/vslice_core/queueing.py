"""Where a Job stands in its Kueue queue, read from Kueue's Workload objects (pure: dicts in,
values out; the calls are in ``vslice_kube.kueueapi``).

Kueue makes one Workload per Job (owned by it) and writes its state as conditions:
``QuotaReserved`` (False while it waits, with Kueue's reason in the message), ``Admitted``,
``Finished``, and ``Evicted``/``Preempted`` when it gave quota back. vslice shows that state
with the job (``job.status``, ``vslice top``, the ClusterView) and adds what Kueue's own
objects do not hold: the job's **position** in its LocalQueue. That is computed the way
Kueue orders a BestEffortFIFO or StrictFIFO queue: higher ``spec.priority`` first, then the
older (creation time, or the time it was last evicted and requeued). Kueue's visibility API
gives the same figure but needs its aggregated API server, which a lab or a small site may not
run; this order is exact for one LocalQueue, and the ClusterQueue's other LocalQueues (other
teams sharing it) are not counted.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
"""The label that puts a Job in a LocalQueue of its namespace."""
WORKLOAD_KIND = "Workload"

EVICTION_WORDS = {
    "InCohortReclamation": "its cohort took back the quota it had borrowed",
    "InClusterQueue": "a job of higher priority in its queue took the quota",
    "InCohortReclaimWhileBorrowing": "a job of higher priority in the cohort took the quota",
    "InCohortFairSharing": "fair sharing between the teams took the quota",
    "PodsReadyTimeout": "its pods were not ready in time",
    "ClusterQueueStopped": "its ClusterQueue was stopped",
}
"""Kueue's Preempted/Evicted condition reasons, in a user's words (others shown as they are)."""
_BYTES = re.compile(r"\b(\d{10,}) more needed")


@dataclass(frozen=True)
class QueueState:
    """One Job's Kueue workload, as a user wants to read it."""

    namespace: str
    job: str
    queue: str
    state: str
    """``Queued`` (waiting for quota), ``Admitted``, ``Finished`` or ``Inadmissible`` (Kueue
    will not consider it as it is: no such LocalQueue, a stopped queue, ...)."""
    position: int | None = None
    """1 = next in its LocalQueue; None unless queued."""
    waiting: int = 0
    """How many workloads of the same LocalQueue are queued in all."""
    cluster_queue: str = ""
    reason: str = ""
    """Kueue's own words for why it is not admitted (or was evicted), numbers readable."""
    workload: str = ""

    @property
    def queued(self) -> bool:
        return self.state in ("Queued", "Inadmissible")

    def words(self) -> str:
        """``queued in team-a (2 of 3): insufficient unused quota ...``."""
        if self.state == "Admitted":
            where = f" by {self.cluster_queue}" if self.cluster_queue else ""
            return f"admitted from queue {self.queue}{where}"
        if self.state == "Finished":
            return f"finished in queue {self.queue}"
        place = f" ({self.position} of {self.waiting})" if self.position else ""
        verb = "queued" if self.state == "Queued" else "not admissible"
        return f"{verb} in {self.queue}{place}" + (f": {self.reason}" if self.reason else "")


def _conditions(workload: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    found = (workload.get("status") or {}).get("conditions") or []
    return {str(c.get("type")): c for c in found if isinstance(c, Mapping)}


def _true(conditions: Mapping[str, Mapping[str, Any]], kind: str) -> bool:
    return str((conditions.get(kind) or {}).get("status")) == "True"


def owner_job(workload: Mapping[str, Any]) -> str | None:
    """The name of the Job that owns a Workload (None: another kind of owner)."""
    for owner in (workload.get("metadata") or {}).get("ownerReferences") or []:
        if owner.get("kind") == "Job" and str(owner.get("apiVersion", "")).startswith("batch/"):
            return str(owner.get("name"))
    return None


def readable(message: str) -> str:
    """Kueue's message with byte counts as GiB/MiB (its quota for GPU memory is in bytes)."""

    def unit(match: re.Match[str]) -> str:
        value = int(match.group(1))
        shown = f"{value / 2**30:g} GiB" if value % 2**30 == 0 else f"{value / 2**20:.0f} MiB"
        return f"{shown} more needed"

    return _BYTES.sub(unit, message)


def _state(conditions: Mapping[str, Mapping[str, Any]]) -> str:
    if _true(conditions, "Finished"):
        return "Finished"
    if _true(conditions, "Admitted"):
        return "Admitted"
    reserved = conditions.get("QuotaReserved") or {}
    if str(reserved.get("reason")) == "Inadmissible":
        return "Inadmissible"
    return "Queued"


def _reason(conditions: Mapping[str, Mapping[str, Any]], state: str) -> str:
    if state == "Admitted":
        return ""
    reserved = conditions.get("QuotaReserved") or {}
    message = str(reserved.get("message") or "")
    if state != "Finished" and _true(conditions, "Evicted"):
        # Kueue's eviction message carries UIDs and cohort paths; its reason is the news.
        why = str((conditions.get("Preempted") or conditions.get("Evicted") or {}).get("reason"))
        said = EVICTION_WORDS.get(why, why)
        message = f"{message} (evicted earlier: {said})" if message else f"evicted: {said}"
    return readable(message)


def _order_key(workload: Mapping[str, Any]) -> tuple[int, str, str]:
    """Kueue's queue order: higher priority first, then the older (a requeued workload
    counts from its eviction)."""
    conditions = _conditions(workload)
    since = str((workload.get("metadata") or {}).get("creationTimestamp") or "")
    if _true(conditions, "Evicted"):
        since = str((conditions.get("Evicted") or {}).get("lastTransitionTime") or since)
    try:
        priority = int((workload.get("spec") or {}).get("priority") or 0)
    except (TypeError, ValueError):
        priority = 0  # not Kueue's writing; ordered as the default priority
    return (-priority, since, str((workload.get("metadata") or {}).get("name")))


def queue_states(workloads: Iterable[Mapping[str, Any]]) -> list[QueueState]:
    """Every Job's state, positions filled in per LocalQueue (namespace and queue name)."""
    read = [(w, _read(w)) for w in workloads if owner_job(w) is not None]
    queues: dict[tuple[str, str], list[tuple[Mapping[str, Any], QueueState]]] = {}
    for workload, state in read:
        if state.state == "Queued":
            queues.setdefault((state.namespace, state.queue), []).append((workload, state))
    placed: dict[int, QueueState] = {}
    for queued in queues.values():
        ordered = sorted(queued, key=lambda pair: _order_key(pair[0]))
        for position, (_, state) in enumerate(ordered, start=1):
            placed[id(state)] = replace(state, position=position, waiting=len(queued))
    return [placed.get(id(state), state) for _, state in read]


def _read(workload: Mapping[str, Any]) -> QueueState:
    """One Workload's state, without its place in the queue."""
    conditions = _conditions(workload)
    state = _state(conditions)
    admission = (workload.get("status") or {}).get("admission") or {}
    return QueueState(
        namespace=_namespace(workload),
        job=str(owner_job(workload)),
        queue=_queue(workload),
        state=state,
        cluster_queue=str(admission.get("clusterQueue") or ""),
        reason=_reason(conditions, state),
        workload=_name(workload),
    )


def state_of_job(
    workloads: Sequence[Mapping[str, Any]], namespace: str, job: str
) -> QueueState | None:
    """The Job's state (Kueue keeps one Workload per Job), None when Kueue has none for it."""
    found = [s for s in queue_states(workloads) if s.namespace == namespace and s.job == job]
    return found[-1] if found else None


def _namespace(workload: Mapping[str, Any]) -> str:
    return str((workload.get("metadata") or {}).get("namespace") or "")


def _name(workload: Mapping[str, Any]) -> str:
    return str((workload.get("metadata") or {}).get("name") or "")


def _queue(workload: Mapping[str, Any]) -> str:
    return str((workload.get("spec") or {}).get("queueName") or "")
