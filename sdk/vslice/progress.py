"""Why a pod is not progressing: the one reading every wait shares.

``Workload.wait`` and ``Workload.logs``, ``vslice request`` and the SlicePicker's status line
all read a pod (a plain dict, as the API sends it) through :func:`blocker`, so each says the
same cause in the same words, as soon as Kubernetes knows it rather than at the timeout.
Looked for in this order:

- **deleting**: ``metadata.deletionTimestamp`` is set; the pod is on its way out;
- **image** / **config** / **runtime** / **crash**: a container (init containers first) waits
  with a reason the kubelet gives in ``status.containerStatuses[].state.waiting``
  (``ErrImagePull``, ``ImagePullBackOff``, ``CreateContainerConfigError``,
  ``CreateContainerError``, ``CrashLoopBackOff``, ...) and its message; ``ContainerCreating``
  and ``PodInitializing`` are progress, not blockers;
- **unschedulable**: the ``PodScheduled`` condition is False; kube-scheduler's reason and
  message (the caller may add vslice's own why-not, which needs a reading of the cluster);
- **simulated**: the pod is Running on a node kwok simulates (the lab marks its simulated
  nodes ``vslice.io/simulated=true``; kwok's own mark is the ``kwok.x-k8s.io/node``
  annotation). kwok plays the kubelet: it reports every container started and nothing ever
  runs, so such a pod never completes and no kubelet serves its logs.

Every blocker but *unschedulable* and *runtime* needs a change to the pod or the cluster
before waiting can help, so a wait ends at once on it (:attr:`Blocker.final`); an
unschedulable pod may still get room when other pods end (``queue=True`` asks for exactly
that), and the kubelet retries a container the runtime failed to create, so a wait reports
those and goes on. Nothing here does I/O: callers pass the pod, and the node when they could
read it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from vslice_core.clusterobjects import (
    annotations_of,
    metadata_of,
    node_inventory,
    node_name,
    object_name,
    phase,
)
from vslice_core.errors import DecodeError, one_line
from vslice_core.whynot import explain

from vslice.snapshot import DELETING, ClusterSnapshot, shown_phase

SIMULATED_LABEL: Final = "vslice.io/simulated"
"""The lab's label on the nodes kwok simulates (value ``true``)."""
KWOK_ANNOTATION: Final = "kwok.x-k8s.io/node"
"""kwok's own mark on the nodes it plays the kubelet of (value ``fake``)."""

IMAGE_REASONS: Final = frozenset(
    {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"}
)
CONFIG_REASONS: Final = frozenset({"CreateContainerConfigError"})
RUNTIME_REASONS: Final = frozenset({"CreateContainerError", "RunContainerError"})
"""The runtime failed to create or start a container; the kubelet retries, and a slow or
restarting runtime recovers, so these are reported, not final."""
CRASH_REASONS: Final = frozenset({"CrashLoopBackOff"})

Kind = Literal["deleting", "image", "config", "runtime", "crash", "unschedulable", "simulated"]
RETRIED: Final = frozenset({"unschedulable", "runtime"})
"""Blockers Kubernetes may clear on its own: a wait reports them and goes on."""


@dataclass(frozen=True)
class Blocker:
    """Why one pod does not progress, as Kubernetes (or the lab) says it."""

    kind: Kind
    reason: str
    """Kubernetes' word: ``ImagePullBackOff``, ``Unschedulable``, ... (``Simulated``)."""
    detail: str
    """The cause and what would work instead, in one line."""
    container: str = ""

    @property
    def final(self) -> bool:
        """Whether waiting cannot help: the pod or the cluster must change first."""
        return self.kind not in RETRIED

    def line(self) -> str:
        return self.detail


def is_simulated(node: Mapping[str, Any] | None) -> bool:
    """Whether kwok plays the node's kubelet (its containers never really run)."""
    if not node:
        return False
    labels = metadata_of(node).get("labels")
    labelled = isinstance(labels, Mapping) and str(labels.get(SIMULATED_LABEL)) == "true"
    return labelled or KWOK_ANNOTATION in annotations_of(node)


def blocker(pod: Mapping[str, Any], node: Mapping[str, Any] | None = None) -> Blocker | None:
    """Why ``pod`` does not progress (None when nothing stops it); ``node`` is the Node it
    is bound to, when the caller could read it (without it a simulated node goes unseen)."""
    if shown_phase(pod) == DELETING:
        since = metadata_of(pod).get("deletionTimestamp")
        return Blocker("deleting", DELETING, f"it is being deleted (since {since})")
    found = _container_blocker(pod)
    if found is not None:
        return found
    scheduler = scheduler_word(pod)
    if scheduler is not None:
        reason, message = scheduler
        said = ": ".join(part for part in (reason, message) if part) or "no reason given"
        return Blocker("unschedulable", reason or "Unschedulable", f"not scheduled: {said}")
    if phase(pod) == "Running" and is_simulated(node):
        where = node_name(pod)
        return Blocker(
            "simulated",
            "Simulated",
            f"it runs on {where}, a node kwok simulates: its containers never really run, "
            "so it never completes and has no logs",
        )
    return None


def scheduler_word(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """kube-scheduler's reason and message (on one line) while it has not scheduled the pod
    (``PodScheduled`` not True)."""
    status = pod.get("status")
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    for condition in conditions if isinstance(conditions, list) else []:
        if (
            isinstance(condition, Mapping)
            and condition.get("type") == "PodScheduled"
            and condition.get("status") != "True"
        ):
            message = str(condition.get("message") or "")
            return str(condition.get("reason") or ""), one_line(message.strip())
    return None


def _statuses(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Init containers first: the others cannot start before them."""
    status = pod.get("status")
    if not isinstance(status, Mapping):
        return []
    found: list[Mapping[str, Any]] = []
    for key in ("initContainerStatuses", "containerStatuses"):
        items = status.get(key)
        found += [s for s in items if isinstance(s, Mapping)] if isinstance(items, list) else []
    return found


def _container_blocker(pod: Mapping[str, Any]) -> Blocker | None:
    for status in _statuses(pod):
        state = status.get("state")
        waiting = state.get("waiting") if isinstance(state, Mapping) else None
        if not isinstance(waiting, Mapping):
            continue
        reason = str(waiting.get("reason") or "")
        message = one_line(str(waiting.get("message") or "").strip())
        name = str(status.get("name") or "?")
        said = f"{reason}: {message}" if message else reason
        if reason in IMAGE_REASONS:
            image = str(status.get("image") or "")
            where = node_name(pod) or "its node"
            return Blocker(
                "image",
                reason,
                f"container {name} cannot pull its image {image!r}: {said}; give an image "
                f"{where} can pull (for the local lab's real node: `vslice lab import-image "
                "FILE.tar`)",
                name,
            )
        if reason in CONFIG_REASONS:
            return Blocker(
                "config",
                reason,
                f"container {name} cannot be created: {said}; create what it names, or "
                "change the pod",
                name,
            )
        if reason in RUNTIME_REASONS:
            return Blocker(
                "runtime",
                reason,
                f"container {name} cannot start: {said}; the kubelet retries it",
                name,
            )
        if reason in CRASH_REASONS:
            return Blocker(
                "crash",
                reason,
                f"container {name} keeps crashing: {said}{_last_exit(status)}; its logs say "
                f"why (`kubectl logs --previous {object_name(pod)} -c {name}`)",
                name,
            )
    return None


def _last_exit(status: Mapping[str, Any]) -> str:
    """``; 3 restarts, last exit code 1 (Error)``: the numbers of a crash loop."""
    restarts = int(status.get("restartCount") or 0)
    last = status.get("lastState")
    ended = last.get("terminated") if isinstance(last, Mapping) else None
    words = [f"{restarts} restart{'' if restarts == 1 else 's'}"]
    if isinstance(ended, Mapping) and ended.get("exitCode") is not None:
        why = f" ({ended['reason']})" if ended.get("reason") else ""
        words.append(f"last exit code {ended['exitCode']}{why}")
    return "; " + ", ".join(words)


def vslice_why_not(snapshot: ClusterSnapshot, namespace: str, name: str) -> str | None:
    """The engine's one-line cause for a pod still waiting for a slice (None when the pod is
    not pending in ``snapshot``, or would fit now: then the wait is elsewhere)."""
    for pending in snapshot.pending:
        if (pending.namespace, pending.name) == (namespace, name):
            why = explain(snapshot.decide(pending.request, pending.path), pending.request)
            return None if why.fits else why.one_line()
    return None


def real_gpu_nodes(nodes: Iterable[Mapping[str, Any]]) -> str:
    """``lab-l4 (NVIDIA-L4)``: the GPU nodes kwok does not simulate, with their models;
    what to ask for when output is wanted."""
    found = []
    for node in nodes:
        try:
            inventory = node_inventory(node)
        except DecodeError:
            continue
        if inventory is None or not inventory.gpus or is_simulated(node):
            continue
        models = sorted({gpu.model for gpu in inventory.gpus})
        found.append(f"{inventory.name} ({', '.join(models)})")
    if not found:
        return "every GPU node here is simulated: a real cluster, or a lab with its real node"
    return "a real GPU node: " + "; ".join(found) + " (ask for that GPU type)"


def last_warning(events: Iterable[Mapping[str, Any]]) -> str | None:
    """The newest Warning event about the pod, ``FailedMount: ...`` (None without one)."""
    warnings = [e for e in events if isinstance(e, Mapping) and e.get("type") == "Warning"]
    if not warnings:
        return None
    newest = max(
        warnings,
        key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""),
    )
    message = one_line(str(newest.get("message") or "").strip())
    return ": ".join(part for part in (str(newest.get("reason") or ""), message) if part)


def emptied(snapshot: ClusterSnapshot) -> ClusterSnapshot:
    """The same nodes and GPUs with no pod holding anything: what fits nowhere even there
    can never fit the GPUs this cluster has (waiting for room does not help)."""
    return ClusterSnapshot(
        inventories=dict(snapshot.inventories),
        addresses=dict(snapshot.addresses),
        dra_gpus=set(snapshot.dra_gpus),
    )
