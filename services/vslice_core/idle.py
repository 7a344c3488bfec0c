"""Idle slices: what counts as idle, a namespace's reclaim policy, and the next step for a pod.

A slice is idle while none of its containers launches a kernel (the shim's launches counter
does not move). Nothing is reclaimed unless the pod's namespace opts in with labels:

- ``vslice.io/idle-reclaim: <duration>``: a pod idle longer than this is warned;
- ``vslice.io/idle-grace: <duration>``: after the warning, how long it has before it is
  evicted (default: the monitor's ``idle_grace_seconds``);
- ``vslice.io/idle-keep: forbid``: pods of this namespace may not opt out with the pod
  annotation ``vslice.io/idle-keep: "true"`` (by default they may).

Durations are written as Kubernetes writes them (``90s``, ``30m``, ``4h``, ``1h30m``), plus
``d`` for days; they fit in a label value. The monitor on each node acts on
:func:`next_step`; every decision here is pure, so it is tested without a cluster
(docs/idle.md).
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from vslice_core.errors import InvalidRequest

RECLAIM_LABEL = "vslice.io/idle-reclaim"
GRACE_LABEL = "vslice.io/idle-grace"
KEEP_LABEL = "vslice.io/idle-keep"
KEEP_FORBID = "forbid"
KEEP_ALLOW = "allow"
KEEP_ANNOTATION = "vslice.io/idle-keep"
KEEP_VALUES = ("true", "false")
RECLAIMED = "IdleSliceReclaimed"  # the reason of the event on a pod evicted for being idle

_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
# Each unit at most once, largest first: "1h30m", never "30m1h" or "1h1h".
_DURATION = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")
# The same grammar as a CEL/RE2 pattern, for the admission policy that refuses a bad label.
DURATION_PATTERN = r"^([0-9]+d)?([0-9]+h)?([0-9]+m)?([0-9]+s)?$"
DURATION_HINT = "write a number with a unit: 90s, 30m, 4h, 1h30m or 2d"


def parse_duration(text: str, *, field: str) -> float:
    """Seconds in ``text`` (> 0); InvalidRequest naming ``field`` and the value otherwise."""
    match = _DURATION.fullmatch(text.strip())
    if not text.strip() or match is None:
        raise InvalidRequest(
            f"{field}: {text!r} is not a duration; {DURATION_HINT}", field=field, value=text
        )
    seconds = sum(
        int(part) * _UNITS[unit]
        for part, unit in zip(match.groups(), _UNITS, strict=True)
        if part is not None
    )
    if seconds <= 0:
        raise InvalidRequest(
            f"{field}: {text!r} is zero; a duration must be longer than 0s ({DURATION_HINT})",
            field=field,
            value=text,
        )
    return float(seconds)


def format_duration(seconds: float) -> str:
    """``seconds`` the way a person reads it: ``4h02m``, ``35m``, ``12s``, ``2d3h``."""
    total = max(0, int(seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours}h" if hours else f"{days}d"
    if hours:
        return f"{hours}h{minutes:02d}m" if minutes else f"{hours}h"
    if minutes:
        return f"{minutes}m{secs:02d}s" if secs and minutes < 10 else f"{minutes}m"
    return f"{secs}s"


@dataclass(frozen=True)
class ReclaimPolicy:
    """A namespace's opt-in: warn after ``after_s`` idle, evict ``grace_s`` after the warning."""

    after_s: float
    grace_s: float
    keep_allowed: bool = True

    def describe(self) -> str:
        return (
            f"{RECLAIM_LABEL}={format_duration(self.after_s)}, "
            f"grace {format_duration(self.grace_s)}"
        )


def namespace_policy(
    namespace: str, labels: Mapping[str, str], default_grace_s: float
) -> ReclaimPolicy | None:
    """The namespace's reclaim policy from its labels; None when it did not opt in.

    InvalidRequest names the namespace, the label and the value when a label is malformed
    (the admission policy refuses such labels; this catches those set before it existed)."""
    after = labels.get(RECLAIM_LABEL)
    if after is None:
        return None
    where = f"namespace {namespace!r} label"
    after_s = parse_duration(after, field=f"{where} {RECLAIM_LABEL}")
    grace = labels.get(GRACE_LABEL)
    grace_s = (
        default_grace_s if grace is None else parse_duration(grace, field=f"{where} {GRACE_LABEL}")
    )
    keep = labels.get(KEEP_LABEL, KEEP_ALLOW)
    if keep not in (KEEP_ALLOW, KEEP_FORBID):
        raise InvalidRequest(
            f"{where} {KEEP_LABEL}: {keep!r} is neither {KEEP_ALLOW!r} nor {KEEP_FORBID!r}",
            field=KEEP_LABEL,
            value=keep,
        )
    return ReclaimPolicy(after_s, grace_s, keep_allowed=keep == KEEP_ALLOW)


def keep_requested(namespace: str, pod: str, annotations: Mapping[str, str]) -> bool:
    """Whether the pod asks to be kept; InvalidRequest for a value other than true/false."""
    value = annotations.get(KEEP_ANNOTATION)
    if value is None:
        return False
    if value not in KEEP_VALUES:
        raise InvalidRequest(
            f"pod {namespace}/{pod} annotation {KEEP_ANNOTATION}: {value!r} is neither "
            f"'true' nor 'false'",
            field=KEEP_ANNOTATION,
            value=value,
        )
    return value == "true"


class Step(enum.Enum):
    NOTHING = "nothing"
    WARN = "warn"  # idle past the policy: an event, and the time of eviction on the pod
    EVICT = "evict"  # warned at least the grace period ago and still idle
    CLEAR = "clear"  # warned, but active again (or kept, or no longer opted in)


@dataclass(frozen=True)
class PodIdleness:
    """What the monitor knows of one pod with a slice at one check."""

    idle_s: float  # since its last kernel launch, or since the monitor first saw it
    warned_for_s: float | None  # since this monitor warned it; None = not warned
    keep: bool  # the pod's keep annotation, honoured only where the namespace allows it


def next_step(pod: PodIdleness, policy: ReclaimPolicy | None) -> Step:
    """What to do with the pod now.

    A warning is withdrawn as soon as the pod launches a kernel (its idle time falls below
    the policy), so a pod is evicted only after ``after_s + grace_s`` without a launch, at
    least ``grace_s`` of them after a warning it could see."""
    warned = pod.warned_for_s is not None
    kept = pod.keep and (policy is None or policy.keep_allowed)
    if policy is None or kept or pod.idle_s < policy.after_s:
        return Step.CLEAR if warned else Step.NOTHING
    if not warned:
        return Step.WARN
    assert pod.warned_for_s is not None
    return Step.EVICT if pod.warned_for_s >= policy.grace_s else Step.NOTHING


def gib_hours(held_bytes: int, seconds: float) -> float:
    """GiB-hours of ``held_bytes`` held for ``seconds`` (the idle metric's unit)."""
    if seconds <= 0 or not math.isfinite(seconds):
        return 0.0
    return held_bytes / 2**30 * seconds / 3600
