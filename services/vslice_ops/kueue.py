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


def run(args: argparse.Namespace) -> int:
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
            teams.append(TeamQuota(name, namespace or name, args.gpus, args.memory, args.cores))
        documents = []
        if args.only != "queues":
            documents.append(configuration(names))
        if args.only != "configuration":
            documents += queue_objects(teams, names, cohort=args.cohort, dra_claims=args.dra_claims)
        sys.stdout.write(to_yaml(documents))
    except VsliceError as error:
        return fail("kueue config", error)
    return EXIT_OK
