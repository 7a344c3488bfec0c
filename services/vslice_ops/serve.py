"""``vslice serve <name> [--config FILE.yaml]``: run one of vslice's services in the foreground.

Each service module is imported only when chosen, so the webhook does not load gRPC and the
device plugin does not load the extender. Settings come from the YAML file and ``VSLICE_*``
environment variables (see docs/configuration.md). Exit status: 0 after a clean stop
(SIGTERM/SIGINT), 2 on invalid settings, 1 when the cluster cannot be reached at start.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from vslice_core.errors import ClusterError, InvalidRequest

# service name -> module whose ``serve(config_path: str | None) -> int`` runs it
SERVICES: dict[str, str] = {
    "device-plugin": "vslice_node.agent.main",
    "monitor": "vslice_node.monitor.main",
    "scheduler": "vslice_control.extender.main",
    "webhook": "vslice_control.webhook.main",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("service", choices=sorted(SERVICES), help="the service to run")
    parser.add_argument(
        "--config",
        metavar="FILE",
        default=None,
        help="YAML settings file; VSLICE_<SETTING> environment variables override it",
    )


def run(args: argparse.Namespace) -> int:
    module = importlib.import_module(SERVICES[args.service])
    try:
        status: int = module.serve(args.config)
    except InvalidRequest as exc:
        print(f"vslice serve {args.service}: {exc}", file=sys.stderr)
        return 2
    except ClusterError as exc:
        print(f"vslice serve {args.service}: cluster unavailable: {exc}", file=sys.stderr)
        return 1
    return status
