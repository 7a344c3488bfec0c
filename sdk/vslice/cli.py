"""The ``vslice`` command: one entry point, one module per subcommand.

Subcommands are imported only when they run, so ``vslice plan`` starts without loading
gRPC or the Kubernetes client. Each command module provides
``add_arguments(parser: argparse.ArgumentParser) -> None`` and
``run(args: argparse.Namespace) -> int`` (the exit status).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# name -> (module, one-line help). Keep sorted by name.
COMMANDS: dict[str, tuple[str, str]] = {
    "allocations": ("vslice.commands.allocations", "list who holds which GPU slice"),
    "lab": ("vslice.commands.lab", "run a local lab: real control plane, simulated GPU nodes"),
    "plan": ("vslice.commands.plan", "what-if placement: would this pod fit, where, and why not"),
    "request": ("vslice.commands.request", "submit a sliced pod from the shell and wait for it"),
    "serve": ("vslice.commands.serve", "run a vslice service (scheduler, webhook, ...)"),
    "top": ("vslice.commands.top", "per node and GPU: slots, memory and cores in use"),
}


def build_parser(argv: Sequence[str]) -> argparse.ArgumentParser:
    """Build the parser; only the chosen subcommand's module is imported."""
    parser = argparse.ArgumentParser(prog="vslice", description="Fractional GPU sharing.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    chosen = next((a for a in argv if not a.startswith("-")), None)
    for name, (module, help_text) in COMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        if name == chosen:
            importlib.import_module(module).add_arguments(sub_parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(args_list).parse_args(args_list)
    module, _ = COMMANDS[args.command]
    try:
        status: int = importlib.import_module(module).run(args)
    except KeyboardInterrupt:
        return 130
    return status


if __name__ == "__main__":
    sys.exit(main())
