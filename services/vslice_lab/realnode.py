"""Bringing a real GPU node of the lab up and down (configuration in ``nodeconfig``).

``start`` runs after the control plane answers: preflight (root, cgroups, overlayfs, no other
kubelet on this machine, the shim built), the node's binaries (built once), a snapshot of the
host (``hostchanges``), certificates, configuration, stand-in device nodes, then containerd,
the lab's images imported into it, and the kubelet with vslice's device plugin and monitor.
The device plugin and the monitor serve HTTPS with a certificate of their own
(``vslice-node-<name>``) and answer /status and /metrics only to the client certificates
``vslice-prometheus`` (the lab's Prometheus) and ``vslice-admin`` (``NODE_READER``: operators
and tests), as a production node configured per docs/monitor.md does.
It returns once the node is Ready and advertises its GPU slots. A machine that cannot run a
real node gets that node simulated instead, with one line saying why.

``stop`` runs after every recorded process has been stopped: it kills what containerd's shims
left running, unmounts everything below the nodes' directories and undoes the host changes.
"""

from __future__ import annotations

import os
import shutil
import ssl
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from vslice_build import images
from vslice_build.binaries import NodeBinaries
from vslice_core.annotations import NODE_GPUS
from vslice_core.resources import DEFAULT_RESOURCE_NAMES
from vslice_kube.client import api_client
from vslice_kube.nodes import is_ready, read_node, set_node_addresses

from vslice_lab import configs, hostchanges, nodeconfig, pki, processes, state
from vslice_lab.components import Certificates, Component
from vslice_lab.errors import LabError
from vslice_lab.health import Probe
from vslice_lab.inventory import LabNode
from vslice_lab.layout import Layout
from vslice_lab.nodeconfig import NodeLayout, NodePorts, ShimBuild
from vslice_lab.ports import HOST, free_ports
from vslice_lab.state import LabRecord

Launch = Callable[[Sequence[Component]], None]

NODE_READER = "vslice-admin"


def node_reader_context(layout: Layout) -> ssl.SSLContext:
    """What a caller of a real node's /status and /metrics needs: the lab CA, which signed the
    node services' certificates, and the operator's client certificate they accept."""
    context = ssl.create_default_context(cafile=str(layout.pki / "ca.crt"))
    context.load_cert_chain(layout.pki / f"{NODE_READER}.crt", layout.pki / f"{NODE_READER}.key")
    return context


"""The common name of the lab's operator certificate (``Certificates.node_reader``), one of the
node services' default ``client_names``: the lab leaves those at their default."""


@dataclass(frozen=True)
class NodeContext:
    """What starting a real node needs from the rest of ``up``."""

    layout: Layout
    record: LabRecord
    certs: Certificates
    server: str
    admin: Path
    services_kubeconfig: Path
    """The vslice services' kubeconfig (group vslice:services): the device plugin and the
    monitor write vslice's state annotations with it."""
    inventory_file: Path
    binaries: NodeBinaries
    """Found (or built) by ``up`` before anything started."""
    shim: ShimBuild
    timeout: float
    launch: Launch
    say: Callable[[str], None]
    dra: bool = False
    """The control plane serves DRA with consumable capacity (1.36+): the node agent serves
    the node's ``dra_gpus`` on the DRA path."""


def node_layout(layout: Layout, name: str) -> NodeLayout:
    return NodeLayout(layout.root / "nodes" / name)


CLAIM = Path("/run/vslice-lab-real-node")
"""Which lab runs this machine's real node: the state dir of its owner. Taken with O_EXCL when
a lab chooses its real node, so two labs starting at once never both start a kubelet (the
kubelet's socket, which ``preflight`` also checks, appears only seconds later)."""


def claim(owner: Path) -> str | None:
    """Take this machine's real node for the lab in ``owner``; None on success, else which lab
    holds it. A claim whose lab no longer runs is taken over."""
    for _ in range(2):
        try:
            fd = os.open(CLAIM, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder = _claim_holder()
            if holder == str(owner):
                return None
            if holder and _lab_runs(Path(holder)):
                return f"the lab in {holder} runs this machine's real node"
            CLAIM.unlink(missing_ok=True)  # a lab that crashed or was stopped without down
            continue
        with os.fdopen(fd, "w") as out:
            out.write(str(owner))
        return None
    return f"{CLAIM} could not be taken"


def release(owner: Path) -> None:
    """Give the real node back, if the lab in ``owner`` holds it."""
    if _claim_holder() == str(owner):
        CLAIM.unlink(missing_ok=True)


def _claim_holder() -> str:
    try:
        return CLAIM.read_text().strip()
    except OSError:
        return ""


def _lab_runs(state_dir: Path) -> bool:
    record = state.load(Layout.at(state_dir))
    return record is not None and any(processes.alive(p) for p in record.processes)


def choose(nodes: Sequence[LabNode], shim: ShimBuild, owner: Path) -> tuple[list[LabNode], str]:
    """The real nodes that will run here (claimed for the lab in ``owner``) and, when some must
    be simulated instead, why."""
    wanted = [node for node in nodes if node.kubelet]
    if not wanted:
        return [], ""
    reason = nodeconfig.preflight(shim) or claim(owner)
    if reason is not None:
        return [], f"{reason}; simulating {', '.join(n.name for n in wanted)} instead"
    if len(wanted) > 1:
        # The kubelet's device-plugin directory is a fixed path: one kubelet per machine.
        rest = ", ".join(n.name for n in wanted[1:])
        why = "one real node per machine (the kubelet's device-plugin directory is fixed)"
        return wanted[:1], f"{why}; simulating {rest}"
    return wanted, ""


def start(node: LabNode, ctx: NodeContext) -> None:
    """Start one real node (see the module docstring); LabError names what failed."""
    name = node.name
    binaries = ctx.binaries
    record = ctx.record
    if record.host is None:
        record.host = hostchanges.snapshot([nodeconfig.BRIDGE]).to_json()
    record.real_nodes.append(name)
    state.save(ctx.layout, record)
    layout = node_layout(ctx.layout, name)
    too_long = layout.long_sockets()
    if too_long:
        raise LabError(
            f"the state dir {ctx.layout.root} is too deep for the kubelet's unix sockets "
            f"({too_long[0]} has {len(too_long[0])} characters, at most "
            f"{nodeconfig.MAX_SOCKET_PATH} fit); use a shorter --state-dir",
            component=f"kubelet-{name}",
        )
    picked = free_ports(["kubelet", "kubelet-healthz", "device-plugin", "monitor"])
    ports = NodePorts(
        picked["kubelet"], picked["kubelet-healthz"], picked["device-plugin"], picked["monitor"]
    )
    record.ports.update({f"{key}-{name}": value for key, value in picked.items()})
    serving, client, services = _node_certificates(ctx, name)
    tls = node_tls_settings(services, ctx.certs.ca.cert)
    nodeconfig.write_configs(
        layout, binaries, ports, ctx.certs.ca.cert, serving, images.PAUSE_IMAGE
    )
    nodeconfig.make_device_nodes(layout, node.inventory)
    configs.write_kubeconfig(
        layout.kubelet_kubeconfig, ctx.server, ctx.certs.ca.cert, client, f"system:node:{name}"
    )
    ctx.say(f"starting containerd for real node {name}")
    ctx.launch([nodeconfig.containerd(name, layout, binaries)])
    archives = build_images(ctx.layout)
    for archive in archives:
        import_image(layout, binaries.ctr, archive, ctx.layout.log(f"containerd-{name}"))
    shutil.copyfile(ctx.inventory_file, layout.gpus_file)
    plugin = configs.write_settings(
        layout.settings("device-plugin"),
        tls
        | nodeconfig.device_plugin_settings(
            name,
            layout,
            layout.gpus_file,
            node.inventory,
            ctx.shim,
            ctx.services_kubeconfig,
            ports.device_plugin,
            allocation_keys=ctx.certs.allocation_keys,
            dra_gpus=list(node.dra_gpus) if ctx.dra and node.dra_gpus else None,
        ),
    )
    monitor = configs.write_settings(
        layout.settings("monitor"),
        tls | nodeconfig.monitor_settings(name, layout, ctx.services_kubeconfig, ports.monitor),
    )
    ca = ctx.certs.ca.cert
    ctx.launch(
        [
            nodeconfig.kubelet(name, layout, binaries, ports),
            _https_service("device-plugin", name, plugin, ports.device_plugin, ca),
            _https_service("monitor", name, monitor, ports.monitor, ca),
        ]
    )
    _wait_registered(ctx, node)


def node_tls_settings(serving: pki.KeyPair, ca: Path) -> dict[str, str]:
    """The settings that make a node service serve HTTPS and check client certificates
    against the lab CA (``client_names`` stays at its default)."""
    return {
        "tls_cert_file": str(serving.cert),
        "tls_key_file": str(serving.key),
        "client_ca_file": str(ca),
    }


def health_probe(port: int, ca: Path) -> Probe:
    """A node service's /healthz over HTTPS; open, so without a client certificate."""
    return Probe(f"https://{HOST}:{port}/healthz", ca=ca)


def _https_service(service: str, name: str, settings: Path, port: int, ca: Path) -> Component:
    return replace(
        nodeconfig.node_service(service, name, settings, port), probe=health_probe(port, ca)
    )


def _node_certificates(ctx: NodeContext, name: str) -> tuple[pki.KeyPair, pki.KeyPair, pki.KeyPair]:
    """The kubelet's serving and client certificates, and the serving certificate the node's
    device plugin and monitor share (both listen on the same addresses)."""
    directory = ctx.layout.pki
    serving = pki.issue(
        ctx.certs.ca,
        directory,
        f"kubelet-{name}-serving",
        common_name=f"system:node:{name}",
        organization="system:nodes",
        hosts=(HOST, "localhost", name),
        server=True,
        client=False,
    )
    client = pki.issue(
        ctx.certs.ca,
        directory,
        f"kubelet-{name}",
        common_name=f"system:node:{name}",
        organization="system:nodes",
    )
    services = pki.issue(
        ctx.certs.ca,
        directory,
        f"vslice-node-{name}",
        common_name=f"vslice-node-{name}",
        hosts=(HOST, "localhost", name),
        server=True,
        client=False,
    )
    return serving, client, services


def build_images(layout: Layout) -> list[Path]:
    """The sandbox and smoke image archives of this lab (rewritten each ``up``; reproducible)."""
    out = layout.root / "images"
    shim = ShimBuild(nodeconfig.default_shim_build())
    pause = images.build_pause(out)
    specs = [(images.pause_spec(pause), "pause.tar"), (images.smoke_spec(shim.smoke), "smoke.tar")]
    archives = []
    for spec, file_name in specs:
        images.write_archive(spec, out / file_name)
        archives.append(out / file_name)
    return archives


def import_image(layout: NodeLayout, ctr: Path, archive: Path, log: Path) -> None:
    """``ctr -n k8s.io images import`` into this node's containerd; LabError on failure."""
    command = [str(ctr), "--address", str(layout.containerd_socket), "-n", "k8s.io"]
    command += ["images", "import", str(archive)]
    result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=300)
    if result.returncode != 0:
        raise LabError(
            f"importing {archive.name} into containerd failed: "
            f"{(result.stderr or result.stdout).strip()[-300:]} (containerd log: {log})",
            component="containerd",
            log=log,
        )


def _wait_registered(ctx: NodeContext, node: LabNode) -> None:
    """Wait for the node object, give it its loopback address, wait for Ready, its GPU slots
    and the device plugin's inventory annotation (what the extender places by)."""
    name = node.name
    client = api_client(ctx.admin)
    log = ctx.layout.log(f"kubelet-{name}")
    gpu = DEFAULT_RESOURCE_NAMES.gpu
    want = str(node.gpu_devices)
    deadline = time.monotonic() + ctx.timeout
    addressed = False
    last = "not registered"
    try:
        while time.monotonic() < deadline:
            found = read_node(client, name)
            if found is not None and not addressed:
                set_node_addresses(client, name, {"InternalIP": HOST, "Hostname": name})
                addressed = True
            if found is not None:
                allocatable = (found.get("status") or {}).get("allocatable") or {}
                annotated = NODE_GPUS in ((found.get("metadata") or {}).get("annotations") or {})
                if is_ready(found) and allocatable.get(gpu) == want and annotated:
                    return
                last = (
                    f"Ready={is_ready(found)}, {gpu} allocatable={allocatable.get(gpu, 0)}, "
                    f"{NODE_GPUS} {'written' if annotated else 'missing'}"
                )
            time.sleep(0.5)
    finally:
        client.close()  # type: ignore[no-untyped-call]
    raise LabError(
        f"real node {name} did not become Ready with {want} {gpu} within {ctx.timeout:.0f}s "
        f"({last}); see {log} and {ctx.layout.log(f'device-plugin-{name}')}",
        component=f"kubelet-{name}",
        log=log,
    )


def stop(layout: Layout, record: LabRecord) -> list[str]:
    """Clean what the real nodes left (see the module docstring); problems that remain."""
    problems = []
    for name in record.real_nodes:
        node = node_layout(layout, name)
        # The shims' command lines name containerd's socket (``-address``), not the node dir.
        left = hostchanges.kill_containers(str(node.containerd_socket))
        if left:
            problems.append(f"{left} container process(es) of {name} did not exit")
        shutil.rmtree(node.run_dir, ignore_errors=True)
    hostchanges.unmount_all(layout.root / "nodes")
    if record.host is not None:
        problems += hostchanges.restore(hostchanges.HostSnapshot.from_json(record.host))
    release(layout.root)
    return problems
