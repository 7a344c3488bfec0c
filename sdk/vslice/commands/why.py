"""``vslice why POD [-n NAMESPACE] [--json]``: one pod's GPU placement, as its user asks it.

- **placed** (it holds a slice): the node and its address, the path (the extender's
  ``vslice.io/allocation`` annotation, or a ResourceClaim of ``gpu.vslice.io``), per container
  the GPU (index, UUID, model) with the memory and cores it holds, and per GPU what is
  allocated there altogether and who else holds a slice of it;
- **pending** (it asks for a slice and has no node): what it asks and why it does not fit now,
  in the words and numbers of ``vslice top``'s PENDING section (:mod:`.waiting`), with every
  node that cannot take it and what would fit now; a pod that would fit now says where;
- **unreadable**: it asks for a slice, but vslice cannot read the request (the reason);
- **unplaced**: it asks for a slice and is bound, but holds no vslice allocation;
- **finished**: a finished pod holds no slice;
- **no-slice**: it asks for no GPU slice, and how to ask for one.

Every answer ends with kube-scheduler's own word when the pod's PodScheduled condition is not
True. POD that names no pod but a Job (``vslice request --job``) is read as the Job's newest
pod. Everything shown is built by :func:`answer` from the pod and one snapshot; ``run`` only
reads the cluster and writes.

Exit status: 0 explained (whatever the state), 1 no such pod or Job or a cluster error,
2 a name that cannot be a pod's.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from vslice_core.annotations import ALLOCATION
from vslice_core.clusterobjects import FINISHED_PHASES, node_name
from vslice_core.clusterobjects import phase as pod_phase
from vslice_core.dra import DRIVER
from vslice_core.errors import one_line
from vslice_core.requests import pod_request, uses_gpus
from vslice_core.resources import DEFAULT_RESOURCE_NAMES
from vslice_core.whynot import WhyNot, describe_request

from vslice import dra, progress
from vslice.commands.options import EXIT_OK, add_connection_arguments, connect, fail
from vslice.commands.waiting import asks, decide, why_waiting
from vslice.errors import ClusterError, InvalidRequest, VsliceError
from vslice.manifests import check_name
from vslice.snapshot import UNRESERVED, ClusterSnapshot, PendingPod, PodAllocation
from vslice.tables import AllocationRow, GpuRow
from vslice.views import gib

State = Literal["placed", "pending", "unreadable", "unplaced", "finished", "no-slice"]
PATH_WORDS: Final = {
    "extender": "extender path (vslice.io/allocation annotation)",
    "dra": "DRA path",
}
HOW_TO_ASK: Final = (
    "to ask for one: limits nvidia.com/gpu: 1 and nvidia.com/gpumem: 10Gi (and "
    "nvidia.com/gpucores), a ResourceClaim of gpu.vslice.io, or `vslice request --memory 10Gi "
    "IMAGE`"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_connection_arguments(parser)
    parser.add_argument("pod", metavar="POD", help="the pod's name (a Job's name: its newest pod)")
    parser.add_argument(
        "-n",
        "--namespace",
        help="the pod's namespace (default: $VSLICE_NAMESPACE, then the kubeconfig's)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")


# --- pure: what is said ------------------------------------------------------------------


@dataclass(frozen=True)
class SchedulerWord:
    """The pod's PodScheduled condition when it is not True: kube-scheduler's own word."""

    reason: str
    message: str

    def line(self) -> str:
        said = ": ".join(one_line(part) for part in (self.reason, self.message) if part)
        return f"kube-scheduler: {said or 'not scheduled (no reason given)'}"


@dataclass(frozen=True)
class Answer:
    """Where one pod's slice is, or why it has none (see the module docstring's states)."""

    namespace: str
    pod: str
    phase: str
    state: State
    node: str = ""
    address: str = ""
    path: str = ""
    """``extender`` or ``dra`` (placed and pending pods)."""
    claims: tuple[str, ...] = ()
    """``namespace/name`` of the ResourceClaims it holds its slice through (DRA path)."""
    shared_with: tuple[str, ...] = ()
    """Other pods sharing its claim (DRA path)."""
    asks: str = ""
    grants: tuple[AllocationRow, ...] = ()
    gpus: tuple[GpuRow, ...] = ()
    """The GPUs it holds slices of, with what is allocated on each altogether."""
    why: WhyNot | None = None
    """Pending: the engine's decision in words."""
    would_fit_on: str = ""
    """Pending and fitting now: ``node-a (GPU 0)``."""
    problem: str = ""
    notes: tuple[str, ...] = ()
    scheduler: SchedulerWord | None = None
    job: str = ""
    """The Job POD named, when it named one (this is its newest pod)."""

    @property
    def holder(self) -> str:
        return f"{self.namespace}/{self.pod}"


def scheduler_word(pod: Mapping[str, Any]) -> SchedulerWord | None:
    """kube-scheduler's last word on the pod, when it has not scheduled it."""
    word = progress.scheduler_word(pod)
    return SchedulerWord(*word) if word else None


def _pod_key(pod: Mapping[str, Any]) -> tuple[str, str]:
    metadata = pod.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    return str(metadata.get("namespace") or "default"), str(metadata.get("name") or "")


def _held(snapshot: ClusterSnapshot, holder: str) -> list[PodAllocation]:
    """The allocations the pod holds: its own, or a claim it shares with the pod listed (a
    claim no pod reserves is named after itself, never after a pod)."""
    return [
        p
        for p in snapshot.pods
        if p.phase != UNRESERVED and (p.holder == holder or holder in p.shared_with)
    ]


def _pending(snapshot: ClusterSnapshot, holder: str) -> PendingPod | None:
    return next((p for p in snapshot.pending if p.holder == holder), None)


def _problem(snapshot: ClusterSnapshot, holder: str) -> str:
    """What the snapshot could not read about the pod (empty when nothing)."""
    prefixes = (f"pod {holder}: ", f"pod {holder} ")
    return next((p.split(" ", 2)[2] for p in snapshot.problems if p.startswith(prefixes)), "")


def _asks(pod: Mapping[str, Any]) -> str:
    try:
        request = pod_request(pod)
    except InvalidRequest:
        return ""
    return describe_request(request) if request.containers else ""


def _placed(base: Answer, snapshot: ClusterSnapshot, held: Sequence[PodAllocation]) -> Answer:
    keys = {(p.name, p.path) for p in held}
    grants = tuple(
        row for row in snapshot.allocations(base.namespace) if (row.pod, row.path) in keys
    )
    node = held[0].allocation.node
    uuids = {(row.node, row.gpu_uuid) for row in grants}
    gpus = tuple(row for row in snapshot.gpus() if (row.node, row.uuid) in uuids)
    return dataclasses.replace(
        base,
        state="placed",
        node=node,
        address=snapshot.addresses.get(node, ""),
        path=held[0].path,
        claims=tuple(p.claim for p in held if p.claim),
        shared_with=tuple(
            other for p in held for other in (p.holder, *p.shared_with) if other != base.holder
        ),
        grants=grants,
        gpus=gpus,
    )


def _waiting(base: Answer, snapshot: ClusterSnapshot, pending: PendingPod) -> Answer:
    decision = decide(snapshot, pending)
    where = ""
    if decision.fits and decision.allocation is not None:
        indices = sorted({g.index for c in decision.allocation.containers for g in c.gpus})
        where = f"{decision.node} (GPU {', '.join(map(str, indices))})"
    notes = dra.plan_lines(pending.notes) if pending.path == "dra" else []
    return dataclasses.replace(
        base,
        state="pending",
        path=pending.path,
        asks=asks(pending),
        why=why_waiting(snapshot, pending, decision),
        would_fit_on=where,
        notes=tuple(notes),
    )


def answer(pod: Mapping[str, Any], snapshot: ClusterSnapshot, *, job: str = "") -> Answer:
    """Where ``pod`` (as the API sent it) holds its slice, or why it holds none, read against
    ``snapshot`` (a reading of the whole cluster taken with it)."""
    namespace, name = _pod_key(pod)
    holder = f"{namespace}/{name}"
    base = Answer(
        namespace=namespace,
        pod=name,
        phase=pod_phase(pod) or "Unknown",
        state="no-slice",
        node=node_name(pod),
        address=snapshot.addresses.get(node_name(pod), ""),
        scheduler=scheduler_word(pod),
        job=job,
    )
    held = _held(snapshot, holder)
    if held:
        return _placed(base, snapshot, held)
    pending = _pending(snapshot, holder)
    if pending is not None:
        return _waiting(base, snapshot, pending)
    problem = _problem(snapshot, holder)
    asks_gpus = uses_gpus(pod)
    spec = pod.get("spec")
    claims = bool(isinstance(spec, Mapping) and spec.get("resourceClaims"))
    if base.phase in FINISHED_PHASES and (asks_gpus or claims or ALLOCATION in _annotations(pod)):
        return dataclasses.replace(base, state="finished", asks=_asks(pod))
    if problem and (asks_gpus or claims):
        return dataclasses.replace(base, state="unreadable", problem=problem, asks=_asks(pod))
    if asks_gpus:
        return dataclasses.replace(base, state="unplaced", asks=_asks(pod))
    if claims:
        # Claims neither allocated by nor waiting for gpu.vslice.io: another driver's, or ones
        # the snapshot could not read (it says why), or DRA not readable at all.
        return dataclasses.replace(base, notes=tuple(_claim_problems(pod, snapshot)))
    return base


def _claim_problems(pod: Mapping[str, Any], snapshot: ClusterSnapshot) -> list[str]:
    """The snapshot's problems about the claims ``pod`` names, or about the DRA path."""
    namespace, _ = _pod_key(pod)
    spec = pod.get("spec")
    try:
        names = {ref.name for ref in dra.claim_refs(spec if isinstance(spec, Mapping) else {})}
    except InvalidRequest as exc:
        return [str(exc)]
    names |= set(dra.generated_claims(pod).values())
    labels = tuple(f"{namespace}/{name}" for name in names)
    return [
        problem
        for problem in snapshot.problems
        if problem.startswith("DRA ")
        or (not problem.startswith("pod ") and any(label in problem for label in labels))
    ]


def _annotations(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    metadata = pod.get("metadata")
    found = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    return found if isinstance(found, Mapping) else {}


def _where(a: Answer) -> str:
    """``Running on node node-a (10.0.0.1)`` / ``Pending, no node yet``."""
    if not a.node:
        return f"{a.phase}, no node yet"
    address = f" ({a.address})" if a.address else ""
    return f"{a.phase} on node {a.node}{address}"


def _grant_line(row: AllocationRow) -> str:
    return (
        f"  {row.container}: GPU {row.gpu_index} ({row.gpu_uuid}, {row.gpu_model}): "
        f"memory {gib(row.memory_mib)} GiB, cores {row.cores}%"
    )


def _gpu_line(row: GpuRow, holder: str) -> str:
    others = [pod for pod in row.pods if pod != holder]
    shared = f"also held by {', '.join(others)}" if others else "no other pod holds a slice of it"
    return (
        f"  GPU {row.index} of {row.node} altogether: memory {gib(row.memory_used_mib)}/"
        f"{gib(row.memory_mib)} GiB, cores {row.cores_used}/{row.cores}%, slots "
        f"{row.slots_used}/{row.slots} allocated; {shared}"
    )


def _placed_lines(a: Answer) -> list[str]:
    path = PATH_WORDS.get(a.path, a.path)
    if a.claims:
        path += f", ResourceClaim {', '.join(a.claims)}"
    if a.shared_with:
        path += f", shared with {', '.join(a.shared_with)}"
    lines = [f"pod {a.holder}: {_where(a)}, {path}"]
    lines += [_grant_line(row) for row in a.grants]
    lines += [_gpu_line(row, a.holder) for row in a.gpus]
    return lines


def _pending_lines(a: Answer) -> list[str]:
    lines = [f"pod {a.holder}: {_where(a)}, asks {a.asks}"]
    if a.why is not None and not a.why.fits:
        lines += a.why.text().splitlines()
    else:
        lines.append(
            f"would fit now on {a.would_fit_on}: the GPUs have room for it, so it waits for "
            "something else (kube-scheduler's word below, or its turn in the queue)"
        )
    lines += a.notes
    return lines


def lines(a: Answer) -> list[str]:
    """The text of ``vslice why`` (one string per line)."""
    if a.state == "placed":
        found = _placed_lines(a)
    elif a.state == "pending":
        found = _pending_lines(a)
    elif a.state == "finished":
        found = [
            f"pod {a.holder}: {_where(a)}; a finished pod holds no GPU slice (what it held "
            "is free again)"
        ]
    elif a.state == "unreadable":
        found = [
            f"pod {a.holder}: {_where(a)}; vslice cannot read the GPU slice it asks for "
            f"({one_line(a.problem)})"
        ]
    elif a.state == "unplaced":
        asked = f", asks {a.asks}" if a.asks else ""
        found = [
            f"pod {a.holder}: {_where(a)}{asked}, but holds no vslice slice: it carries no "
            f"{ALLOCATION} annotation (it was bound without the vslice extender, or the bind "
            "has not finished), so `vslice top` does not count it"
        ]
    else:
        *first, last = DEFAULT_RESOURCE_NAMES.managed()
        names = f"{', '.join(first)} or {last}"
        found = [
            f"pod {a.holder}: {_where(a)}; it asks for no GPU slice (no container has a "
            f"limit of {names}, and no ResourceClaim of {DRIVER} is allocated to it or "
            "waiting for it)",
            HOW_TO_ASK,
        ]
        found += [f"note: {one_line(note)}" for note in a.notes]
    if a.job:
        found.insert(0, f"Job {a.namespace}/{a.job}: its newest pod is {a.holder}")
    if a.scheduler is not None:
        found.append(a.scheduler.line())
    elif a.state == "pending":
        found.append("kube-scheduler: no word on it yet (the pod has no PodScheduled condition)")
    return found


def render(a: Answer) -> str:
    """The whole text (without a final newline)."""
    return "\n".join(lines(a))


def record(a: Answer) -> dict[str, Any]:
    """The answer as one JSON object."""
    why = a.why
    return {
        "namespace": a.namespace,
        "pod": a.pod,
        "job": a.job or None,
        "phase": a.phase,
        "state": a.state,
        "node": a.node or None,
        "address": a.address or None,
        "path": a.path or None,
        "claims": list(a.claims),
        "shared_with": list(a.shared_with),
        "asks": a.asks or None,
        "grants": [dataclasses.asdict(row) for row in a.grants],
        "gpus": [dataclasses.asdict(row) for row in a.gpus],
        "fits": None if why is None else why.fits,
        "would_fit_on": a.would_fit_on or None,
        "why_not": None if why is None or why.fits else why.text(),
        "suggestions": [] if why is None else list(why.suggestions),
        "problem": a.problem or None,
        "notes": list(a.notes),
        "scheduler": None if a.scheduler is None else dataclasses.asdict(a.scheduler),
    }


def not_found(name: str, namespace: str) -> str:
    return (
        f"no pod named {name!r} in namespace {namespace!r}, nor a pod of a Job of that name; "
        f"`kubectl get pods -n {namespace}` lists the pods there, and -n NAMESPACE looks in "
        "another namespace"
    )


# --- I/O ---------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    try:
        check_name(args.pod, "POD")
        with connect(args, args.namespace) as client:
            job = ""
            try:
                pod = client.workload(args.pod).pod()
            except ClusterError as exc:
                if exc.code != 404:
                    raise
                pod = client.workload(args.pod, kind="Job").pod()
                job = args.pod
            if pod is None:
                raise ClusterError(not_found(args.pod, client.namespace), code=404)
            found = answer(pod, client.snapshot(), job=job)
    except VsliceError as exc:
        return fail("why", exc)
    print(json.dumps(record(found), indent=2) if args.json else render(found))
    return EXIT_OK
