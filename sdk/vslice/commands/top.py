"""``vslice top``: per node and per GPU, slots, memory and cores allocated of the total,
the pods holding each GPU, and the cluster's totals (read from the live cluster)."""

from __future__ import annotations

import argparse
import json
import sys

from vslice.commands.options import EXIT_OK, add_connection_arguments, connect, fail
from vslice.errors import VsliceError
from vslice.tables import GpuTable


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_connection_arguments(parser)
    parser.add_argument("--node", action="append", help="only this node (repeatable)")
    parser.add_argument("--json", action="store_true", help="one JSON object per GPU, as a list")


def run(args: argparse.Namespace) -> int:
    try:
        with connect(args) as client:
            snapshot = client.snapshot()
    except VsliceError as exc:
        return fail("top", exc)
    gpus = snapshot.gpus()
    if args.node:
        gpus = GpuTable(row for row in gpus if row.node in args.node)
    print(json.dumps(gpus.records(), indent=2) if args.json else str(gpus))
    for problem in snapshot.problems:
        print(f"warning: {problem}", file=sys.stderr)
    for row in gpus:
        if row.overbooked:
            print(
                f"warning: GPU {row.index} of {row.node} is over-booked (memory "
                f"{row.memory_used_mib}/{row.memory_mib} MiB, cores {row.cores_used}/{row.cores}, "
                f"slots {row.slots_used}/{row.slots}): an allocation vslice did not make is "
                f"counted there; nothing more is placed on it until that pod is gone "
                f"(pods: {', '.join(row.pods) or '-'})",
                file=sys.stderr,
            )
    return EXIT_OK
