"""``vslice allocations``: who holds which slice of which GPU (live pods only): per pod,
container and GPU the memory (GiB) and cores (percent of the GPU) it holds, how it got it
(PATH: ``ext`` the extender's annotation, ``dra`` a ResourceClaim), and a footer with the totals
and what they cover (one namespace or all)."""

from __future__ import annotations

import argparse
import json

from vslice.commands.options import EXIT_OK, add_connection_arguments, connect, fail
from vslice.errors import VsliceError
from vslice.tables import AllocationRow, AllocationTable
from vslice.views import gib, text_table

HEADERS = [
    "NAMESPACE",
    "POD",
    "CONTAINER",
    "NODE",
    "PATH",
    "GPU",
    "MODEL",
    "MEMORY(GiB)",
    "CORES(%)",
    "PHASE",
]

PATH_WORDS = {"extender": "ext", "dra": "dra"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_connection_arguments(parser)
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", help="only this namespace")
    scope.add_argument(
        "-A", "--all-namespaces", action="store_true", help="every namespace (the default)"
    )
    parser.add_argument("--json", action="store_true", help="a JSON list, one object per grant")


def cells(row: AllocationRow) -> list[str]:
    return [
        row.namespace,
        row.pod,
        row.container,
        row.node,
        PATH_WORDS.get(row.path, row.path),
        f"{row.gpu_index} {row.gpu_uuid}",
        row.gpu_model,
        gib(row.memory_mib),
        str(row.cores),
        row.phase or "-",
    ]


def footer(rows: AllocationTable, namespace: str | None) -> str:
    """``3 pods in all namespaces hold 4 GPU grants: memory 70.0 GiB, cores 100% summed over
    their GPUs``."""
    where = f"in namespace {namespace}" if namespace else "in all namespaces"
    pods = len({row.holder for row in rows})
    memory = gib(sum(row.memory_mib for row in rows))
    cores = sum(row.cores for row in rows)
    return (
        f"{pods} pod{'' if pods == 1 else 's'} {where} hold {len(rows)} GPU grant"
        f"{'' if len(rows) == 1 else 's'}: memory {memory} GiB, cores {cores}% "
        "summed over their GPUs"
    )


def render(rows: AllocationTable, namespace: str | None = None) -> str:
    """The text of ``vslice allocations`` (without a final newline)."""
    if not len(rows):
        where = f"in namespace {namespace}" if namespace else "in any namespace"
        return f"No pod {where} holds a GPU slice."
    end = footer(rows, namespace)
    table = text_table(HEADERS, [cells(row) for row in rows])
    return table + "\n" + "-" * min(len(end), 100) + "\n" + end


def run(args: argparse.Namespace) -> int:
    try:
        with connect(args) as client:
            rows = client.allocations(args.namespace)
    except VsliceError as exc:
        return fail("allocations", exc)
    print(json.dumps(rows.records(), indent=2) if args.json else render(rows, args.namespace))
    return EXIT_OK
