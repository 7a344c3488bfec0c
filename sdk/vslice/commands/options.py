"""What the SDK's commands share: the connection flags and how errors end a command."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from vslice_core.errors import one_line

from vslice.errors import InvalidRequest, VsliceError

if TYPE_CHECKING:
    from vslice.client import Client

EXIT_OK = 0
EXIT_FAILED = 1  # no fit, timeout, cluster error
EXIT_INVALID = 2  # bad input (same as argparse and `vslice plan`)


def add_connection_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="kubeconfig to use (default: $KUBECONFIG, ~/.kube/config, then in-cluster)",
    )


def connect(args: argparse.Namespace, namespace: str | None = None) -> Client:
    from vslice.client import Client

    return Client(args.kubeconfig, namespace=namespace)


def error_text(command: str, message: object) -> str:
    """``vslice COMMAND: message`` with each line of the message on a line of its own (the
    later ones indented), unprintable characters escaped, ending in a newline."""
    first, *rest = str(message).splitlines() or [""]
    lines = [f"vslice {command}: {one_line(first)}", *(f"  {one_line(line)}" for line in rest)]
    return "\n".join(lines) + "\n"


def fail(command: str, exc: VsliceError) -> int:
    """Print the error (never a traceback) and return the exit status it deserves."""
    sys.stderr.write(error_text(command, exc))
    sys.stderr.flush()
    return EXIT_INVALID if isinstance(exc, InvalidRequest) else EXIT_FAILED
