"""A real Kueue in the lab (``vslice lab up --kueue``): team queues for GPU slices.

Kueue's controller (built from its Go module, ``vslice_build.kueue``) runs as one more lab
process, on loopback like the rest, with the resource transformations ``vslice kueue config``
prints for a site (``vslice_control.install.kueue.configuration``: one source) and the example
queues of :data:`LAB_TEAMS`.

How it fits the lab's rules:

- **Webhooks over HTTPS with the lab's CA.** The lab has no Service network, so Kueue's own
  webhook configurations (copied from its module) are rewritten from their in-cluster Service
  to ``https://127.0.0.1:<port>/<path>`` with the lab CA as ``caBundle``; Kueue serves them with
  a certificate from the lab CA (``webhook.certDir``). Only the webhooks of what the lab
  enables are registered (Kueue's own objects and ``batch/v1`` Jobs): one for a framework that
  is not enabled would answer 404 and, with ``failurePolicy: Fail``, block that kind.
- **No change to the host.** With its internal certificate management off (it would want an
  in-cluster Service), Kueue reads its metrics certificate from the fixed path
  ``/etc/kueue/metrics/certs``. The lab does not write into ``/etc``: Kueue starts in a private
  mount namespace (``unshare --mount``) in which ``/etc`` is an overlay of the host's ``/etc``
  and ``<state>/kueue/etc``, which holds only that certificate; the host's ``/etc`` is never
  written. The visibility server (another fixed path, ``/visibility``, and an aggregated API) is
  off; a job's place in its queue is computed by vslice from the Workloads (``vslice_kube``).
- **One lab, one client.** Kueue uses the lab's admin kubeconfig, as kwok does.

The CRDs go in before Kueue starts; the queues after it answers (they pass its webhooks).
"""

from __future__ import annotations

import base64
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from vslice_build.kueue import KueueBuild
from vslice_control.install.kueue import configuration
from vslice_control.install.values import InstallValues, KueueTeamValues, parse_values

from vslice_lab import pki
from vslice_lab.cluster import POD_SECURITY_LEVEL
from vslice_lab.components import Certificates, Component
from vslice_lab.health import Probe
from vslice_lab.layout import Layout
from vslice_lab.ports import HOST

WEBHOOK_PORT = "kueue-webhook"
HEALTH_PORT = "kueue-health"
METRICS_PORT = "kueue-metrics"
PORT_NAMES = (WEBHOOK_PORT, HEALTH_PORT, METRICS_PORT)
COMPONENT = "kueue"
NAMESPACE = "kueue-system"
FRAMEWORKS = ("batch/job",)
WEBHOOK_GROUPS = frozenset({"kueue.x-k8s.io", "batch"})
"""The API groups whose webhooks the lab registers: Kueue's own objects and Jobs."""
WEBHOOK_PREFIX = "vslice-lab-kueue-"
METRICS_CERT_DIR = Path("kueue/metrics/certs")
"""Below ``/etc``: where Kueue reads its metrics certificate (fixed in its ``main``)."""

LAB_TEAMS = (
    KueueTeamValues(name="team-a", namespace="team-a", gpus=4, memory="40Gi", cores=400),
    KueueTeamValues(name="team-b", namespace="team-b", gpus=4, memory="40Gi", cores=400),
)
"""The lab's example queues: two teams of 40 GiB of GPU memory each, one cohort, so either
borrows what the other leaves unused (docs/kueue.md)."""


def root(layout: Layout) -> Path:
    return layout.root / "kueue"


def settings(ports: Mapping[str, int], cert_dir: Path) -> dict[str, Any]:
    """Kueue's Configuration for the lab: vslice's transformations and loopback endpoints."""
    fragment = configuration()
    return {
        "apiVersion": fragment["apiVersion"],
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "manageJobsWithoutQueueName": False,
        "health": {"healthProbeBindAddress": f"{HOST}:{ports[HEALTH_PORT]}"},
        "metrics": {"bindAddress": f"{HOST}:{ports[METRICS_PORT]}"},
        "webhook": {"host": HOST, "port": ports[WEBHOOK_PORT], "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "integrations": {"frameworks": list(FRAMEWORKS)},
        "featureGates": {"VisibilityOnDemand": False},
        "resources": fragment["resources"],
    }


def webhook_configurations(manifest: str, port: int, ca_bundle: bytes) -> list[dict[str, Any]]:
    """Kueue's webhook configurations, limited to :data:`WEBHOOK_GROUPS` and pointed at the
    lab's loopback URL (see the module docstring)."""
    found = []
    for document in yaml.safe_load_all(manifest):
        if not document or document.get("kind") not in (
            "MutatingWebhookConfiguration",
            "ValidatingWebhookConfiguration",
        ):
            continue
        hooks = []
        for hook in document.get("webhooks") or []:
            groups = {group for rule in hook.get("rules") or [] for group in rule["apiGroups"]}
            if not groups or not groups <= WEBHOOK_GROUPS:
                continue
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {
                "url": f"https://{HOST}:{port}{path}",
                "caBundle": base64.b64encode(ca_bundle).decode(),
            }
            hooks.append(hook)
        kind = "mutating" if document["kind"].startswith("Mutating") else "validating"
        document["metadata"] = {"name": f"{WEBHOOK_PREFIX}{kind}"}
        document["webhooks"] = hooks
        found.append(document)
    return found


def crds(build: KueueBuild) -> list[dict[str, Any]]:
    """Kueue's CustomResourceDefinitions as its module ships them (no conversion webhook:
    every version the lab and vslice use is the stored one, v1beta2)."""
    documents = []
    # libyaml's loader where PyYAML has it: Kueue's CRDs are 40,000 lines, over a second with
    # the pure-Python one.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    for path in build.crds:
        for document in yaml.load_all(path.read_text(), Loader=loader):
            if document:
                document.get("spec", {}).pop("conversion", None)
                documents.append(document)
    return documents


def api_objects(build: KueueBuild, certs: Certificates, port: int) -> list[dict[str, Any]]:
    """What goes in before Kueue starts: its namespace, CRDs and webhook configurations."""
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    hooks = webhook_configurations(build.webhooks.read_text(), port, certs.ca.cert.read_bytes())
    return [namespace, *crds(build), *hooks]


def queue_values(teams: Sequence[KueueTeamValues] = LAB_TEAMS) -> InstallValues:
    """The install values of the lab's queues: the teams' namespaces are GPU namespaces
    (Pod Security, like the lab's ``default``), and their queues are the part ``kueue-queues``
    a site's role installs too (one source)."""
    return parse_values(
        {
            "gpu_namespaces": sorted({team.namespace or team.name for team in teams}),
            "pod_security_level": POD_SECURITY_LEVEL,
            "kueue": {"queues": True, "teams": [team.model_dump() for team in teams]},
        }
    )


QUEUE_PARTS = ("gpu-namespaces", "kueue-queues")


def component(
    build: KueueBuild, layout: Layout, certs: Certificates, ports: Mapping[str, int]
) -> Component:
    """Write Kueue's certificates and configuration under ``<state>/kueue``; the process."""
    base = root(layout)
    shutil.rmtree(base, ignore_errors=True)
    serving = pki.issue(
        certs.ca,
        layout.pki,
        "kueue",
        common_name="kueue",
        hosts=("127.0.0.1", "localhost"),
        server=True,
        client=False,
    )
    cert_dir = base / "certs"
    etc = base / "etc"
    for directory in (cert_dir, etc / METRICS_CERT_DIR):
        directory.mkdir(parents=True)
        shutil.copyfile(serving.cert, directory / "tls.crt")
        shutil.copyfile(serving.key, directory / "tls.key")
    (base / "etc-work").mkdir()
    config = base / "config.yaml"
    config.write_text(yaml.safe_dump(settings(ports, cert_dir), sort_keys=False))
    argv = [
        *private_etc(etc, base / "etc-work"),
        str(build.binary),
        f"--config={config}",
        f"--kubeconfig={layout.kubeconfig}",
    ]
    return Component(COMPONENT, argv, probe(ports[HEALTH_PORT]), port=ports[WEBHOOK_PORT])


def private_etc(upper: Path, work: Path) -> list[str]:
    """The command prefix that runs the rest in a mount namespace whose ``/etc`` is the host's
    with ``upper`` laid over it (root: a plain mount namespace; otherwise a user namespace
    mapping the caller to root, where overlay mounts are allowed too)."""
    unshare = shutil.which("unshare") or "unshare"
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    mount = f"mount -t overlay vslice-lab-etc -o lowerdir=/etc,upperdir={upper},workdir={work} /etc"
    return [
        unshare,
        *user,
        "--mount",
        "--propagation",
        "private",
        "--",
        "sh",
        "-c",
        f'{mount} && exec "$0" "$@"',
    ]


def probe(health_port: int) -> Probe:
    """Kueue is ready once its webhook server listens (its own ``/readyz`` check)."""
    return Probe(f"http://{HOST}:{health_port}/readyz")
