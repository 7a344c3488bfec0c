"""Idle slices on this node: marked, counted, and given back where the namespace opts in.

Every ``idle_check_every_seconds`` the monitor takes the latest list of its node's pods
(:class:`vslice_node.monitor.podnames.PodNames`) and the containers' regions, and for each
pod that holds a slice (an allocation on the extender path, a prepared claim on the DRA path):

1. its idle time: since the latest change of any of its containers' launches counters, as
   this process saw them (the same :class:`~vslice_node.monitor.collector.Idleness` the
   metrics use), or since this process first saw the pod. A restarted monitor starts every
   clock again, so a restart can delay a reclaim, never hasten one;
2. once it is idle ``idle_after_seconds`` (or its namespace's shorter reclaim time), the
   annotation ``vslice.io/idle-since`` with the time of its last launch, removed when it
   launches again: what ``vslice top --idle`` and the widgets show;
3. the metrics: GiB-hours held idle per namespace, idle slices and the memory they hold;
4. in a namespace that opted in (:mod:`vslice_core.idle`): the warning (a Warning event
   ``IdleSliceWarning`` and ``vslice.io/idle-reclaim-at``), then, a grace period later and
   still idle, the eviction through the Eviction API, which keeps PodDisruptionBudgets. A
   launch withdraws the warning.

Decisions rest on this process's own observations, never on the pod's annotations, which
are only a display (the state policy keeps them vslice's, but a stale list must not restart
a grace period either). A pod's memory is what its slices hold: each region's limit (its
use where it has no limit), or the allocation's MiB while no region exists yet (a notebook
that has not touched the GPU still holds its slice).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from vslice_core.annotations import (
    ALLOCATION,
    IDLE_RECLAIM_AT,
    IDLE_SINCE,
    decode_allocation,
    encode_moment,
)
from vslice_core.clusterobjects import pod_deleting, pod_finished
from vslice_core.errors import ClusterError, InvalidRequest
from vslice_core.idle import (
    KEEP_ANNOTATION,
    KEEP_FORBID,
    KEEP_LABEL,
    RECLAIM_LABEL,
    RECLAIMED,
    PodIdleness,
    ReclaimPolicy,
    Step,
    format_duration,
    gib_hours,
    keep_requested,
    namespace_policy,
    next_step,
)
from vslice_serving.periodic import Periodic

from vslice_node.monitor.collector import Idleness
from vslice_node.monitor.regions import ContainerRegion, RegionReader
from vslice_node.nodeapi import NodeApi

log = logging.getLogger("vslice.monitor.idle")

PodKey = tuple[str, str]  # namespace, pod name
Listing = tuple[Sequence[Mapping[str, Any]], Mapping[str, tuple[str, str]]]


@dataclass(frozen=True)
class IdleSettings:
    idle_after_s: float  # idle this long: marked and counted
    grace_s: float  # a namespace's grace when its label does not say
    reclaim: bool  # whether this node acts on the namespaces' opt-in at all
    every_s: float


@dataclass
class _Tracked:
    """This process's memory of one pod with a slice."""

    first_seen: float
    warned_at: float | None = None
    marked: bool | None = None  # whether idle-since is on the pod; None = as listed
    due_cleared: bool = False  # a reclaim time left by an earlier monitor was removed
    blocked: str = ""  # the refusal last reported for its eviction


def stamp(moment: float) -> str:
    """Unix time as RFC 3339 in UTC, to the second (how messages say it)."""
    return datetime.fromtimestamp(moment, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def moment(unix: float) -> str:
    """Unix time as an idle annotation's value."""
    return encode_moment(datetime.fromtimestamp(unix, UTC))


def allocation_bytes(annotations: Mapping[str, str]) -> int:
    """Bytes an extender-path allocation grants (0 when there is none or it is malformed)."""
    value = annotations.get(ALLOCATION)
    if not value:
        return 0
    try:
        allocation = decode_allocation(value)
    except InvalidRequest:
        return 0
    mib = sum(gpu.memory_mib for c in allocation.containers for gpu in c.gpus)
    return mib * 2**20


def region_bytes(regions: Sequence[ContainerRegion]) -> int:
    return sum(
        device.memory_limit if device.memory_limit is not None else device.memory_used
        for region in regions
        for device in region.snapshot.devices
    )


class IdleMetrics(Collector):
    """The idle series, per namespace (the monitor adds ``node``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.gib_hours: dict[str, float] = {}
        self.warnings: dict[str, int] = {}
        self.evictions: dict[str, int] = {}
        self.slices: dict[str, int] = {}
        self.memory: dict[str, int] = {}

    def record(
        self, hours: Mapping[str, float], slices: Mapping[str, int], memory: Mapping[str, int]
    ) -> None:
        with self._lock:
            for namespace, value in hours.items():
                self.gib_hours[namespace] = self.gib_hours.get(namespace, 0.0) + value
            self.slices, self.memory = dict(slices), dict(memory)

    def count(self, table: dict[str, int], namespace: str) -> None:
        with self._lock:
            table[namespace] = table.get(namespace, 0) + 1

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            tables: list[
                tuple[type[CounterMetricFamily | GaugeMetricFamily], str, str, Mapping[str, float]]
            ] = [
                (
                    CounterMetricFamily,
                    "vslice_idle_memory_gib_hours",
                    "GiB-hours of GPU memory held by slices idle past idle_after_seconds",
                    self.gib_hours,
                ),
                (
                    CounterMetricFamily,
                    "vslice_idle_reclaim_warnings",
                    "Idle pods warned that they will be evicted",
                    self.warnings,
                ),
                (
                    CounterMetricFamily,
                    "vslice_idle_reclaim_evictions",
                    "Idle pods evicted to give their slices back",
                    self.evictions,
                ),
                (
                    GaugeMetricFamily,
                    "vslice_idle_slices",
                    "Pods with a slice idle past idle_after_seconds now",
                    self.slices,
                ),
                (
                    GaugeMetricFamily,
                    "vslice_idle_memory_bytes",
                    "GPU memory held by those idle pods now",
                    self.memory,
                ),
            ]
            for kind, name, text, table in tables:
                family = kind(name, text, labels=["namespace"])
                for namespace, value in sorted(table.items()):
                    family.add_metric([namespace], value)
                yield family


class IdleReclaimer:
    """One node's idle check (module docstring); :meth:`check` is one pass."""

    def __init__(
        self,
        api: NodeApi,
        listing: Callable[[], Listing | None],
        reader: RegionReader,
        idleness: Idleness,
        settings: IdleSettings,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.api = api
        self.listing = listing
        self.reader = reader
        self.idleness = idleness
        self.settings = settings
        self.metrics = IdleMetrics()
        self._clock = clock
        self._wall = wall
        self._tracked: dict[str, _Tracked] = {}
        self._last_check: float | None = None
        self._reported: set[str] = set()  # problems logged once
        self._loop = Periodic(
            "idle-reclaim", settings.every_s, self.check, log, "idle check failed"
        )

    # -- one pass ------------------------------------------------------------------------------

    def check(self) -> None:
        listed = self.listing()
        if listed is None:
            return  # the latest pod list failed: nothing is decided on an old one
        pods, names = listed
        now, wall = self._clock(), self._wall()
        elapsed = 0.0 if self._last_check is None else now - self._last_check
        self._last_check = now
        regions: dict[PodKey, list[ContainerRegion]] = {}
        for region in self.reader.read():
            owner = names.get(region.file.pod_uid)
            if owner is not None:
                regions.setdefault(owner, []).append(region)
        policies = self._policies()
        pod_uids = {str((pod.get("metadata") or {}).get("uid", "")) for pod in pods}
        claimed = {owner for uid, owner in names.items() if uid not in pod_uids}
        hours: dict[str, float] = {}
        slices: dict[str, int] = {}
        memory: dict[str, int] = {}
        live: set[str] = set()
        for pod in pods:
            meta = pod.get("metadata") or {}
            namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
            uid = str(meta.get("uid", ""))
            annotations: Mapping[str, str] = meta.get("annotations") or {}
            own = regions.get((namespace, name), [])
            if pod_finished(pod) or pod_deleting(pod):
                continue
            if not own and ALLOCATION not in annotations and (namespace, name) not in claimed:
                continue  # holds no slice
            live.add(uid)
            tracked = self._tracked.setdefault(uid, _Tracked(first_seen=now))
            idle = now - self._last_activity(own, tracked, now)
            held = region_bytes(own) if own else allocation_bytes(annotations)
            policy = policies.get(namespace) if self.settings.reclaim else None
            mark_after = min(self.settings.idle_after_s, policy.after_s if policy else 1e300)
            if idle >= self.settings.idle_after_s:
                # Only the time past the threshold counts: the pod was busy enough before it.
                counted = min(elapsed, idle - self.settings.idle_after_s)
                hours[namespace] = hours.get(namespace, 0.0) + gib_hours(held, counted)
                slices[namespace] = slices.get(namespace, 0) + 1
                memory[namespace] = memory.get(namespace, 0) + held
            subject = (namespace, name, uid)
            self._mark(subject, annotations, tracked, idle >= mark_after, wall - idle)
            stale = tracked.warned_at is None and IDLE_RECLAIM_AT in annotations
            if stale and not tracked.due_cleared:
                # Left by this monitor before a restart: its warning is void now.
                tracked.due_cleared = self._annotate(subject, {IDLE_RECLAIM_AT: None})
            keep = self._keep(namespace, name, annotations)
            self._act(subject, tracked, idle, held, keep, policy, now, wall)
        self._tracked = {uid: t for uid, t in self._tracked.items() if uid in live}
        self.metrics.record(hours, slices, memory)

    def _last_activity(
        self, own: Sequence[ContainerRegion], tracked: _Tracked, now: float
    ) -> float:
        last = tracked.first_seen
        for region in own:
            for device in region.snapshot.devices:
                key = (region.file.pod_uid, region.file.container, device.index)
                last = max(last, self.idleness.changed_at(key, device.launches, now))
        return last

    def _policies(self) -> dict[str, ReclaimPolicy | None]:
        if not self.settings.reclaim:
            return {}
        try:
            labelled = self.api.labelled_namespaces(RECLAIM_LABEL)
        except ClusterError as exc:
            self._once(f"namespaces: {exc}", "idle reclaim paused: namespaces unavailable")
            return {}  # no namespace is known to opt in: nothing is reclaimed this time
        policies: dict[str, ReclaimPolicy | None] = {}
        for namespace, labels in labelled.items():
            try:
                policies[namespace] = namespace_policy(namespace, labels, self.settings.grace_s)
            except InvalidRequest as exc:
                self._once(str(exc), "idle reclaim off for a namespace with a bad label")
        return policies

    def _keep(self, namespace: str, name: str, annotations: Mapping[str, str]) -> bool:
        try:
            return keep_requested(namespace, name, annotations)
        except InvalidRequest as exc:
            self._once(str(exc), "keep annotation not understood; the pod is not kept")
            return False

    # -- what it writes ------------------------------------------------------------------------

    def _mark(
        self,
        subject: tuple[str, str, str],
        annotations: Mapping[str, str],
        tracked: _Tracked,
        idle: bool,
        since: float,
    ) -> None:
        marked = tracked.marked if tracked.marked is not None else IDLE_SINCE in annotations
        if idle == marked:
            tracked.marked = marked
            return
        if self._annotate(subject, {IDLE_SINCE: moment(since) if idle else None}):
            tracked.marked = idle

    def _act(
        self,
        subject: tuple[str, str, str],
        tracked: _Tracked,
        idle: float,
        held: int,
        keep: bool,
        policy: ReclaimPolicy | None,
        now: float,
        wall: float,
    ) -> None:
        namespace, name, uid = subject
        warned_for = None if tracked.warned_at is None else now - tracked.warned_at
        step = next_step(PodIdleness(idle, warned_for, keep), policy)
        if step is Step.CLEAR:
            tracked.warned_at, tracked.blocked = None, ""
            self._annotate(subject, {IDLE_RECLAIM_AT: None})
        elif step is Step.WARN and policy is not None:
            due = wall + policy.grace_s
            message = warning_text(namespace, idle, held, wall - idle, due, policy, keep)
            if self._event(subject, "IdleSliceWarning", message):
                tracked.warned_at = now
                self.metrics.count(self.metrics.warnings, namespace)
                self._annotate(subject, {IDLE_RECLAIM_AT: moment(due)})
        elif step is Step.EVICT and policy is not None and warned_for is not None:
            try:
                self.api.evict_pod(namespace, name, uid)
            except ClusterError as exc:
                if exc.code in (404, 409):
                    return  # gone, or another pod of that name now: nothing to give back
                if str(exc) != tracked.blocked:
                    tracked.blocked = str(exc)
                    self._event(
                        subject, "IdleSliceReclaimBlocked", blocked_text(exc, self.settings)
                    )
                return
            self.metrics.count(self.metrics.evictions, namespace)
            log.info("idle pod evicted", extra={"pod": f"{namespace}/{name}", "idle_s": idle})
            self._event(
                subject,
                RECLAIMED,
                reclaimed_text(namespace, idle, held, warned_for, policy),
            )

    def _annotate(
        self, subject: tuple[str, str, str], annotations: Mapping[str, str | None]
    ) -> bool:
        namespace, name, uid = subject
        try:
            self.api.annotate_pod(namespace, name, uid, annotations)
        except ClusterError as exc:
            log.warning("idle annotation not written", extra={"error": str(exc)})
            return False
        return True

    def _event(self, subject: tuple[str, str, str], reason: str, message: str) -> bool:
        namespace, name, uid = subject
        try:
            self.api.pod_event(namespace, name, uid, reason, message)
        except ClusterError as exc:
            log.warning("idle event not written", extra={"reason": reason, "error": str(exc)})
            return False
        return True

    def _once(self, problem: str, what: str) -> None:
        if problem not in self._reported:
            self._reported.add(problem)
            log.warning(what, extra={"error": problem})

    # -- the loop ------------------------------------------------------------------------------

    def start(self) -> None:
        self._loop.start()

    def stop(self) -> None:
        self._loop.stop()


def _gib(held: int) -> str:
    return f"{held / 2**30:.1f} GiB"


def warning_text(
    namespace: str,
    idle: float,
    held: int,
    since: float,
    due: float,
    policy: ReclaimPolicy,
    keep: bool,
) -> str:
    text = (
        f"idle for {format_duration(idle)} (no kernel launched since {stamp(since)}), holding "
        f"{_gib(held)} of GPU memory; namespace {namespace} gives back slices idle longer than "
        f"{format_duration(policy.after_s)} ({policy.describe()}): this pod will be evicted at "
        f"{stamp(due)} (in {format_duration(policy.grace_s)}) unless it launches a kernel first"
    )
    if not policy.keep_allowed:
        forbidden = f"namespace {namespace} has {KEEP_LABEL}={KEEP_FORBID}"
        if keep:
            return f"{text}; its annotation {KEEP_ANNOTATION}=true is not honoured: {forbidden}"
        return f"{text}; {forbidden}, so {KEEP_ANNOTATION} cannot keep it"
    return f"{text}, or the pod is given the annotation {KEEP_ANNOTATION}=true"


def reclaimed_text(
    namespace: str, idle: float, held: int, warned_for: float, policy: ReclaimPolicy
) -> str:
    return (
        f"evicted to give back {_gib(held)} of GPU memory: idle for {format_duration(idle)}, "
        f"warned {format_duration(warned_for)} ago; namespace {namespace} gives back slices "
        f"idle longer than {format_duration(policy.after_s)} ({policy.describe()})"
    )


def blocked_text(exc: ClusterError, settings: IdleSettings) -> str:
    return (
        f"idle past its namespace's reclaim time and warned, but the eviction was refused "
        f"({exc}); tried again every {format_duration(settings.every_s)} while it stays idle"
    )
