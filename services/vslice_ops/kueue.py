"""``vslice kueue config``: what Kueue needs to queue vslice's slices between teams.

Prints, as multi-document YAML: the ``resources`` fragment of Kueue's Configuration (merge
it into the Kueue controller's ``controller_manager_config.yaml``; it turns the per-GPU
``gpumem``/``gpucores`` of a job into totals Kueue can hold a quota in), then one
ResourceFlavor and, per ``--team``, a ClusterQueue in one cohort and a LocalQueue in the
team's namespace (``kubectl apply -f -`` takes those). docs/kueue.md has the worked example.

``--only configuration`` or ``--only queues`` prints one of the two (``--only queues |
kubectl apply -f -``; the configuration needs no team). ``--team NAME[=NAMESPACE]``
(repeatable; the namespace defaults to the name) gets
``--gpus``, ``--memory`` and ``--cores`` each. ``--values FILE`` reads vslice's install values
for its resource names (``resources``), as ``vslice manifests`` does. Exit status: 0, or 2 on
invalid input, naming the field and the value.
"""

from __future__ import annotations

import argparse
import sys

from vslice.commands.options import EXIT_OK, fail


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="kueue_action", metavar="ACTION", required=True)
    config = actions.add_parser(
        "config",
        help="print Kueue's Configuration fragment and example queues for vslice's resources",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    config.add_argument(
        "--team",
        action="append",
        default=[],
        metavar="NAME[=NAMESPACE]",
        help="a team with a ClusterQueue and a LocalQueue (repeatable)",
    )
    config.add_argument("--gpus", type=int, default=4, help="each team's GPUs (default 4)")
    config.add_argument(
        "--memory", default="40Gi", help="each team's GPU memory, a quantity (default 40Gi)"
    )
    config.add_argument(
        "--cores",
        type=int,
        default=400,
        help="each team's SM share in percent of one GPU, summed (default 400: four GPUs)",
    )
    config.add_argument(
        "--cpu",
        default="64",
        help="each team's CPU quota (default 64): the queue must cover every resource its "
        "jobs ask, or Kueue never admits a job that asks CPU",
    )
    config.add_argument(
        "--ram", default="256Gi", help="each team's host memory quota (default 256Gi)"
    )
    config.add_argument(
        "--dra-claims",
        type=int,
        default=None,
        metavar="N",
        help="also a quota of N vslice DRA claims per team (Kueue counts DRA devices)",
    )
    config.add_argument("--cohort", default="vslice", help="the teams' cohort (default vslice)")
    config.add_argument("--values", metavar="FILE", default=None, help="vslice install values")
    config.add_argument(
        "--only",
        choices=["configuration", "queues"],
        default=None,
        help="print only the Configuration fragment, or only the queue objects",
    )

    merge = actions.add_parser(
        "merge",
        help="print a Kueue Configuration with vslice's resource transformations merged in",
        description="Read Kueue's controller_manager_config.yaml (FILE, or - for stdin) and "
        "print it with vslice's resources fragment merged in: transformations of vslice's "
        "resource names and its DeviceClass mapping are replaced, every other setting is "
        "kept; merging again changes nothing. The Ansible role runs it on Kueue's ConfigMap.",
    )
    merge.add_argument("file", metavar="FILE", help="the configuration, or - for stdin")
    merge.add_argument("--values", metavar="FILE", default=None, help="vslice install values")


def run(args: argparse.Namespace) -> int:
    if args.kueue_action == "merge":
        return _merge(args)
    return _config(args)


def _merge(args: argparse.Namespace) -> int:
    import yaml
    from vslice_control.install.kueue import configuration, merge_configuration
    from vslice_control.install.values import parse_values
    from vslice_core.dra import DEVICE_CLASS
    from vslice_core.errors import InvalidRequest, VsliceError

    from vslice_ops.manifests import load_source, load_values

    try:
        if args.file == "-" and args.values == "-":
            raise InvalidRequest(
                "FILE and --values cannot both be standard input (-): give one as a file",
                field="FILE",
                value=args.file,
            )
        values = parse_values(load_values(args.values))
        existing = load_source(args.file, "FILE", "Kueue's configuration") or {}
        if not isinstance(existing, dict):
            raise InvalidRequest(
                f"FILE {args.file!r} must hold a Kueue Configuration mapping, got "
                f"{type(existing).__name__}",
                field="FILE",
                value=args.file,
            )
        merged = merge_configuration(existing, configuration(values.resources, DEVICE_CLASS))
        sys.stdout.write(yaml.safe_dump(merged, sort_keys=False))
    except VsliceError as error:
        return fail("kueue merge", error)
    return EXIT_OK


def _config(args: argparse.Namespace) -> int:
    from vslice_control.install.kueue import TeamQuota, configuration, queue_objects
    from vslice_control.install.manifests import to_yaml
    from vslice_control.install.values import parse_values
    from vslice_core.errors import VsliceError

    from vslice_ops.manifests import load_values

    try:
        names = parse_values(load_values(args.values)).resources
        teams = []
        for given in args.team:
            name, _, namespace = str(given).partition("=")
            teams.append(
                TeamQuota(
                    name,
                    namespace or name,
                    args.gpus,
                    args.memory,
                    args.cores,
                    args.cpu,
                    args.ram,
                )
            )
        documents = []
        if args.only != "queues":
            documents.append(configuration(names))
        if args.only != "configuration":
            documents += queue_objects(teams, names, cohort=args.cohort, dra_claims=args.dra_claims)
        sys.stdout.write(to_yaml(documents))
    except VsliceError as error:
        return fail("kueue config", error)
    return EXIT_OK
