"""``vslice lab up|down|status|import-image|kubectl``: a real control plane with simulated GPU
nodes and a real GPU node (a kubelet and containerd, the fake driver standing in for the GPUs),
on this machine.

Which lab: ``up`` starts one in ``--state-dir`` (default ``.lab``) and notes that directory
(``vslice_lab.state.remember``); the other actions take ``--state-dir`` too and, without it,
act on ``.lab`` when a lab runs there, else on the lab the last ``up`` noted, and say so.
``kubectl`` runs the lab's own kubectl (its Kubernetes version, from the build cache) with the
lab's kubeconfig.

``up`` prints progress on stderr and one line on stdout, ``export KUBECONFIG=...``, so
``eval "$(vslice lab up)"`` points kubectl and the SDK at the lab; on a lab that already runs,
``up`` prints that lab's export line and says so on stderr. Exit status: 0 on success (or a
lab already running), 1 when a component fails (the message names it and its log), 2 on
invalid input (a bad inventory file, say). Commands it suggests are quoted for pasting.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
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
        ("kubectl", "run the lab's kubectl (its version, the lab's kubeconfig) with ARGS"),
    ):
        sub = actions.add_parser(name, help=help_text, description=help_text)
        sub.set_defaults(usage_parser=sub)
        where = (
            f"default {DEFAULT_STATE_DIR}"
            if name == "up"
            else f"default {DEFAULT_STATE_DIR} when a lab runs there, else the last `lab up`'s"
        )
        sub.add_argument(
            "--state-dir",
            type=Path,
            default=DEFAULT_STATE_DIR if name == "up" else None,
            help=f"logs, certificates, kubeconfig of the lab ({where})",
        )
        if name == "kubectl":
            sub.add_argument(
                "kubectl_args",
                nargs=argparse.REMAINDER,
                metavar="ARGS",
                help="kubectl's arguments, verb first (`get pods -n NS`; or after `--`)",
            )
        if name == "import-image":
            sub.add_argument(
                "archive",
                type=Path,
                nargs="?",
                help="OCI image archive (e.g. from `podman save --format oci-archive`, "
                "`docker save`, `skopeo copy ... oci-archive:FILE`)",
            )
            sub.add_argument(
                "--workload",
                action="store_true",
                help="write and import vslice's Python workload image instead (NVIDIA's "
                "cuda-bindings and nvidia-ml-py, gpustat, nvitop; from this environment's "
                "packages)",
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
            sub.add_argument(
                "--kueue",
                action="store_true",
                help="start Kueue too, with example queues team-a and team-b (40 GiB of GPU "
                "memory each, one cohort; docs/kueue.md); built once from its Go module",
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
        if args.action == "kubectl":
            return _kubectl(args)
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
    from vslice_lab.state import remember

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
        kueue=args.kueue,
    )
    layout = Layout.at(args.state_dir)
    stop = shell_command(["lab", "down", "--state-dir", str(args.state_dir)])
    try:
        record = up(options)
    except LabAlreadyRunning as running:
        record = running.record
        if args.kueue and not any(p.name == "kueue" for p in record.processes):
            _progress(
                f"the lab running in {layout.root} has no Kueue, and --kueue cannot add it to a "
                f"running lab: stop it with `{stop}`, then `vslice lab up --kueue`"
            )
            return 1
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
    remember(layout)
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


def _which_lab(args: argparse.Namespace) -> Path:
    """The state dir to act on (``vslice_lab.state.find``); says so when it is the lab the last
    ``up`` noted rather than ``.lab`` here."""
    from vslice_lab.lab import DEFAULT_STATE_DIR
    from vslice_lab.state import find

    layout, noted = find(args.state_dir, DEFAULT_STATE_DIR)
    if noted:
        _progress(f"using the lab in {layout.root} (the last `vslice lab up` started it there)")
    return layout.root


def _down(args: argparse.Namespace) -> int:
    from vslice_lab.lab import down
    from vslice_lab.layout import Layout
    from vslice_lab.state import forget_remembered

    state_dir = _which_lab(args)
    stopped = down(state_dir)
    if stopped is None:
        print(f"no lab recorded in {state_dir}; nothing to stop")
        return 0
    forget_remembered(Layout.at(state_dir))
    print(f"stopped: {', '.join(stopped) if stopped else 'nothing was running'}")
    return 0


def _status(args: argparse.Namespace) -> int:
    from vslice_lab import prometheus
    from vslice_lab.lab import ready_nodes, status

    state_dir = _which_lab(args)
    result = status(state_dir)
    if result is None:
        print(f"no lab recorded in {state_dir} (start one with `vslice lab up`)")
        return 1
    record, lines = result
    ready = ready_nodes(state_dir)
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

    archive: Path | None = args.archive
    if args.workload == (archive is not None):
        raise InvalidRequest(
            "give either an archive or --workload (the Python workload image)",
            field="archive",
            value=str(archive or ""),
        )
    if archive is None:
        from vslice_build.binaries import cache_root
        from vslice_build.workload import build_workload

        archive = build_workload(cache_root().parent / "images")
    names = import_image(_which_lab(args), archive)
    print(f"imported {archive} into {', '.join(names)}")
    images = archive_image_names(archive)
    if images:
        for image in images:
            print(f"use it in a pod as image: {image}")
    else:
        print(
            "the archive names no image, so containerd keeps it by digest only: tag the image "
            "before saving it (e.g. `podman save --format oci-archive -o FILE myimage:1`)"
        )
    return 0


def archive_image_names(archive: Path, today: str | None = None) -> list[str]:
    """The names ``ctr images import`` gives the images of an OCI or docker archive, which is
    what a pod's ``image:`` says. An OCI archive names an image by the annotation
    ``io.containerd.image.name`` (a full name) or ``org.opencontainers.image.ref.name``, which
    ctr keeps as it is when it looks like a full reference and otherwise, when it is a bare tag,
    prefixes with ``import-<today>:``; a docker archive by its ``RepoTags``, which the kubelet
    resolves as docker does (``myimage:1`` is ``docker.io/library/myimage:1``)."""
    prefix = f"import-{today or time.strftime('%Y-%m-%d')}"
    try:
        with tarfile.open(archive) as tar:
            index = _tar_json(tar, "index.json")
            docker = _tar_json(tar, "manifest.json")
    except (OSError, tarfile.TarError):
        return []
    names: list[str] = []
    if isinstance(index, dict):
        for entry in index.get("manifests") or []:
            notes = entry.get("annotations") if isinstance(entry, dict) else None
            if not isinstance(notes, dict):
                continue
            name = notes.get("io.containerd.image.name") or notes.get(
                "org.opencontainers.image.ref.name"
            )
            if isinstance(name, str) and name:
                full = any(mark in name for mark in "/:@")
                names.append(name if full else f"{prefix}:{name}")
    if isinstance(docker, list):
        for entry in docker:
            tags = entry.get("RepoTags") if isinstance(entry, dict) else None
            names.extend(tag for tag in tags or [] if isinstance(tag, str))
    return list(dict.fromkeys(names))


def _tar_json(tar: tarfile.TarFile, member: str) -> object:
    """A JSON member of an open tar file, None when absent or not JSON."""
    try:
        handle = tar.extractfile(member)
    except KeyError:
        return None
    if handle is None:
        return None
    try:
        return json.loads(handle.read())
    except ValueError:
        return None


def kubectl_path(version: str) -> Path:
    """The kubectl of the lab's Kubernetes version: from ``--bin-dir``-style directories
    (``$VSLICE_LAB_BIN_DIR``, ``$KUBEBUILDER_ASSETS``) or the build cache, built once into the
    cache when it is in neither (as ``lab up`` builds what it runs)."""
    from vslice_build import binaries

    for directory in [*binaries.search_dirs(), binaries.cache_dir(version) / "bin"]:
        candidate = directory / "kubectl"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return binaries.ensure_tools(version)["kubectl"]


def _kubectl(args: argparse.Namespace) -> int:
    """``kubectl --kubeconfig <lab> ARGS``; its exit status is the command's."""
    from vslice_lab import state
    from vslice_lab.layout import Layout

    state_dir = _which_lab(args)
    record = state.load(Layout.at(state_dir))
    if record is None:
        print(f"no lab recorded in {state_dir} (start one with `vslice lab up`)", file=sys.stderr)
        return 1
    rest = list(args.kubectl_args)
    if rest[:1] == ["--"]:
        rest = rest[1:]
    kubeconfig = Layout.at(state_dir).kubeconfig
    command = [str(kubectl_path(record.version)), "--kubeconfig", str(kubeconfig), *rest]
    sys.stdout.flush()
    return subprocess.run(command, check=False).returncode
