"""``vslice top``: per node and per GPU, slots, memory (GiB) and cores allocated of the total,
the node's address and the pods holding each GPU; then the pods waiting for a slice with the
reason each one waits, and a footer saying what the totals cover (the cluster, or the nodes
chosen with ``--node``). A pod whose slices are idle (its node's monitor marked it; docs/idle.md)
is shown ``(idle)``; ``--idle [DURATION]`` lists, instead, the slices idle longer than that,
with how long and when each will be given back. ``--watch`` redraws until Ctrl-C.

Everything shown is built by the pure functions below from one snapshot; ``run`` only reads
the cluster and writes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from vslice_core.idle import format_duration, parse_duration
from vslice_core.queueing import QueueState

from vslice.commands.options import EXIT_OK, add_connection_arguments, connect, fail
from vslice.commands.waiting import asks, why_waiting
from vslice.errors import InvalidRequest, VsliceError
from vslice.snapshot import ClusterSnapshot
from vslice.tables import GpuTable
from vslice.views import (
    footer,
    gib,
    gpu_rows_text,
    memory_cell,
    text_table,
)

DEFAULT_WATCH_S = 2.0
CLEAR_SCREEN = "\x1b[H\x1b[2J"


def watch_seconds(value: str) -> float:
    """``--watch``'s interval: a number of seconds > 0."""
    try:
        seconds = float(value)
    except ValueError:
        seconds = float("nan")
    if not seconds > 0 or seconds == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {value!r}")
    return seconds


def idle_duration(value: str) -> float:
    """``--idle``'s threshold: a duration such as ``2h`` (empty: every idle slice)."""
    if not value:
        return 0.0
    try:
        return parse_duration(value, field="--idle")
    except InvalidRequest as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--idle: ")) from exc


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_connection_arguments(parser)
    parser.add_argument("--node", action="append", help="only this node (repeatable)")
    parser.add_argument("--json", action="store_true", help="one JSON object per GPU, as a list")
    parser.add_argument(
        "--watch",
        nargs="?",
        const=DEFAULT_WATCH_S,
        type=watch_seconds,
        metavar="SECONDS",
        help=f"redraw every SECONDS (default {DEFAULT_WATCH_S:g}) until Ctrl-C",
    )
    parser.add_argument(
        "--idle",
        nargs="?",
        const="",
        type=idle_duration,
        metavar="DURATION",
        help="list the slices idle longer than DURATION (e.g. 30m, 4h; default: every slice "
        "its node counts idle), how long each has been and when it will be given back",
    )


# --- pure: what is shown ----------------------------------------------------------------


@dataclass(frozen=True)
class PendingLine:
    """A pod waiting for a slice: who, what it asks, and why it does not fit now."""

    pod: str
    asks: str
    why: str


def pending_lines(snapshot: ClusterSnapshot) -> list[PendingLine]:
    """One line per waiting pod, worded as ``vslice why`` words it (:mod:`.waiting`)."""
    return [
        PendingLine(
            pod=pending.holder,
            asks=asks(pending),
            why=why_waiting(snapshot, pending).one_line(),
        )
        for pending in snapshot.pending
    ]


@dataclass(frozen=True)
class IdleLine:
    """A pod whose slices launched no kernel for ``idle_s`` (docs/idle.md)."""

    pod: str
    node: str
    gpus: str
    memory_mib: int
    idle_s: float
    reclaim_at: datetime | None

    def record(self) -> dict[str, object]:
        due = self.reclaim_at.isoformat().replace("+00:00", "Z") if self.reclaim_at else None
        return {
            "pod": self.pod,
            "node": self.node,
            "gpus": self.gpus,
            "memory_mib": self.memory_mib,
            "idle_seconds": round(self.idle_s),
            "reclaim_at": due,
        }


def idle_lines(
    snapshot: ClusterSnapshot, nodes: Sequence[str] | None, longer_than_s: float, now: datetime
) -> list[IdleLine]:
    """The live pods idle at least ``longer_than_s``, longest idle first."""
    lines = []
    for pod in snapshot.pods:
        mark = snapshot.idle.get(pod.holder)
        if mark is None or (nodes and pod.allocation.node not in nodes):
            continue
        if mark.idle_s(now) < longer_than_s:
            continue
        grants = [grant for container in pod.allocation.containers for grant in container.gpus]
        lines.append(
            IdleLine(
                pod=pod.holder,
                node=pod.allocation.node,
                gpus=",".join(sorted({str(grant.index) for grant in grants})),
                memory_mib=sum(grant.memory_mib for grant in grants),
                idle_s=mark.idle_s(now),
                reclaim_at=mark.reclaim_at,
            )
        )
    return sorted(lines, key=lambda line: (-line.idle_s, line.pod))


def idle_text(lines: Sequence[IdleLine], longer_than_s: float) -> str:
    """The text of ``vslice top --idle``."""
    held = gib(sum(line.memory_mib for line in lines))
    than = f"longer than {format_duration(longer_than_s)}" if longer_than_s else "now"
    if not lines:
        return f"No slice is idle {than}."
    rows = [
        [
            line.pod,
            line.node,
            line.gpus,
            gib(line.memory_mib),
            format_duration(line.idle_s),
            f"{line.reclaim_at:%Y-%m-%d %H:%M} UTC" if line.reclaim_at else "-",
        ]
        for line in lines
    ]
    table = text_table(["POD", "NODE", "GPU", "MEMORY(GiB)", "IDLE", "RECLAIMED AT"], rows)
    end = (
        f"{len(lines)} pod{'' if len(lines) == 1 else 's'} idle {than} hold {held} GiB of GPU "
        "memory; RECLAIMED AT is set where the namespace gives idle slices back "
        "(docs/idle.md)"
    )
    return table + "\n" + "-" * min(len(end), 100) + "\n" + end


def select_nodes(gpus: GpuTable, nodes: Sequence[str] | None) -> GpuTable:
    """Only the GPUs of ``nodes`` (all when None); a node without vslice GPUs is an error
    that lists the nodes that have them."""
    if not nodes:
        return gpus
    known = gpus.nodes()
    for node in nodes:
        if node not in known:
            raise InvalidRequest(
                f"--node {node!r} has no vslice GPUs; nodes with vslice GPUs: "
                f"{', '.join(known) or 'none'}",
                field="node",
                value=node,
            )
    return GpuTable(row for row in gpus if row.node in nodes)


def queued_text(queued: Sequence[QueueState]) -> str:
    """The Jobs waiting in Kueue: their queue, place and Kueue's reason (docs/kueue.md)."""
    rows = [
        [
            f"{q.namespace}/{q.job}",
            q.queue,
            f"{q.position}/{q.waiting}" if q.position else "-",
            q.reason or ("not admissible" if q.state == "Inadmissible" else "waiting"),
        ]
        for q in queued
    ]
    return f"QUEUED ({len(queued)} job{'s' if len(queued) != 1 else ''} waiting in Kueue)\n" + (
        text_table(["JOB", "QUEUE", "PLACE", "WHY NOT ADMITTED (KUEUE)"], rows)
    )


def pending_text(pending: Sequence[PendingLine]) -> str:
    rows = [[p.pod, p.asks, p.why] for p in pending]
    return f"PENDING ({len(pending)} waiting for a slice)\n" + text_table(
        ["POD", "ASKS", "WHY NOT"], rows
    )


def render(
    gpus: GpuTable,
    pending: Sequence[PendingLine] = (),
    nodes: Sequence[str] | None = None,
    queued: Sequence[QueueState] = (),
) -> str:
    """The whole text of ``vslice top`` (without a final newline)."""
    if not len(gpus):
        table = "No node advertises vslice GPUs" + (" among the chosen nodes." if nodes else ".")
    else:
        table = gpu_rows_text(gpus)
    parts = [table]
    if pending:
        parts.append("\n" + pending_text(pending))
    if queued:
        parts.append("\n" + queued_text(queued))
    end = footer(gpus, nodes, len(pending))
    parts.append("-" * min(len(end), 100) + "\n" + end)
    return "\n".join(parts)


def warnings(snapshot: ClusterSnapshot, gpus: GpuTable) -> list[str]:
    """Unreadable annotations and over-booked GPUs, with their numbers."""
    found = [f"warning: {problem}" for problem in snapshot.problems]
    found += [
        f"warning: GPU {row.index} of {row.node} is over-booked (memory "
        f"{memory_cell(row.memory_used_mib, row.memory_mib)} GiB, cores "
        f"{row.cores_used}/{row.cores}, slots {row.slots_used}/{row.slots}): an allocation "
        f"vslice did not make is counted there; nothing more is placed on it until that pod "
        f"is gone (pods: {', '.join(row.pods) or '-'})"
        for row in gpus
        if row.overbooked
    ]
    return found


def frame(
    snapshot: ClusterSnapshot,
    nodes: Sequence[str] | None,
    as_json: bool,
    idle: float | None = None,
    now: datetime | None = None,
) -> str:
    """What one look at the cluster prints on stdout (``idle``: the ``--idle`` list)."""
    gpus = select_nodes(snapshot.gpus(), nodes)
    if idle is not None:
        lines = idle_lines(snapshot, nodes, idle, now or datetime.now(UTC))
        if as_json:
            return json.dumps([line.record() for line in lines], indent=2)
        return idle_text(lines, idle)
    if as_json:
        return json.dumps(gpus.records(), indent=2)
    return render(gpus, pending_lines(snapshot), nodes, snapshot.queued)


# --- I/O ---------------------------------------------------------------------------------


def _show(snapshot: ClusterSnapshot, args: argparse.Namespace, clear: bool) -> None:
    text = frame(snapshot, args.node, args.json, args.idle)
    if clear:
        stamp = time.strftime("%H:%M:%S")
        sys.stdout.write(f"{CLEAR_SCREEN}every {args.watch:g}s, {stamp} (Ctrl-C stops)\n\n")
    sys.stdout.write(text + "\n")
    sys.stdout.flush()
    for line in warnings(snapshot, select_nodes(snapshot.gpus(), args.node)):
        print(line, file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    clear = args.watch is not None and sys.stdout.isatty()
    try:
        with connect(args) as client:
            _show(client.snapshot(), args, clear)
            while args.watch is not None:
                time.sleep(args.watch)
                if not clear:
                    sys.stdout.write("\n")
                _show(client.snapshot(), args, clear)
    except KeyboardInterrupt:
        return EXIT_OK
    except VsliceError as exc:
        return fail("top", exc)
    return EXIT_OK
