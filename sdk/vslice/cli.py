"""The ``vslice`` command: one entry point, one module per subcommand.

Subcommands are imported only when they run, so ``vslice plan`` starts without loading
gRPC or the Kubernetes client. Each command module provides
``add_arguments(parser: argparse.ArgumentParser) -> None`` and
``run(args: argparse.Namespace) -> int`` (the exit status). The data scientist's commands live
in ``vslice.commands``; the operator's (``serve``, ``lab``, ``bundle``) in ``vslice_ops``,
outside the SDK package, and are named here only as strings.

``vslice --version`` prints the installed version. An unknown option is reported with the
usage of the (sub)command it was given to, and a reader that closes the pipe early
(``vslice top | head -3``) ends the command quietly with status 141, as a shell reports SIGPIPE.

``kubectl vslice``: the console script ``kubectl-vslice`` (:func:`kubectl_main`) is the same
command as a kubectl plugin, limited to the read-only views a kubectl user asks for
(:data:`KUBECTL_COMMANDS`) and named ``kubectl vslice`` in its usage. kubectl runs the first
``kubectl-<name>`` executable on PATH and hands it every argument after the plugin's name
unchanged (it does not turn its own ``--kubeconfig``, ``--context`` or ``-n`` into anything),
so the options go after the subcommand (``kubectl vslice why mypod -n team-a``), where each
subcommand reads them, ``$KUBECONFIG`` as well.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Final

# name -> (module, one-line help). Keep sorted by name.
COMMANDS: dict[str, tuple[str, str]] = {
    "allocations": ("vslice.commands.allocations", "list who holds which GPU slice"),
    "bundle": ("vslice_ops.bundle", "build or check the offline bundle hosts are set up from"),
    "delete": ("vslice.commands.delete", "give a slice back: delete a pod or Job by name"),
    "kueue": ("vslice_ops.kueue", "print what Kueue needs to queue vslice's slices by team"),
    "lab": ("vslice_ops.lab", "run a local lab: real control plane, simulated GPU nodes"),
    "manifests": ("vslice_ops.manifests", "print vslice's install objects as YAML"),
    "plan": ("vslice.commands.plan", "what-if placement: would this pod fit, where, and why not"),
    "request": ("vslice.commands.request", "submit a sliced pod from the shell and wait for it"),
    "serve": ("vslice_ops.serve", "run a vslice service (scheduler, webhook, ...)"),
    "top": (
        "vslice.commands.top",
        "per node and GPU: slots, memory and cores in use; the pods waiting for a slice",
    ),
    "why": ("vslice.commands.why", "where one pod's GPU slice landed, or why it has none yet"),
}

KUBECTL_PROG: Final = "kubectl vslice"
KUBECTL_COMMANDS: Final = ("allocations", "plan", "top", "why")
"""What ``kubectl vslice`` runs: the views; the rest stays with ``vslice``."""


def build_parser(
    argv: Sequence[str],
    *,
    prog: str = "vslice",
    commands: Mapping[str, tuple[str, str]] = COMMANDS,
) -> argparse.ArgumentParser:
    """Build the parser; only the chosen subcommand's module is imported."""
    parser = argparse.ArgumentParser(prog=prog, description="Fractional GPU sharing.")
    if commands is COMMANDS:  # the plugin's usage stays its four views (kubectl has --version)
        parser.add_argument("--version", action="version", version=f"vslice {package_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    chosen = next((a for a in argv if not a.startswith("-")), None)
    for name, (module, help_text) in commands.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        if name == chosen:
            sub_parser.set_defaults(usage_parser=sub_parser)
            importlib.import_module(module).add_arguments(sub_parser)
    return parser


def package_version() -> str:
    """The installed distribution's version (what pip installed), else the package's own."""
    try:
        return importlib.metadata.version("vslice")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout without installing
        from vslice import __version__

        return __version__


def parse(
    argv: Sequence[str],
    *,
    prog: str = "vslice",
    commands: Mapping[str, tuple[str, str]] = COMMANDS,
) -> argparse.Namespace:
    """The parsed arguments; an unknown option exits 2 with the usage of the innermost
    (sub)command that was chosen (a command's own subcommands set ``usage_parser`` too)."""
    parser = build_parser(argv, prog=prog, commands=commands)
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        chosen: argparse.ArgumentParser = getattr(args, "usage_parser", parser)
        chosen.error(f"unrecognized arguments: {' '.join(unknown)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    return _run(parse(list(sys.argv[1:] if argv is None else argv)))


def kubectl_main(argv: Sequence[str] | None = None) -> int:
    """``kubectl vslice COMMAND ...`` (the ``kubectl-vslice`` executable kubectl finds on
    PATH): the commands of :data:`KUBECTL_COMMANDS`, run exactly as ``vslice`` runs them. Any
    other command, or an option before the command, exits 2 with the usage and what works."""
    args = list(sys.argv[1:] if argv is None else argv)
    commands = {name: COMMANDS[name] for name in KUBECTL_COMMANDS}
    first = args[0] if args else None
    if first is not None and first not in commands and first not in ("-h", "--help"):
        parser = build_parser([], prog=KUBECTL_PROG, commands=commands)
        known = ", ".join(KUBECTL_COMMANDS)
        if first.startswith("-"):
            parser.error(
                f"options go after the command, got {first!r} first; e.g. "
                f"`{KUBECTL_PROG} why POD -n NAMESPACE --kubeconfig FILE` (commands: {known})"
            )
        elsewhere = f"; `vslice {first}` runs it" if first in COMMANDS else ""
        parser.error(f"{first!r} is not a {KUBECTL_PROG} command; choose one of {known}{elsewhere}")
    return _run(parse(args, prog=KUBECTL_PROG, commands=commands))


def _run(args: argparse.Namespace) -> int:
    module, _ = COMMANDS[args.command]
    try:
        status: int = importlib.import_module(module).run(args)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # Nothing more can be written; point stdout at /dev/null so the final flush is quiet.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    return status


if __name__ == "__main__":
    sys.exit(main())
