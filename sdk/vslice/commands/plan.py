"""``vslice plan CLUSTER POD [--json] [--from-dump]``: would this pod fit, where, and why not.

Exit status: 0 the pod fits, 1 it does not, 2 invalid input (one line on stderr naming the
field and the value, never a traceback).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from vslice_core.cluster import Cluster, cluster_from_dump, load_yaml, parse_cluster
from vslice_core.errors import InvalidRequest, VsliceError, one_line
from vslice_core.plan import plan_decision, plan_json
from vslice_core.whynot import render_plan


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("cluster", metavar="CLUSTER", help="cluster YAML/JSON ('-' = stdin)")
    parser.add_argument("pod", metavar="POD", help="Pod manifest YAML/JSON ('-' = stdin)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--from-dump",
        action="store_true",
        help="CLUSTER is `kubectl get nodes,pods -A -o yaml` output (detected automatically)",
    )


def _read(path: str, what: str) -> str:
    try:
        return sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or type(error).__name__
        raise VsliceError(
            f"{what} must be a readable UTF-8 file, got {path!r} ({reason})"
        ) from None


def _is_dump(data: Any) -> bool:
    return isinstance(data, dict) and "items" in data and "nodes" not in data


def _cluster(text: str, from_dump: bool) -> Cluster:
    data = load_yaml(text, "CLUSTER")
    return cluster_from_dump(data) if from_dump or _is_dump(data) else parse_cluster(data)


def run(args: argparse.Namespace) -> int:
    try:
        if args.cluster == "-" and args.pod == "-":
            # The first read would take all of stdin and leave POD empty.
            raise InvalidRequest(
                "CLUSTER and POD cannot both be '-' (stdin)", field="POD", value="-"
            )
        cluster = _cluster(_read(args.cluster, "CLUSTER"), args.from_dump)
        decision, request = plan_decision(cluster, load_yaml(_read(args.pod, "POD"), "POD"))
    except VsliceError as error:
        print(f"vslice plan: {one_line(error)}", file=sys.stderr)
        return 2
    except (ValueError, TypeError, RecursionError) as error:
        # Input shapes no validator anticipated: still one line, never a traceback.
        message = f"input must be a valid cluster and pod, got {error}"
        print(f"vslice plan: {one_line(message)}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(plan_json(decision, request)))
    else:
        print(render_plan(decision, request))
    return 0 if decision.fits else 1
