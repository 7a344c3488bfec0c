"""``vslice lab up|down|status|import-image``: a real control plane with simulated GPU nodes and a
real GPU node (a kubelet and containerd, the fake driver standing in for the GPUs), on this
machine.

``up`` prints progress on stderr and one line on stdout, ``export KUBECONFIG=...``, so
``eval "$(vslice lab up)"`` points kubectl and the SDK at the lab; on a lab that already runs,
``up`` prints that lab's export line and says so on stderr. Exit status: 0 on success (or a
lab already running), 1 when a component fails (the message names it and its log), 2 on
invalid input (a bad inventory file, say). Commands it suggests are quoted for pasting.
"""

from __future__ import annotations

import argparse
import contextlib
import shlex
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from vslice.commands.options import error_text
from vslice_core.errors import InvalidRequest, VsliceError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from vslice_build.versions import KUBERNETES_VERSION
    from vslice_lab.lab import DEFAULT_INVENTORY, DEFAULT_STATE_DIR

    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    for name, help_text in (
        ("up", "start the lab (builds the Kubernetes binaries once, then caches them)"),
        ("down", "stop every process the lab started and remove its cluster data"),
        ("status", "show each component's health"),
        ("import-image", "import an OCI image archive into the lab's real node(s)"),
    ):
        sub = actions.add_parser(name, help=help_text, description=help_text)
        sub.set_defaults(usage_parser=sub)
        sub.add_argument(
            "--state-dir",
            type=Path,
            default=DEFAULT_STATE_DIR,
            help=f"logs, certificates, kubeconfig of the lab (default {DEFAULT_STATE_DIR})",
        )
        if name == "import-image":
            sub.add_argument(
                "archive",
                type=Path,
                help="OCI image archive (e.g. from `podman save --format oci-archive`, "
                "`docker save`, `skopeo copy ... oci-archive:FILE`)",
            )
        if name == "up":
            sub.add_argument(
                "--simulated-only",
                action="store_true",
                help="simulate every node, also those marked `kubelet: true` in the inventory",
            )
            sub.add_argument(
                "--inventory",
                type=Path,
                default=DEFAULT_INVENTORY,
                help=f"simulated GPU nodes, CLUSTER format (default {DEFAULT_INVENTORY})",
            )
            sub.add_argument(
                "--k8s-version",
                default=KUBERNETES_VERSION,
                help="Kubernetes version (default %(default)s)",
            )
            sub.add_argument(
                "--bin-dir",
                type=Path,
                action="append",
                default=[],
                help="directory of prebuilt etcd/kube-*/kwok (before $KUBEBUILDER_ASSETS, cache)",
            )
            sub.add_argument(
                "--example",
                action="store_true",
                help="then submit a first sliced pod (`vslice request`) and show where it landed",
            )
            sub.add_argument(
                "--no-services",
                action="store_true",
                help="start Kubernetes and the nodes only, not the vslice extender and webhook",
            )
            sub.add_argument(
                "--no-prometheus",
                action="store_true",
                help="do not start Prometheus (default: start it when it is installed)",
            )


def run(args: argparse.Namespace) -> int:
    from vslice_build import binaries

    try:
        if args.action == "up":
            return _up(args)
        if args.action == "down":
            return _down(args)
        if args.action == "import-image":
            return _import_image(args)
        return _status(args)
    except InvalidRequest as error:
        sys.stderr.write(error_text(f"lab {args.action}", error))
        return 2
    except (VsliceError, binaries.BinaryError) as error:
        sys.stderr.write(error_text(f"lab {args.action}", error))
        return 1


def _progress(message: str) -> None:
    print(f"vslice lab: {message}", file=sys.stderr, flush=True)


def vslice_program() -> list[str]:
    """How to run this same ``vslice`` from a shell: ``vslice`` when that is what PATH finds,
    else the absolute path of the running entry point, else ``python -m vslice.cli``."""
    running = Path(sys.argv[0]).resolve() if sys.argv and sys.argv[0] else None
    on_path = shutil.which("vslice")
    if running is not None and on_path is not None and Path(on_path).resolve() == running:
        return ["vslice"]
    if running is not None and running.name == "vslice" and running.is_file():
        return [str(running)]
    return [sys.executable, "-m", "vslice.cli"]


def shell_command(argv: Sequence[str]) -> str:
    """``vslice ARGV...`` as a line that can be pasted into a shell (every word quoted)."""
    return shlex.join([*vslice_program(), *argv])


def _up(args: argparse.Namespace) -> int:
    from vslice_lab.lab import LabAlreadyRunning, LabOptions, services_installed, up
    from vslice_lab.layout import Layout

    services = False if args.no_services else None
    if services is None and not all(services_installed().values()):
        _progress("vslice extender/webhook not installed: starting Kubernetes and nodes only")
    options = LabOptions(
        state_dir=args.state_dir,
        inventory=args.inventory,
        version=args.k8s_version,
        bin_dirs=tuple(args.bin_dir),
        services=services,
        progress=_progress,
        real_nodes=not args.simulated_only,
        prometheus=False if args.no_prometheus else None,
    )
    layout = Layout.at(args.state_dir)
    stop = shell_command(["lab", "down", "--state-dir", str(args.state_dir)])
    try:
        record = up(options)
    except LabAlreadyRunning as running:
        record = running.record
        _progress(
            f"a lab is already running in {layout.root} (API server {record.server}); "
            f"using it as it is (stop it with `{stop}`)"
        )
    else:
        simulated = len(record.nodes) - len(record.real_nodes)
        real = ", ".join(record.real_nodes) or "none"
        _progress(
            f"up: API server {record.server}, {simulated} simulated node(s), real node(s): "
            f"{real}; logs in {layout.logs}; stop with `{stop}`"
        )
    print(export_line(layout.kubeconfig), flush=True)
    if args.example:
        uuids = real_node_gpus(record.inventory, record.real_nodes)
        return _example(layout.kubeconfig, uuids, services=bool(record.extender_url))
    return 0


def export_line(kubeconfig: Path) -> str:
    """The line ``eval "$(vslice lab up)"`` runs: an absolute, quoted KUBECONFIG."""
    return f"export KUBECONFIG={shlex.quote(str(kubeconfig))}"


EXAMPLE_REQUEST = ["--name", "example-slice", "--memory", "4Gi", "--cores", "30"]


def real_node_gpus(inventory: str, real_nodes: list[str]) -> list[str]:
    """The GPU UUIDs of the lab's real nodes on the extender path (the example's), from its
    inventory file."""
    from vslice_lab.inventory import load_inventory

    if not inventory or not real_nodes:
        return []
    nodes = load_inventory(Path(inventory))
    return [
        gpu.uuid
        for node in nodes
        if node.name in real_nodes
        for gpu in node.extender_inventory.gpus
    ]


def example_argv(kubeconfig: Path, real_gpus: list[str]) -> list[str]:
    """``vslice request`` arguments of the example: on a real node's GPUs, vslice-smoke shows the
    slice it sees and where out-of-memory struck; without one, a pod on a simulated node."""
    from vslice_build.images import SMOKE_IMAGE

    argv = ["request", "--kubeconfig", str(kubeconfig), *EXAMPLE_REQUEST]
    if real_gpus:
        argv += ["--gpu-uuid", ",".join(real_gpus), "--wait", "completed", "--logs"]
        return [*argv, SMOKE_IMAGE, "vslice-smoke", "memory"]
    return [*argv, SMOKE_IMAGE]


def _example(kubeconfig: Path, real_gpus: list[str], *, services: bool) -> int:
    """Submit a first sliced pod through ``vslice request``; its output goes to stderr so that
    stdout stays the single export line."""
    from vslice.cli import main

    if not services:
        _progress("--example needs the vslice extender and webhook, which are not running")
        return 1
    argv = example_argv(kubeconfig, real_gpus)
    _progress("example: " + shell_command(argv))
    with contextlib.redirect_stdout(sys.stderr):
        return main(argv)


def _down(args: argparse.Namespace) -> int:
    from vslice_lab.lab import down

    stopped = down(args.state_dir)
    if stopped is None:
        print(f"no lab recorded in {args.state_dir}; nothing to stop")
        return 0
    print(f"stopped: {', '.join(stopped) if stopped else 'nothing was running'}")
    return 0


def _status(args: argparse.Namespace) -> int:
    from vslice_lab import prometheus
    from vslice_lab.lab import ready_nodes, status

    result = status(args.state_dir)
    if result is None:
        print(f"no lab recorded in {args.state_dir} (start one with `vslice lab up`)")
        return 1
    record, lines = result
    ready = ready_nodes(args.state_dir)
    shown = "unknown (API not answering)" if ready is None else f"{len(ready)}/{len(record.nodes)}"
    print(f"API server {record.server}  Kubernetes {record.version}  nodes Ready {shown}")
    real = ", ".join(record.real_nodes) or "none"
    print(
        f"real node(s): {real}" + (f" ({record.real_node_note})" if record.real_node_note else "")
    )
    metrics = prometheus.url(record)
    print(f"Prometheus: {metrics}" if metrics else "Prometheus: not started")
    width = max(len(line.name) for line in lines) if lines else 0
    at = max(len(line.address) for line in lines) if lines else 0
    for line in lines:
        health = "healthy" if line.healthy else f"UNHEALTHY: {line.problem}"
        print(f"  {line.name:<{width}}  pid {line.pid:<7}  {line.address:<{at}}  {health}")
    nodes_ok = ready is not None and set(record.nodes) <= ready
    return 0 if lines and nodes_ok and all(line.healthy for line in lines) else 1


def _import_image(args: argparse.Namespace) -> int:
    from vslice_lab.lab import import_image

    names = import_image(args.state_dir, args.archive)
    print(f"imported {args.archive} into {', '.join(names)}")
    return 0
