"""Why a pod waits for a slice: the one reading ``vslice top``'s PENDING section and
``vslice why`` share, so both say the same cause with the same numbers.

A pending pod (:class:`vslice.snapshot.PendingPod`) is decided against the snapshot on its own
path (a DRA pod only over the DRA path's GPUs) and the decision is put in words by the core's
:func:`vslice_core.whynot.explain`, the text every view prints.
"""

from __future__ import annotations

from typing import Final

from vslice_core.model import Decision, PodRequest
from vslice_core.whynot import WhyNot, describe_request, explain

from vslice.snapshot import ClusterSnapshot, PendingPod

DRA_MARK: Final = " (DRA claim)"
"""After what a pending pod asks, when it asks through a ResourceClaim."""


def asks(pending: PendingPod) -> str:
    """What the pod asks, ``1 GPU with 90 GiB``, marked when it asks through a claim."""
    return describe_request(pending.request) + (DRA_MARK if pending.path == "dra" else "")


def decide(snapshot: ClusterSnapshot, pending: PendingPod) -> Decision:
    """The engine's answer for the pod now, over the GPUs of its path."""
    return snapshot.decide(pending.request, pending.path)


def why_waiting(
    snapshot: ClusterSnapshot, pending: PendingPod, decision: Decision | None = None
) -> WhyNot:
    """The decision (made here unless given) in words: a headline, one line per node that
    cannot take the pod, and what would fit now."""
    return explain(decision or decide(snapshot, pending), pending.request)


def why_not(decision: Decision, request: PodRequest) -> str:
    """The one-line cause, with numbers, of a decision (the engine's own wording)."""
    return explain(decision, request).one_line()
