"""``up``, ``down`` and ``status``: the code behind ``vslice lab`` and the e2e fixtures.

``up`` either brings every component to healthy and creates the simulated nodes, or raises
:class:`LabError` naming the component and its log after stopping everything it had started;
it never leaves half a lab behind. A record in the state directory lists what runs (by pid and
start time), so ``down`` stops exactly that, and an ``up`` after a crash first cleans up what
the crashed lab left.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vslice_build import binaries as binaries_module
from vslice_build import kueue as kueue_binaries
from vslice_build import prometheus as prometheus_binaries
from vslice_build.versions import KUBERNETES_VERSION
from vslice_core.dra import DRIVER
from vslice_core.errors import InvalidRequest, VsliceError

from vslice_lab import (
    components,
    configs,
    dra,
    kueue,
    pki,
    processes,
    prometheus,
    realnode,
    state,
)
from vslice_lab.cluster import SERVICES_GROUP, LabCluster, lab_parts, lab_values
from vslice_lab.components import Certificates, Component
from vslice_lab.errors import LabError
from vslice_lab.health import Probe
from vslice_lab.inventory import LabNode, load_inventory
from vslice_lab.layout import Layout
from vslice_lab.nodeconfig import ShimBuild, default_shim_build
from vslice_lab.ports import HOST, free_ports, in_use
from vslice_lab.state import LabRecord

DEFAULT_STATE_DIR = Path(".lab")
DEFAULT_INVENTORY = Path("inventory/lab/cluster.yaml")
PORT_NAMES = (
    "etcd",
    "etcd-peer",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
    "vslice-scheduler",
    "vslice-webhook",
    prometheus.PORT_NAME,
    *kueue.PORT_NAMES,
)


@dataclass(frozen=True)
class LabOptions:
    """What ``up`` starts. Defaults give what ``vslice lab up`` gives a user."""

    state_dir: Path = DEFAULT_STATE_DIR
    inventory: Path | None = DEFAULT_INVENTORY
    version: str = KUBERNETES_VERSION
    bin_dirs: tuple[Path, ...] = ()
    services: bool | None = None
    """Start the vslice extender and webhook: True, False, or None = when they are installed."""
    extender_url: str | None = None
    """URL kube-scheduler calls for GPU pods; None = the lab's own extender (if started)."""
    extra_node_resources: dict[str, str] = field(default_factory=dict)
    """Extended resources added to every simulated node (the benchmark's plain resource)."""
    extra_extenders: tuple[configs.ExtraExtender, ...] = ()
    """More extenders for kube-scheduler to call, each for pods asking its own resource (the
    scheduling benchmark's null extender); they are not started by the lab."""
    ports: dict[str, int] = field(default_factory=dict)
    """Fixed ports by component name (see PORT_NAMES); the rest are picked free."""
    timeout: float = 120.0
    """Seconds each component may take to become healthy."""
    progress: Callable[[str], None] | None = None
    real_nodes: bool = True
    """Run inventory nodes marked ``kubelet: true`` as real nodes (False: simulate them too)."""
    shim_build: Path | None = None
    """``make -C shim``'s output for real nodes; None = ``$VSLICE_SHIM_BUILD`` or this
    checkout's ``shim/build``."""
    extender_settings: dict[str, Any] = field(default_factory=dict)
    """Extra ``vslice serve scheduler`` settings (the benchmark's ``leader_election``)."""
    prometheus: bool | None = None
    """Start Prometheus scraping the lab's services: True, False, or None = when it is found
    (``vslice_build.prometheus``) and the lab runs vslice's services or a real node."""
    kueue: bool = False
    """Start Kueue (``vslice_lab.kueue``) with the example team queues; built once from its Go
    module when missing."""
    apiserver_profiling: bool = False
    """Serve kube-apiserver's /debug/pprof (the scheduling benchmark's --pprof)."""
    node_lease_seconds: int = components.NODE_LEASE_SECONDS
    """Node lease duration of the simulated nodes. Thousands of nodes renewing 40 s leases
    keep a small machine busy; the scheduling benchmark makes them long (the controller
    manager's grace period follows)."""


class LabAlreadyRunning(LabError):
    """``up`` found a healthy lab in the state directory; ``record`` is that lab's."""

    def __init__(self, message: str, *, record: LabRecord) -> None:
        super().__init__(message, component="lab")
        self.record = record


def services_installed() -> dict[str, bool]:
    """Which vslice services this installation can run."""
    return {
        name: importlib.util.find_spec(f"vslice_control.{module}.main") is not None
        for name, module in (("scheduler", "extender"), ("webhook", "webhook"))
    }


def up(options: LabOptions) -> LabRecord:
    """Start a lab (see the module docstring); returns its record."""
    layout = Layout.at(options.state_dir)
    say = options.progress or (lambda _message: None)
    previous = state.load(layout)
    if previous is not None:
        if all(processes.alive(p) for p in previous.processes) and previous.processes:
            raise LabAlreadyRunning(
                f"a lab is already running in {layout.root} (API server {previous.server}); "
                f"stop it first with `vslice lab down --state-dir {options.state_dir}`",
                record=previous,
            )
        say("cleaning up a lab that did not stop cleanly")
        _teardown(layout, previous)
    nodes = load_inventory(options.inventory) if options.inventory else []
    unknown = sorted(set(options.ports) - set(PORT_NAMES))
    if unknown:
        raise InvalidRequest(
            f"ports: unknown component {unknown[0]!r}; choose from {', '.join(PORT_NAMES)}",
            field="ports",
            value=unknown[0],
        )
    binaries = binaries_module.ensure(options.version, options.bin_dirs, quiet=False)
    # Built (or found) before anything starts, like the node binaries: a failed build names
    # its log with nothing to tear down.
    kueue_build = kueue_binaries.ensure(extra_dirs=options.bin_dirs) if options.kueue else None
    shim = ShimBuild(options.shim_build or default_shim_build())
    real, note = realnode.choose(nodes, shim, layout.root) if options.real_nodes else ([], "")
    node_binaries = None
    if real:
        # Before anything starts: a missing or broken runc, CNI plugin, kubelet or containerd
        # build fails here, naming it, with nothing to tear down but the claim.
        try:
            node_binaries = binaries_module.ensure_node(options.version, options.bin_dirs)
        except BaseException:
            realnode.release(layout.root)
            raise
    layout.prepare()
    record = LabRecord(version=options.version, ports={**free_ports(PORT_NAMES), **options.ports})
    record.inventory = str(options.inventory.resolve()) if options.inventory else ""
    record.real_node_note = note
    if note:
        say(f"no real node: {note}")
    try:
        _start_all(layout, options, binaries, node_binaries, record, nodes, real, say)
        if kueue_build is not None:
            _start_kueue(layout, options, kueue_build, record, say)
    except BaseException:
        _teardown(layout, record)
        raise
    return record


def _start_all(
    layout: Layout,
    options: LabOptions,
    binaries: binaries_module.Binaries,
    node_binaries: binaries_module.NodeBinaries | None,
    record: LabRecord,
    nodes: Sequence[LabNode],
    real: Sequence[LabNode],
    say: Callable[[str], None],
) -> None:
    certs = prepare_pki(layout)
    record.etcd_data = _etcd_data_dir()
    state.save(layout, record)
    ports = record.ports
    server = f"https://{HOST}:{ports['kube-apiserver']}"
    admin = configs.write_kubeconfig(layout.kubeconfig, server, certs.ca.cert, certs.admin, "admin")
    services_kubeconfig = _services_kubeconfig(layout, certs, record.ports)
    webhook_url = f"https://{HOST}:{ports['vslice-webhook']}/mutate"
    configs.write_admission_config(layout.config, webhook_url, certs.webhook_client)
    _launch(
        layout,
        record,
        say,
        [components.etcd(binaries, Path(record.etcd_data), ports["etcd"], ports["etcd-peer"])],
        options.timeout,
    )
    apiserver = components.kube_apiserver(
        binaries,
        layout,
        certs,
        ports["kube-apiserver"],
        ports["etcd"],
        profiling=options.apiserver_profiling,
    )
    _launch(layout, record, say, [apiserver], options.timeout)
    group = _control_plane(layout, options, binaries, certs, record, server, admin)
    _launch(layout, record, say, group, options.timeout)
    cluster = LabCluster(admin)
    with_dra = dra.supported(options.version)
    parts = lab_parts(with_webhook=record.webhook)
    say(f"installing vslice's objects: {', '.join(parts)}")
    cluster.install(lab_values(webhook_url, certs.ca.cert, device_class=with_dra), parts)
    simulated = [node for node in nodes if node not in real]
    if simulated:
        say(f"creating {len(simulated)} simulated GPU node(s)")
        record.nodes = cluster.create_nodes(simulated, options.extra_node_resources)
        state.save(layout, record)
        cluster.wait_nodes_ready(record.nodes, options.timeout)
    if with_dra:
        published = cluster.publish_slices(simulated)
        say(f"publishing {published} simulated ResourceSlice(s) for the DRA class {DRIVER}")
    if real and node_binaries is not None:
        context = realnode.NodeContext(
            layout=layout,
            record=record,
            certs=certs,
            server=server,
            admin=admin,
            services_kubeconfig=services_kubeconfig,
            inventory_file=options.inventory or DEFAULT_INVENTORY,
            binaries=node_binaries,
            shim=ShimBuild(options.shim_build or default_shim_build()),
            timeout=options.timeout,
            launch=lambda group: _launch(layout, record, say, group, options.timeout),
            say=say,
            dra=with_dra,
        )
        for node in real:
            realnode.start(node, context)
            record.nodes.append(node.name)
            state.save(layout, record)
    _start_prometheus(layout, options, certs, record, [node.name for node in real], say)


def _start_prometheus(
    layout: Layout,
    options: LabOptions,
    certs: Certificates,
    record: LabRecord,
    real: Sequence[str],
    say: Callable[[str], None],
) -> None:
    """Last, when every target's port is known; without the binary only a note (unless asked
    for explicitly)."""
    if options.prometheus is False:
        return
    if options.prometheus is None and not (record.webhook or real):
        return  # nothing of vslice's to scrape: Kubernetes and simulated nodes only
    found = prometheus_binaries.locate(options.bin_dirs)
    if found is None:
        message = (
            "Prometheus not found, so nothing scrapes the lab's metrics: "
            + prometheus_binaries.HOW_TO_GET
        )
        if options.prometheus:
            raise LabError(message, component=prometheus.PORT_NAME)
        say(message)
        return
    port = record.ports[prometheus.PORT_NAME]
    component = prometheus.component(found, layout, certs, record, real, port)
    _launch(layout, record, say, [component], options.timeout)
    say(f"Prometheus scrapes the lab's services: {prometheus.url(record)}")


def _start_kueue(
    layout: Layout,
    options: LabOptions,
    build: kueue_binaries.KueueBuild,
    record: LabRecord,
    say: Callable[[str], None],
) -> None:
    """CRDs and webhooks first, then the controller, then the example queues (which pass its
    webhooks, so only once it answers)."""
    certs = prepare_pki(layout)
    cluster = LabCluster(layout.kubeconfig)
    try:
        say(f"installing Kueue {build.version}'s CRDs and webhooks")
        objects = kueue.api_objects(build, certs, record.ports[kueue.WEBHOOK_PORT])
        cluster.apply(objects)
        crds = [o["metadata"]["name"] for o in objects if o["kind"] == "CustomResourceDefinition"]
        cluster.wait_crds_established(crds, options.timeout)
        component = kueue.component(build, layout, certs, record.ports)
        _launch(layout, record, say, [component], options.timeout)
        teams = ", ".join(team.name for team in kueue.LAB_TEAMS)
        say(f"creating Kueue's example queues: {teams}")
        cluster.install(kueue.queue_values(), kueue.QUEUE_PARTS)
    finally:
        cluster.close()


def _control_plane(
    layout: Layout,
    options: LabOptions,
    binaries: binaries_module.Binaries,
    certs: Certificates,
    record: LabRecord,
    server: str,
    admin: Path,
) -> list[Component]:
    ports = record.ports
    installed = services_installed()
    start_services = options.services if options.services is not None else all(installed.values())
    if start_services and not all(installed.values()):
        missing = ", ".join(name for name, ok in installed.items() if not ok)
        raise LabError(
            f"vslice services not installed: {missing}", component="vslice-" + missing.split(",")[0]
        )
    cm_config = configs.write_kubeconfig(
        layout.config / "kube-controller-manager.kubeconfig",
        server,
        certs.ca.cert,
        certs.controller_manager,
        "system:kube-controller-manager",
    )
    sched_kubeconfig = configs.write_kubeconfig(
        layout.config / "kube-scheduler.kubeconfig",
        server,
        certs.ca.cert,
        certs.scheduler,
        "system:kube-scheduler",
    )
    extender_url = options.extender_url
    if extender_url is None and start_services:
        extender_url = f"https://{HOST}:{ports['vslice-scheduler']}"
    record.extender_url = extender_url or ""
    sched_config = configs.write_scheduler_config(
        layout.config / "kube-scheduler.yaml",
        sched_kubeconfig,
        extender_url,
        tls=configs.ExtenderTls(certs.ca.cert, certs.scheduler),
        extra=options.extra_extenders,
        device_class=dra.supported(options.version),
    )
    group = [
        components.kube_controller_manager(
            binaries, certs, cm_config, ports["kube-controller-manager"], options.node_lease_seconds
        ),
        components.kube_scheduler(
            binaries, certs, sched_kubeconfig, sched_config, ports["kube-scheduler"]
        ),
        components.kwok(binaries, admin, ports["kwok"], options.node_lease_seconds),
    ]
    if start_services:
        record.webhook = True
        group += _services(
            layout, certs, admin, ports, options.extender_settings, dra.supported(options.version)
        )
    return group


def _services(
    layout: Layout,
    certs: Certificates,
    admin: Path,
    ports: dict[str, int],
    extender_settings: dict[str, Any],
    by_name: bool,
) -> list[Component]:
    """The extender and the webhook; ``by_name``: the lab's DeviceClass maps the GPU name
    (on every version with the DRA path), which the webhook must know."""
    # HTTPS; the verbs answer only kube-scheduler's client certificate (CN
    # system:kube-scheduler, from the lab CA). Allocations are signed with the lab's key.
    services_kubeconfig = _services_kubeconfig(layout, certs, ports)
    extender = configs.write_settings(
        layout.extender_settings,
        {
            "kubeconfig": str(services_kubeconfig),
            "listen": f"{HOST}:{ports['vslice-scheduler']}",
            "allocation_key_file": str(certs.allocation_keys),
            "tls_cert_file": str(certs.extender.cert),
            "tls_key_file": str(certs.extender.key),
            "client_ca_file": str(certs.ca.cert),
            "client_names": ["system:kube-scheduler"],
            # One replica holding a Lease binds with one API write, without node locks. The
            # identity is fixed: a restarted lab extender (the old one is gone) takes its own
            # Lease back at once instead of waiting for it to expire.
            "leader_election": True,
            "identity": "vslice-lab-extender",
            **extender_settings,
        },
    )
    webhook = configs.write_settings(
        layout.webhook_settings,
        {
            "kubeconfig": str(services_kubeconfig),
            "listen": f"{HOST}:{ports['vslice-webhook']}",
            "tls_cert_file": str(certs.webhook.cert),
            "tls_key_file": str(certs.webhook.key),
            # /mutate answers only the API server's client certificate (admission config).
            "client_ca_file": str(certs.ca.cert),
            "client_names": [configs.WEBHOOK_CLIENT_NAME],
            "scheduler_name": "vslice-scheduler",
            "dra_extended_resource": by_name,
        },
    )
    # /readyz: the extender answers filter/bind only once its ledger is loaded.
    extender_probe = Probe(f"https://{HOST}:{ports['vslice-scheduler']}/readyz", ca=certs.ca.cert)
    webhook_probe = Probe(f"https://{HOST}:{ports['vslice-webhook']}/healthz", ca=certs.ca.cert)
    return [
        components.vslice_service("scheduler", extender, extender_probe, ports["vslice-scheduler"]),
        components.vslice_service("webhook", webhook, webhook_probe, ports["vslice-webhook"]),
    ]


def services_kubeconfig_path(layout: Layout) -> Path:
    """The kubeconfig of the lab's vslice services (extender, webhook, device plugins,
    monitors): tests that must write vslice's state themselves use it too."""
    return layout.config / "vslice-services.kubeconfig"


def _services_kubeconfig(layout: Layout, certs: Certificates, ports: dict[str, int]) -> Path:
    server = f"https://{HOST}:{ports['kube-apiserver']}"
    path = services_kubeconfig_path(layout)
    return configs.write_kubeconfig(path, server, certs.ca.cert, certs.services, "vslice-services")


def prepare_pki(layout: Layout) -> Certificates:
    """The lab's certificates (reused when the state directory already has them)."""
    directory = layout.pki
    ca = pki.ensure_ca(directory)
    loopback = ("127.0.0.1", "localhost")
    api_hosts = (
        *loopback,
        "10.0.0.1",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
    )
    return Certificates(
        ca=ca,
        apiserver=pki.issue(
            ca,
            directory,
            "kube-apiserver",
            common_name="kube-apiserver",
            hosts=api_hosts,
            server=True,
        ),
        admin=pki.issue(
            ca, directory, "admin", common_name="vslice-lab-admin", organization="system:masters"
        ),
        controller_manager=pki.issue(
            ca,
            directory,
            "kube-controller-manager",
            common_name="system:kube-controller-manager",
            hosts=loopback,
            server=True,
        ),
        scheduler=pki.issue(
            ca,
            directory,
            "kube-scheduler",
            common_name="system:kube-scheduler",
            hosts=loopback,
            server=True,
        ),
        webhook=pki.issue(
            ca,
            directory,
            "vslice-webhook",
            common_name="vslice-webhook",
            hosts=loopback,
            server=True,
        ),
        service_account=pki.ensure_signing_key(directory),
        # kubeadm's apiserver-kubelet-client; in system:masters so kubelets' webhook
        # authorization allows it everything (the lab has no further RBAC for it).
        kubelet_client=pki.issue(
            ca,
            directory,
            "kube-apiserver-kubelet-client",
            common_name="kube-apiserver-kubelet-client",
            organization="system:masters",
        ),
        allocation_keys=pki.ensure_allocation_keys(directory),
        extender=pki.issue(
            ca,
            directory,
            "vslice-scheduler",
            common_name="vslice-scheduler",
            hosts=loopback,
            server=True,
            client=False,
        ),
        # The services' identity towards the API server. system:masters keeps the lab free of
        # RBAC for them; vslice:services is what the state-annotation policy exempts (the
        # admin is not: nobody but vslice writes vslice's state, an administrator included).
        services=pki.issue(
            ca,
            directory,
            "vslice-services",
            common_name="vslice-services",
            organization="system:masters",
            groups=(SERVICES_GROUP,),
        ),
        webhook_client=pki.issue(
            ca, directory, "kube-apiserver-webhook-client", common_name=configs.WEBHOOK_CLIENT_NAME
        ),
        prometheus=pki.issue(ca, directory, "vslice-prometheus", common_name="vslice-prometheus"),
        node_reader=pki.issue(
            ca, directory, realnode.NODE_READER, common_name=realnode.NODE_READER
        ),
    )


def _etcd_data_dir() -> str:
    shm = Path("/dev/shm")
    parent = str(shm) if shm.is_dir() and shutil.disk_usage(shm).free > 1 << 30 else None
    return tempfile.mkdtemp(prefix="vslice-lab-etcd-", dir=parent)


def _launch(
    layout: Layout,
    record: LabRecord,
    say: Callable[[str], None],
    group: Sequence[Component],
    timeout: float,
) -> None:
    """Start a group of components and wait until each is healthy (or raise LabError)."""
    started: list[tuple[Component, processes.ProcessRecord]] = []
    for component in group:
        say(f"starting {component.name}")
        log = layout.log(component.name)
        if component.port and in_use(component.port):
            raise LabError(
                f"{component.name} cannot start: port {HOST}:{component.port} is already in use "
                f"(log: {log})",
                component=component.name,
                log=log,
            )
        env = {**_base_env(), **component.env}
        try:
            process = processes.start(component.name, component.argv, log, env, component.env)
        except OSError as error:
            raise LabError(
                f"{component.name} cannot start: {error} (log: {log})",
                component=component.name,
                log=log,
            ) from error
        record.processes.append(process)
        state.save(layout, record)
        started.append((component, process))
    for component, process in started:
        _wait_healthy(component, process, timeout)


def _base_env() -> dict[str, str]:
    return dict(os.environ)


def _wait_healthy(component: Component, process: processes.ProcessRecord, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    reason: str | None = "not checked"
    while time.monotonic() < deadline:
        if not processes.alive(process):
            raise LabError(
                f"{component.name} exited during start; its log ({process.log}) ends with:\n"
                f"{processes.tail(process.log)}",
                component=component.name,
                log=Path(process.log),
            )
        reason = component.probe.check()
        if reason is None:
            return
        time.sleep(0.2)
    raise LabError(
        f"{component.name} did not become healthy within {timeout:.0f}s ({reason}); its log "
        f"({process.log}) ends with:\n{processes.tail(process.log)}",
        component=component.name,
        log=Path(process.log),
    )


def _teardown(layout: Layout, record: LabRecord) -> list[str]:
    """Stop every recorded process (last started first), clean what real nodes left on the
    host, drop etcd's data and the record."""
    stopped = [p.name for p in reversed(record.processes) if processes.stop(p)]
    for problem in realnode.stop(layout, record):
        print(f"vslice lab: could not undo: {problem}", file=sys.stderr)
    if record.etcd_data:
        with contextlib.suppress(OSError):
            shutil.rmtree(record.etcd_data)
    state.forget(layout)
    return stopped


def down(state_dir: Path = DEFAULT_STATE_DIR) -> list[str] | None:
    """Stop the lab in ``state_dir``; the names of the components that were running, or None
    when no lab is recorded there."""
    layout = Layout.at(state_dir)
    record = state.load(layout)
    if record is None:
        return None
    return _teardown(layout, record)


@dataclass(frozen=True)
class ComponentStatus:
    """One line of ``status``."""

    name: str
    pid: int
    running: bool
    problem: str | None
    address: str = ""
    """Where it answers (scheme, host and port of its health probe; a socket for containerd)."""

    @property
    def healthy(self) -> bool:
        return self.running and self.problem is None


def status(state_dir: Path = DEFAULT_STATE_DIR) -> tuple[LabRecord, list[ComponentStatus]] | None:
    """Each recorded component's state and health, or None when no lab is recorded."""
    layout = Layout.at(state_dir)
    record = state.load(layout)
    if record is None:
        return None
    probes = _probes(layout, record)
    lines = []
    for process in record.processes:
        running = processes.alive(process)
        problem = None if not running else probes[process.name].check()
        probe = probes[process.name]
        lines.append(
            ComponentStatus(
                process.name,
                process.pid,
                running,
                problem if running else "not running",
                _address(probe.url),
            )
        )
    return record, lines


def _address(url: str) -> str:
    """``https://127.0.0.1:6443/readyz`` -> ``https://127.0.0.1:6443``."""
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0]}" if scheme != "cri" else rest


def ready_nodes(state_dir: Path = DEFAULT_STATE_DIR) -> set[str] | None:
    """Names of the lab's nodes that are Ready, or None if the API does not answer."""
    layout = Layout.at(state_dir)
    try:
        cluster = LabCluster(layout.kubeconfig)
    except VsliceError:
        return None
    try:
        return cluster.ready_nodes()
    except VsliceError:
        return None
    finally:
        cluster.close()


def _probes(layout: Layout, record: LabRecord) -> dict[str, Probe]:
    ca = layout.pki / "ca.crt"
    admin = pki.KeyPair(layout.pki / "admin.crt", layout.pki / "admin.key")
    port = record.ports
    real: dict[str, Probe] = {}
    for name in record.real_nodes:
        socket_path = realnode.node_layout(layout, name).containerd_socket
        real[f"containerd-{name}"] = Probe(f"cri://{socket_path}")
        if f"kubelet-healthz-{name}" in port:
            real[f"kubelet-{name}"] = Probe(
                f"http://{HOST}:{port[f'kubelet-healthz-{name}']}/healthz"
            )
        for component in ("device-plugin", "monitor"):
            if f"{component}-{name}" in port:
                real[f"{component}-{name}"] = realnode.health_probe(port[f"{component}-{name}"], ca)
    return real | {
        "etcd": Probe(f"http://{HOST}:{port['etcd']}/health"),
        "kube-apiserver": Probe(
            f"https://{HOST}:{port['kube-apiserver']}/readyz", ca=ca, client=admin
        ),
        "kube-controller-manager": Probe(
            f"https://{HOST}:{port['kube-controller-manager']}/healthz", ca=ca
        ),
        "kube-scheduler": Probe(f"https://{HOST}:{port['kube-scheduler']}/healthz", ca=ca),
        "kwok": Probe(f"http://{HOST}:{port['kwok']}/healthz"),
        "vslice-scheduler": Probe(f"https://{HOST}:{port['vslice-scheduler']}/readyz", ca=ca),
        "vslice-webhook": Probe(f"https://{HOST}:{port['vslice-webhook']}/healthz", ca=ca),
        prometheus.PORT_NAME: prometheus.probe(record),
        kueue.COMPONENT: kueue.probe(port.get(kueue.HEALTH_PORT, 0)),
    }


def import_image(state_dir: Path, archive: Path) -> list[str]:
    """Import an OCI image archive into the containerd of every real node of the running lab;
    the nodes' names. Pods then use the image with ``imagePullPolicy: IfNotPresent`` (the
    default for a tagged image other than ``:latest``) or ``Never``."""
    layout = Layout.at(state_dir)
    record = state.load(layout)
    if record is None:
        raise LabError(f"no lab recorded in {state_dir}", component="lab")
    if not record.real_nodes:
        why = f" ({record.real_node_note})" if record.real_node_note else ""
        raise LabError(f"the lab in {state_dir} has no real node{why}", component="lab")
    if not archive.is_file():
        raise InvalidRequest(
            f"archive {str(archive)!r} is not a file", field="archive", value=str(archive)
        )
    ctr = binaries_module.ensure_node(record.version).ctr
    for name in record.real_nodes:
        node = realnode.node_layout(layout, name)
        realnode.import_image(node, ctr, archive.resolve(), layout.log(f"containerd-{name}"))
    return list(record.real_nodes)


def restart(state_dir: Path, name: str, *, kill: bool = False) -> processes.ProcessRecord:
    """Stop one component of the running lab (SIGKILL with ``kill``, else SIGTERM) and start it
    again with the same command line; its new record. Tests use it to restart a kubelet or a
    device plugin under running pods."""
    layout = Layout.at(state_dir)
    record = state.load(layout)
    if record is None:
        raise LabError(f"no lab recorded in {state_dir}", component=name)
    index = next((i for i, p in enumerate(record.processes) if p.name == name), None)
    if index is None:
        known = ", ".join(p.name for p in record.processes)
        raise InvalidRequest(f"no component {name!r}; running: {known}", field="name", value=name)
    old = record.processes[index]
    if kill and processes.alive(old):
        processes.kill(old)
    processes.stop(old)
    new = processes.start(
        name, old.argv, Path(old.log), {**_base_env(), **dict(old.env)}, dict(old.env)
    )
    record.processes[index] = new
    state.save(layout, record)
    return new
