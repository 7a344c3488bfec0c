"""``vslice delete NAME [-n NAMESPACE]``: give a slice back.

NAME is a Job (one ``vslice request --job`` created: the Job goes, and its pods with it in
the background) or else a Pod. Exit status: 0 deleted, 1 nothing of that name, or the
cluster refused, 2 a name that cannot be a Kubernetes name.
"""

from __future__ import annotations

import argparse
import sys

from vslice.commands.options import EXIT_FAILED, EXIT_OK, add_connection_arguments, connect, fail
from vslice.errors import VsliceError
from vslice.manifests import check_name


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_connection_arguments(parser)
    parser.add_argument("name", metavar="NAME", help="the pod or Job, as `vslice request` named it")
    parser.add_argument("-n", "--namespace", help="namespace (default: the kubeconfig's)")


def not_found(name: str, namespace: str) -> str:
    return (
        f"vslice delete: no Job or pod named {name!r} in namespace {namespace!r}; "
        f"`vslice allocations -n {namespace}` lists the pods holding slices there"
    )


def run(args: argparse.Namespace) -> int:
    try:
        check_name(args.name)
        with connect(args, args.namespace) as client:
            for kind in ("Job", "Pod"):
                workload = client.workload(args.name, kind=kind)
                if workload.delete():
                    gone = " and, in the background, its pods" if kind == "Job" else ""
                    print(f"deleted {kind.lower()} {workload.namespace}/{workload.name}{gone}")
                    return EXIT_OK
            print(not_found(args.name, client.namespace), file=sys.stderr)
            return EXIT_FAILED
    except VsliceError as exc:
        return fail("delete", exc)
