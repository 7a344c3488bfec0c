"""``vslice allocations``: who holds which slice of which GPU (live pods only)."""

from __future__ import annotations

import argparse
import json

from vslice.commands.options import EXIT_OK, add_connection_arguments, connect, fail
from vslice.errors import VsliceError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_connection_arguments(parser)
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", help="only this namespace")
    scope.add_argument(
        "-A", "--all-namespaces", action="store_true", help="every namespace (the default)"
    )
    parser.add_argument("--json", action="store_true", help="a JSON list, one object per grant")


def run(args: argparse.Namespace) -> int:
    try:
        with connect(args) as client:
            rows = client.allocations(args.namespace)
    except VsliceError as exc:
        return fail("allocations", exc)
    print(json.dumps(rows.records(), indent=2) if args.json else str(rows))
    return EXIT_OK
