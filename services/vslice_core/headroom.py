"""The numbers behind a "does not fit": what each node could still give, and which changed
request would fit now.

Reason codes say *why* GPUs were rejected; users also need *how far off* they are ("the most
free is 12 GiB on GPU 1, of 80 GiB") and what would work instead. Both are computed here on
the engine's own node states, and every suggestion is checked by running the engine
(:func:`vslice_core.placement.evaluate`) on the changed request, so a suggestion never names
a slice the extender would refuse.

Suggestions are made for pods with one GPU container (what the SDK, ``vslice request`` and
most notebooks submit); for several containers the changes interact and none is offered.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from vslice_core.model import NodeRoom, PodRequest, Suggestion
from vslice_core.placement import (
    Ask,
    GpuState,
    NodeState,
    Outcome,
    compile_request,
    evaluate,
    types_match,
)

# What the namespace quota still allows on a node, as evaluate() takes it.
Room = tuple[int, int, int] | None


def usable(gpu: GpuState, ask: Ask) -> bool:
    """The GPU may take this request at all: healthy, not cordoned, a wanted model and UUID."""
    if not gpu.healthy or gpu.cordoned:
        return False
    if (ask.types or ask.types_exclude) and not types_match(ask, (gpu.model_key,)):
        return False
    if ask.uuids is not None and gpu.uuid not in ask.uuids:
        return False
    return gpu.uuid not in ask.uuids_exclude


def node_room(node: NodeState, ask: Ask) -> NodeRoom:
    """What the node could still give this request; O(GPUs of the node)."""
    candidates = [gpu for gpu in node.gpus if usable(gpu, ask)]
    open_gpus = [gpu for gpu in candidates if gpu.used_slots < gpu.slots]
    best = max(open_gpus, key=lambda g: (g.memory - g.used_memory, -g.index), default=None)
    return NodeRoom(
        gpus=len(node.gpus),
        usable=len(candidates),
        open=len(open_gpus),
        largest_mib=max((gpu.memory for gpu in candidates), default=0),
        free_mib=max(0, best.memory - best.used_memory) if best else 0,
        free_gpu=best.index if best else None,
        free_of_mib=best.memory if best else 0,
        free_cores=max((max(0, g.cores - g.used_cores) for g in open_gpus), default=0),
    )


@dataclass(frozen=True, slots=True)
class Candidate:
    node: NodeState
    room: Room


def suggest(
    request: PodRequest, nodes: Iterable[Candidate], order: Callable[[str], int]
) -> list[Suggestion]:
    """Changed requests that fit now: the largest smaller slice, fewer GPUs, another model.

    ``order`` ranks node names as the node policy walks them (lower first), so a suggestion
    names the node the extender would pick for the changed request.
    """
    if len(request.containers) != 1:
        return []
    ranked = sorted(nodes, key=lambda c: order(c.node.name))
    found = [
        _smaller(request, ranked),
        _fewer_gpus(request, ranked),
        _other_type(request, ranked),
    ]
    return [suggestion for suggestion in found if suggestion is not None]


def _changed(request: PodRequest, **fields: object) -> PodRequest:
    container = request.containers[0].model_copy(update=fields)
    return request.model_copy(update={"containers": [container]})


def _first_fit(request: PodRequest, ranked: list[Candidate]) -> tuple[Candidate, Outcome] | None:
    ask = compile_request(request)
    for candidate in ranked:
        outcome = evaluate(candidate.node, ask, candidate.room)
        if outcome.fits:
            return candidate, outcome
    return None


def _granted(outcome: Outcome) -> list[GpuState]:
    return [gpu for gpu, _ in outcome.grants[0]]


def _quota_cap(room: Room, gpus: int) -> tuple[int, int] | None:
    """The most MiB and cores per GPU that the namespace quota leaves for ``gpus`` GPUs
    (None: not even one slice each)."""
    if room is None:
        return (1 << 62, 1 << 62)
    memory, cores, slices = room
    if slices < gpus:
        return None
    return memory // gpus, cores // gpus


def _smaller(request: PodRequest, ranked: list[Candidate]) -> Suggestion | None:
    """The largest memory (then cores) per GPU that the asked number of GPUs can get now,
    within what the namespace quota leaves: a larger one would only fail on the quota."""
    want = request.containers[0]
    ask = compile_request(request)
    best: tuple[int, int, Candidate, Outcome] | None = None
    for candidate in ranked:
        gpus = [g for g in candidate.node.gpus if usable(g, ask) and g.used_slots < g.slots]
        if ask.gpu_policy == "mutex":
            gpus = [g for g in gpus if g.idle]
        gpus.sort(key=lambda g: (g.memory - g.used_memory, g.cores - g.used_cores), reverse=True)
        chosen = gpus[: want.gpus]
        if len(chosen) < want.gpus:
            continue
        cap = _quota_cap(candidate.room, want.gpus)
        if cap is None:
            continue
        memory = min([cap[0], *(g.memory - g.used_memory for g in chosen)])
        cores = min([want.cores, cap[1], *(g.cores - g.used_cores for g in chosen)])
        if memory <= 0 or (want.cores > 0 and cores <= 0):
            continue
        if best is not None and (memory, cores) <= best[:2]:
            continue
        outcome = evaluate(
            candidate.node,
            compile_request(_changed(request, memory_mib=memory, memory_percent=None, cores=cores)),
            candidate.room,
        )
        if outcome.fits:
            best = (memory, cores, candidate, outcome)
    if best is None:
        return None
    memory, cores, candidate, outcome = best
    return Suggestion(
        change="smaller",
        node=candidate.node.name,
        gpus=want.gpus,
        memory_mib=memory,
        cores=cores,
        gpu_indices=[g.index for g in _granted(outcome)],
    )


def _fewer_gpus(request: PodRequest, ranked: list[Candidate]) -> Suggestion | None:
    """The most GPUs (fewer than asked) that fit now with the same slice on each."""
    want = request.containers[0]
    for count in range(want.gpus - 1, 0, -1):
        found = _first_fit(_changed(request, gpus=count), ranked)
        if found is not None:
            candidate, outcome = found
            grants = outcome.grants[0]
            return Suggestion(
                change="fewer_gpus",
                node=candidate.node.name,
                gpus=count,
                memory_mib=min(mib for _, mib in grants),
                memory_percent=want.memory_percent,
                cores=want.cores,
                gpu_indices=[gpu.index for gpu, _ in grants],
            )
    return None


def _other_type(request: PodRequest, ranked: list[Candidate]) -> Suggestion | None:
    """Where the same slice fits now if the GPU model filters are dropped."""
    if not (request.gpu_types or request.gpu_types_exclude):
        return None
    free = request.model_copy(update={"gpu_types": [], "gpu_types_exclude": []})
    found = _first_fit(free, ranked)
    if found is None:
        return None
    candidate, outcome = found
    grants = outcome.grants[0]
    return Suggestion(
        change="other_type",
        node=candidate.node.name,
        gpus=len(grants),
        memory_mib=min(mib for _, mib in grants),
        memory_percent=request.containers[0].memory_percent,
        cores=request.containers[0].cores,
        gpu_indices=[gpu.index for gpu, _ in grants],
        gpu_model=grants[0][0].model,
    )
