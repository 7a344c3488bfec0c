"""Why a request does not fit, in words and numbers: the one text every view prints.

``vslice plan``, ``vslice request``, ``vslice top``'s PENDING section, the SDK's
``Plan.why_not()`` and the notebook widgets all render a :class:`~vslice_core.model.Decision`
through :func:`explain`, so a user reads the same cause everywhere:

    does not fit: asks 200 GiB per GPU; the largest GPU here has 80 GiB
      node-a: 8 GPUs have 80 GiB each (memory)
      node-b: the most free is 12 GiB on GPU 1, of 80 GiB (memory, x2)
    would fit now: 1 GPU with 80 GiB, 30% cores on node-a (GPU 0)

The headline separates a request no GPU could ever hold ("asks 200 GiB; the largest GPU
here has 80 GiB") from one that is only used up now ("no node has that free now"); each
node line names its reason with the numbers from :class:`~vslice_core.model.NodeRoom`;
the closing line is the engine's own suggestions (:mod:`vslice_core.headroom`).
Reason codes stay as they are in the JSON; this is only their rendering.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from vslice_core.model import (
    EXCLUSIVE_CORES,
    GPU_REASONS,
    REASONS,
    ContainerRequest,
    Decision,
    NodeRoom,
    NodeVerdict,
    PodRequest,
    QuotaCheck,
    QuotaUsage,
    Suggestion,
)
from vslice_core.quantities import format_mib

REASON_TEXT: Final[dict[str, str]] = {
    "unhealthy": "GPU reported unhealthy",
    "cordoned": "GPU cordoned by an operator",
    "type_mismatch": "GPU model not wanted (gpu_type / exclude_gpu_type)",
    "uuid_mismatch": "GPU UUID not wanted (gpu_uuid / exclude_gpu_uuid)",
    "slots_exhausted": "every slice slot of the GPU is taken",
    "mutex_busy": "GPU already holds a slice (mutex policy)",
    "insufficient_memory": "not enough free GPU memory",
    "insufficient_cores": "not enough free GPU cores",
    "exclusive_conflict": "a whole GPU was asked but the GPU is in use",
    "cores_exhausted": "every core of the GPU is taken",
    "numa_mismatch": "GPUs not on one NUMA node (numa_bind)",
    "too_few_gpus": "fewer usable GPUs on the node than asked",
    "quota_exceeded": "the namespace's GPU quota has no room for the pod",
    "node_blocked": "node blocked: a running pod's allocation there cannot be read",
}


def reason_text(code: str) -> str:
    """Human words for an engine reason code (the code itself when unknown)."""
    return REASON_TEXT.get(code, code)


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def _pair(asked: int, have: int) -> tuple[str, str]:
    """Two amounts, in MiB when GiB with one decimal would show them equal."""
    a, b = format_mib(asked), format_mib(have)
    return (f"{asked} MiB", f"{have} MiB") if a == b and asked != have else (a, b)


def describe_container(container: ContainerRequest) -> str:
    """``1 GPU with 20 GiB, 30% cores`` / ``2 GPUs with 25% of memory each`` / ``1 whole GPU``."""
    gpus = _plural(container.gpus, "GPU")
    if container.memory_percent == 100 and container.cores >= EXCLUSIVE_CORES:
        whole = "whole GPU" if container.gpus == 1 else "whole GPUs"
        return f"{container.gpus} {whole}"
    if container.memory_mib is not None:
        memory = format_mib(container.memory_mib)
    else:
        memory = f"{container.memory_percent}% of memory"
    each = " each" if container.gpus > 1 else ""
    # 0 cores is a best-effort share (no SM limit): saying "0% cores" would read as none.
    cores = f", {container.cores}% cores" if container.cores else ""
    return f"{gpus} with {memory}{cores}{each}"


def describe_request(request: PodRequest) -> str:
    """The whole pod's ask, container by container when there are several."""
    if len(request.containers) == 1:
        return describe_container(request.containers[0])
    return "; ".join(f"{c.name}: {describe_container(c)}" for c in request.containers)


def describe_suggestion(suggestion: Suggestion, request: PodRequest) -> str:
    """``1 GPU with 12 GiB, 30% cores on node-b (GPU 1)`` and what changed."""
    where = f"on {suggestion.node} (GPU {', '.join(map(str, suggestion.gpu_indices))})"
    cores = f", {suggestion.cores}% cores" if suggestion.cores else ""
    slice_ = f"{_plural(suggestion.gpus, 'GPU')} with {format_mib(suggestion.memory_mib)}{cores}"
    if suggestion.change == "fewer_gpus":
        asked = request.containers[0].gpus
        return f"{_plural(suggestion.gpus, 'GPU')} instead of {asked} {where}"
    if suggestion.change == "other_type":
        return f"without the GPU type filter {where[:-1]}, {suggestion.gpu_model})"
    return f"{slice_} {where}"


@dataclass(frozen=True)
class WhyNot:
    """A decision in words: a headline, one line per node that cannot take it, suggestions."""

    fits: bool
    headline: str
    nodes: list[str] = field(default_factory=list)
    suggestions: list[str] = field(default_factory=list)

    def suggestion_line(self) -> str:
        return "would fit now: " + "; or ".join(self.suggestions) if self.suggestions else ""

    def one_line(self) -> str:
        """The headline and the first suggestion: for a table cell or a status line."""
        if self.suggestions:
            return f"{self.headline}; would fit now: {self.suggestions[0]}"
        return self.headline

    def text(self) -> str:
        """Every line, ending without a newline (callers add their own)."""
        lines = [self.headline, *(f"  {line}" for line in self.nodes)]
        if self.suggestions:
            lines.append(self.suggestion_line())
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text()


def explain(decision: Decision, request: PodRequest) -> WhyNot:
    """The words for a decision made for ``request`` (explain mode gives every node)."""
    if decision.fits:
        return WhyNot(fits=True, headline=f"fits on {decision.node}")
    rejected = {name: v for name, v in sorted(decision.nodes.items()) if not v.fits}
    lines = [f"{name}: {node_line(v, request, decision.quota)}" for name, v in rejected.items()]
    suggestions = [describe_suggestion(s, request) for s in decision.suggestions]
    return WhyNot(
        fits=False,
        headline="does not fit: " + headline(request, decision),
        nodes=lines,
        suggestions=suggestions,
    )


def headline(request: PodRequest, decision: Decision) -> str:
    """The cause across the cluster: more than any GPU holds, more GPUs than any node has,
    or only used up now."""
    if not decision.nodes:
        return "the cluster has no node with vslice GPUs"
    rooms = [v.room for v in decision.nodes.values() if v.room is not None]
    if rooms and all(room.usable == 0 for room in rooms):
        if _filtered(request):
            return "no GPU in the cluster matches the GPU type/UUID filters"
        return "no GPU in the cluster is usable (all unhealthy or cordoned)"
    largest = max((room.largest_mib for room in rooms), default=0)
    most_gpus = max((room.usable for room in rooms), default=0)
    for container in request.containers:
        memory = container.memory_mib
        if rooms and memory is not None and memory > largest:
            asked, have = _pair(memory, largest)
            gpu = "matching GPU" if _filtered(request) else "GPU"
            return f"asks {asked} per GPU; the largest {gpu} here has {have}"
        if rooms and container.gpus > most_gpus:
            return (
                f"asks {_plural(container.gpus, 'GPU')} on one node; "
                f"the most any node has is {most_gpus}"
            )
    over = _quota_over(decision)
    if over:
        return "; and ".join(over)
    return f"asks {describe_request(request)}; no node has that free now"


def _amounts(unit: str, asked: int, other: int) -> tuple[str, str]:
    """Two amounts of one quota dimension: ``40 GiB``, ``60%``, ``3``."""
    if unit == _MEMORY:
        return _pair(asked, other)
    sign = "%" if unit == _CORES else ""
    return f"{asked}{sign}", f"{other}{sign}"


_MEMORY, _CORES, _SLICES = "of GPU memory", "cores", "GPU slice"


def _asked(unit: str, asked: int, text: str) -> str:
    """``10 GiB of GPU memory``, ``30% cores``, ``2 GPU slices`` (``text``: the amount as
    :func:`_amounts` wrote it beside the one it is compared with)."""
    if unit == _SLICES:
        return _plural(asked, unit)
    return f"{text} {unit}"


def _quota_over_on(quota: QuotaCheck, charge: QuotaUsage) -> str:
    """The amounts of the dimensions the pod goes past: ``10 GiB of GPU memory``."""
    return " and ".join(
        _asked(unit, asked, _amounts(unit, asked, 0)[0])
        for unit, asked, in_use, limit in _dimensions(quota, charge)
        if limit is not None and asked > limit - in_use
    )


def _dimensions(
    quota: QuotaCheck, charge: QuotaUsage
) -> tuple[tuple[str, int, int, int | None], ...]:
    """(unit, asked, in use, limit) per dimension, in the order a quota lists them."""
    limits, used = quota.limits, quota.used
    return (
        (_MEMORY, charge.memory_mib, used.memory_mib, limits.memory_mib),
        (_CORES, charge.cores, used.cores, limits.cores),
        (_SLICES, charge.gpus, used.gpus, limits.gpus),
    )


def _quota_words(quota: QuotaCheck, charge: QuotaUsage) -> list[str]:
    """Per dimension the pod goes past: the request against the whole quota when it alone
    is larger, else against what is left of it, with what is in use."""
    whose = f"the quota of namespace {quota.namespace}"
    found = []
    for unit, asked, in_use, limit in _dimensions(quota, charge):
        if limit is None or asked <= limit - in_use:
            continue
        if asked > limit:
            ask_text, limit_text = _amounts(unit, asked, limit)
            busy = _amounts(unit, in_use, limit)[0] if in_use else "nothing"
            found.append(
                f"asks {_asked(unit, asked, ask_text)}, {whose} allows {limit_text} in all "
                f"({busy} in use)"
            )
        else:
            ask_text, left_text = _amounts(unit, asked, max(0, limit - in_use))
            busy, limit_text = _amounts(unit, in_use, limit)
            found.append(
                f"asks {_asked(unit, asked, ask_text)}, {whose} has {left_text} left "
                f"({busy} of {limit_text} in use)"
            )
    return found


def _quota_over(decision: Decision) -> list[str]:
    """The quota's words, for the node where the pod costs least (percent requests cost more
    on larger GPUs); empty when no node was refused for the quota alone."""
    charges = [v.quota_charge for v in decision.nodes.values() if v.quota_charge is not None]
    if decision.quota is None or not charges:
        return []
    least = min(charges, key=lambda c: (c.memory_mib, c.cores, c.gpus))
    return _quota_words(decision.quota, least)


def _filtered(request: PodRequest) -> bool:
    return bool(
        request.gpu_types
        or request.gpu_types_exclude
        or request.gpu_uuids
        or request.gpu_uuids_exclude
    )


def node_line(verdict: NodeVerdict, request: PodRequest, quota: QuotaCheck | None = None) -> str:
    """One node's reasons with their numbers, in the engine's check order (``quota``: the
    decision's, for the numbers of ``quota_exceeded``)."""
    if "quota_exceeded" in verdict.reasons and quota is not None and verdict.quota_charge:
        over = _quota_over_on(quota, verdict.quota_charge)
        if over:
            # The headline has the quota's numbers; a node says what the pod costs there.
            return f"its GPUs have room, the namespace quota does not: asks {over} here (quota)"
    room = verdict.room
    # With one GPU container every rejected GPU is counted once: the rest passed.
    rejected = sum(n for code, n in verdict.reasons.items() if code in GPU_REASONS)
    passing = max(0, (room.gpus if room else 0) - rejected)
    parts = [
        _reason_part(code, verdict.reasons[code], room, request, passing)
        for code in (*REASONS, "node_blocked")
        if code in verdict.reasons
    ]
    return "; ".join(parts) or "rejected"


def _asked_memory(request: PodRequest) -> int | None:
    return max((c.memory_mib for c in request.containers if c.memory_mib), default=None)


def _reason_part(
    code: str, count: int, room: NodeRoom | None, request: PodRequest, passing: int
) -> str:
    times = f", x{count}" if count > 1 else ""
    if room is None:
        return f"{reason_text(code)}" + (f" (x{count})" if count > 1 else "")
    if code == "insufficient_memory":
        asked = _asked_memory(request)
        if asked is not None and asked > room.largest_mib:
            ask_text, have = _pair(asked, room.largest_mib)
            return f"its largest GPU has {have}, asks {ask_text} (memory{times})"
        if room.free_gpu is None:
            return f"no GPU with a free slot has memory left (memory{times})"
        free, total = format_mib(room.free_mib), format_mib(room.free_of_mib)
        return f"the most free is {free} on GPU {room.free_gpu}, of {total} (memory{times})"
    if code == "insufficient_cores":
        asked_cores = max(c.cores for c in request.containers)
        most = room.free_cores
        return f"the most free is {most}% cores on one GPU, asks {asked_cores}% (cores{times})"
    if code == "slots_exhausted":
        return f"every slice slot taken on {count} of {_plural(room.gpus, 'GPU')} (slots)"
    if code == "type_mismatch":
        return f"{count} of {_plural(room.gpus, 'GPU')} not a wanted model (gpu_type)"
    if code == "uuid_mismatch":
        return f"{count} of {_plural(room.gpus, 'GPU')} not a wanted UUID (gpu_uuid)"
    if code == "exclusive_conflict":
        return f"a whole GPU needs an idle one; {_plural(count, 'GPU')} in use (exclusive)"
    if code == "too_few_gpus":
        asked_gpus = max(c.gpus for c in request.containers)
        return f"asks {_plural(asked_gpus, 'GPU')}, {passing} of its {room.gpus} can take it"
    return f"{reason_text(code)}" + (f" (x{count})" if count > 1 else "")


def render_plan(decision: Decision, request: PodRequest, title: str | None = None) -> str:
    """The text of a plan: ``vslice plan``, ``request --dry-run`` and ``print(plan)``;
    ``title`` names the request (default: :func:`describe_request`)."""
    why = explain(decision, request)
    title = title or describe_request(request)
    if not why.fits:
        return f"{title}: {why.text()}"
    lines = [f"{title}: {why.headline}"]
    if decision.allocation is not None:
        for container in decision.allocation.containers:
            for g in container.gpus:
                lines.append(
                    f"  {container.name}: GPU {g.index} {g.uuid}, "
                    f"{format_mib(g.memory_mib)}, {g.cores}% cores"
                )
    width = max((len(name) for name in decision.nodes), default=4)
    for name, verdict in sorted(decision.nodes.items()):
        if verdict.fits:
            score = "" if verdict.score is None else f"  score {verdict.score:.2f}"
            lines.append(f"  {name.ljust(width)}  fits{score}")
        else:
            lines.append(
                f"  {name.ljust(width)}  no    {node_line(verdict, request, decision.quota)}"
            )
    return "\n".join(lines)
