"""``vslice manifests [--values FILE] [--part NAME]...``: print vslice's install objects.

The objects come from ``vslice_control.install``, the one source the lab, the Ansible role
and a chart render from. ``--values`` is a JSON or YAML mapping of ``InstallValues`` fields
(``-``: standard input, how the role passes its variables, so no secret lands in a file or
on a command line); without it every default holds. Without ``--part`` the output is every
object the API server stores, in apply order, ready for ``kubectl apply -f -``; with it, the
named parts only (the role writes one file per part). Exit status: 0, or 2 on invalid input
(the message on stderr names the field and the value).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from vslice.commands.options import EXIT_OK, fail


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from vslice_control.install.manifests import API_PARTS, PARTS

    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = "parts:\n" + "\n".join(f"  {p.name:31} {p.about}" for p in PARTS)
    parser.add_argument(
        "--values",
        metavar="FILE",
        default=None,
        help="JSON or YAML values (- reads standard input); default: every default",
    )
    parser.add_argument(
        "--part",
        action="append",
        choices=[part.name for part in PARTS],
        metavar="NAME",
        help=f"print only this part (repeatable); default: {', '.join(API_PARTS)}",
    )


def run(args: argparse.Namespace) -> int:
    from vslice_control.install.manifests import API_PARTS, objects, to_yaml
    from vslice_control.install.values import parse_values
    from vslice_core.errors import VsliceError

    try:
        values = parse_values(load_values(args.values))
        sys.stdout.write(to_yaml(objects(values, args.part or API_PARTS)))
    except VsliceError as error:
        return fail("manifests", error)
    return EXIT_OK


def load_values(source: str | None) -> Any:
    """``--values``: a file, standard input (``-``) or nothing (every default)."""
    return None if source is None else load_source(source, "--values", "values")


def load_source(source: str, field: str, what: str) -> Any:
    """YAML from a file or standard input (``-``); an unreadable file or bad YAML is an
    InvalidRequest naming ``field`` (the option) and the path."""
    from vslice_core.cluster import load_yaml
    from vslice_core.errors import InvalidRequest

    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text()
    except (OSError, UnicodeDecodeError) as error:
        raise InvalidRequest(
            f"{field}: cannot read {source}: {error}", field=field, value=source
        ) from None
    return load_yaml(text, what)
