"""The command line and health probe of each lab component.

Start order (each waits for the previous group to be healthy): etcd; kube-apiserver; then
kube-controller-manager, kube-scheduler, kwok and the vslice services together. Every
component listens on loopback only, on ports picked at ``up``.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from vslice_build.binaries import Binaries

from vslice_lab.configs import ADMISSION_CONFIG
from vslice_lab.health import Probe
from vslice_lab.layout import Layout
from vslice_lab.pki import KeyPair
from vslice_lab.ports import HOST

SERVICE_CIDR = "10.0.0.0/24"
KWOK_NODE_SELECTOR = "kwok.x-k8s.io/node=fake"
STAGES = Path(__file__).with_name("kwok-stages.yaml")


@dataclass(frozen=True)
class Component:
    """One process of the lab."""

    name: str
    argv: list[str]
    probe: Probe
    env: dict[str, str] = field(default_factory=dict)
    port: int = 0


@dataclass(frozen=True)
class Certificates:
    """The certificates a lab's components use (see ``lab.prepare_pki``)."""

    ca: KeyPair
    apiserver: KeyPair
    admin: KeyPair
    controller_manager: KeyPair
    scheduler: KeyPair
    webhook: KeyPair
    service_account: KeyPair
    kubelet_client: KeyPair
    """The API server's client certificate towards kubelets (logs, exec)."""
    allocation_keys: Path
    """Allocation proof keys (``vslice_core.proof``): the extender signs, device plugins verify."""
    extender: KeyPair
    """The extender's serving certificate (kube-scheduler calls it over HTTPS)."""
    services: KeyPair
    """The client certificate of vslice's own services (group ``vslice:services``, which the
    state-annotation admission policy lets through)."""
    webhook_client: KeyPair
    """The API server's client certificate towards the webhook (``configs.WEBHOOK_CLIENT_NAME``)."""
    prometheus: KeyPair
    """The lab Prometheus's client certificate towards the https services (CN vslice-prometheus)."""
    node_reader: KeyPair
    """An operator's client certificate (CN vslice-admin): with the Prometheus's, the only one
    the real nodes' agents and monitors answer /status and /metrics to."""


# Simulated nodes' lease duration (kwok renews it, which keeps them Ready); 40 s is the
# controller manager's default grace period.
NODE_LEASE_SECONDS = 40


def _etcd_supports_no_fsync(etcd: Path) -> bool:
    help_text = subprocess.run(
        [str(etcd), "--help"], capture_output=True, text=True, check=False, timeout=20
    )
    return "unsafe-no-fsync" in help_text.stdout + help_text.stderr


def etcd(binaries: Binaries, data_dir: Path, port: int, peer_port: int) -> Component:
    client_url = f"http://{HOST}:{port}"
    argv = [
        str(binaries.etcd),
        "--name=vslice-lab",
        f"--data-dir={data_dir}",
        f"--listen-client-urls={client_url}",
        f"--advertise-client-urls={client_url}",
        f"--listen-peer-urls=http://{HOST}:{peer_port}",
        f"--initial-advertise-peer-urls=http://{HOST}:{peer_port}",
        f"--initial-cluster=vslice-lab=http://{HOST}:{peer_port}",
        "--quota-backend-bytes=8589934592",
        "--log-level=warn",
    ]
    if _etcd_supports_no_fsync(binaries.etcd):
        argv.append("--unsafe-no-fsync")
    return Component("etcd", argv, Probe(f"{client_url}/health"), port=port)


def kube_apiserver(
    binaries: Binaries,
    layout: Layout,
    certs: Certificates,
    port: int,
    etcd_port: int,
    profiling: bool = False,
) -> Component:
    argv = [
        str(binaries.kube_apiserver),
        f"--etcd-servers=http://{HOST}:{etcd_port}",
        f"--secure-port={port}",
        f"--bind-address={HOST}",
        f"--advertise-address={HOST}",
        f"--tls-cert-file={certs.apiserver.cert}",
        f"--tls-private-key-file={certs.apiserver.key}",
        f"--client-ca-file={certs.ca.cert}",
        # Front-proxy settings only so that delegating components find a complete
        # authentication config map; no front-proxy certificate is ever issued.
        f"--requestheader-client-ca-file={certs.ca.cert}",
        "--requestheader-allowed-names=front-proxy-client",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=NamespaceLifecycle,ServiceAccount,NodeRestriction,"
        "MutatingAdmissionWebhook,ValidatingAdmissionWebhook,ResourceQuota",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={certs.service_account.cert}",
        f"--service-account-signing-key-file={certs.service_account.key}",
        "--allow-privileged=true",
        # Real nodes: the API server reaches kubelets on loopback, verifies their serving
        # certificates against the lab CA and authenticates with its own client certificate,
        # so kubelets keep webhook authentication and authorization.
        f"--kubelet-client-certificate={certs.kubelet_client.cert}",
        f"--kubelet-client-key={certs.kubelet_client.key}",
        f"--kubelet-certificate-authority={certs.ca.cert}",
        "--kubelet-preferred-address-types=InternalIP",
        "--endpoint-reconciler-type=none",
        # Off as on a hardened cluster; the scheduling benchmark's --pprof turns it on.
        f"--profiling={str(profiling).lower()}",
        f"--cert-dir={layout.pki}",
        # Written by ``lab.up`` first: the client certificate the API server shows the webhook.
        f"--admission-control-config-file={layout.config / ADMISSION_CONFIG}",
    ]
    probe = Probe(f"https://{HOST}:{port}/readyz", ca=certs.ca.cert, client=certs.admin)
    return Component("kube-apiserver", argv, probe, port=port)


def _serving(certs: Certificates, pair: KeyPair, kubeconfig: Path, port: int) -> list[str]:
    return [
        f"--secure-port={port}",
        f"--bind-address={HOST}",
        f"--tls-cert-file={pair.cert}",
        f"--tls-private-key-file={pair.key}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
    ]


def kube_controller_manager(
    binaries: Binaries,
    certs: Certificates,
    kubeconfig: Path,
    port: int,
    node_lease_seconds: int = NODE_LEASE_SECONDS,
) -> Component:
    argv = [
        str(binaries.kube_controller_manager),
        f"--kubeconfig={kubeconfig}",
        *_serving(certs, certs.controller_manager, kubeconfig, port),
        "--leader-elect=false",
        f"--service-account-private-key-file={certs.service_account.key}",
        f"--root-ca-file={certs.ca.cert}",
        f"--cluster-signing-cert-file={certs.ca.cert}",
        f"--cluster-signing-key-file={certs.ca.key}",
        "--use-service-account-credentials=true",
        "--kube-api-qps=200",
        "--kube-api-burst=400",
    ]
    if node_lease_seconds > NODE_LEASE_SECONDS:
        # Longer node leases than the default grace period would read as nodes gone.
        argv.append(f"--node-monitor-grace-period={node_lease_seconds + 10}s")
    probe = Probe(f"https://{HOST}:{port}/healthz", ca=certs.ca.cert)
    return Component("kube-controller-manager", argv, probe, port=port)


def kube_scheduler(
    binaries: Binaries, certs: Certificates, kubeconfig: Path, config: Path, port: int
) -> Component:
    argv = [
        str(binaries.kube_scheduler),
        f"--config={config}",
        *_serving(certs, certs.scheduler, kubeconfig, port),
    ]
    probe = Probe(f"https://{HOST}:{port}/healthz", ca=certs.ca.cert)
    return Component("kube-scheduler", argv, probe, port=port)


def kwok(
    binaries: Binaries, kubeconfig: Path, port: int, node_lease_seconds: int = NODE_LEASE_SECONDS
) -> Component:
    argv = [
        str(binaries.kwok),
        f"--kubeconfig={kubeconfig}",
        "--manage-all-nodes=false",
        f"--manage-nodes-with-annotation-selector={KWOK_NODE_SELECTOR}",
        f"--server-address={HOST}:{port}",
        f"--config={STAGES}",
        f"--node-lease-duration-seconds={node_lease_seconds}",
    ]
    return Component("kwok", argv, Probe(f"http://{HOST}:{port}/healthz"), port=port)


def vslice_service(service: str, settings: Path, probe: Probe, port: int) -> Component:
    """``vslice serve <service> --config <settings>`` with this interpreter."""
    argv = [sys.executable, "-m", "vslice.cli", "serve", service, "--config", str(settings)]
    return Component(f"vslice-{service}", argv, probe, {"PYTHONUNBUFFERED": "1"}, port)
