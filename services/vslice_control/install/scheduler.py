"""kube-scheduler's configuration with the vslice extender (a file on the control plane host,
named by kube-scheduler's ``--config``).

Two profiles, ``default-scheduler`` and vslice's (the webhook routes GPU pods to it), and the
extender registered for both: filter + bind, ``nodeCacheCapable`` (node names only: the
extender keeps its own node cache), not ignorable, and the vslice resource names as managed
resources, so kube-scheduler consults it only for pods that ask one of them. Only the GPU
count is left to kube-scheduler's own fit check too (each node advertises one device per GPU
slot); memory, percentage and cores are ``ignoredByScheduler`` because no node advertises them.
An ``https`` extender is called with ``enableHTTPS`` and, with ``extender_tls``, kube-scheduler's
client certificate (the extender answers only CN ``system:kube-scheduler``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from vslice_core.resources import ResourceNames

from vslice_control.install.dra import maps_gpu_name
from vslice_control.install.values import ExtenderTls, InstallValues

DEFAULT_PROFILE = "default-scheduler"
DYNAMIC_RESOURCES = "DynamicResources"


def managed_resources(names: ResourceNames) -> list[dict[str, Any]]:
    """The vslice resources, of which kube-scheduler itself checks only the GPU count."""
    checked = [{"name": names.gpu, "ignoredByScheduler": False}]
    ignored = [names.memory, names.memory_percent, names.cores]
    return checked + [{"name": name, "ignoredByScheduler": True} for name in ignored]


def extender(
    url: str,
    managed: Sequence[dict[str, Any]],
    *,
    http_timeout: str,
    tls: ExtenderTls | None = None,
) -> dict[str, Any]:
    """One ``extenders`` item: filter and bind at ``url`` for pods asking ``managed``."""
    entry: dict[str, Any] = {
        "urlPrefix": url,
        "filterVerb": "filter",
        "bindVerb": "bind",
        "enableHTTPS": url.startswith("https:"),
    }
    if tls is not None:
        entry["tlsConfig"] = _tls_config(tls)
    entry |= {
        "nodeCacheCapable": True,
        "httpTimeout": http_timeout,
        "ignorable": False,
        "managedResources": [dict(item) for item in managed],
    }
    return entry


def _tls_config(tls: ExtenderTls) -> dict[str, str]:
    fields = {
        "certFile": tls.cert_file,
        "keyFile": tls.key_file,
        "caFile": tls.ca_file,
        "certData": tls.cert_data,
        "keyData": tls.key_data,
        "caData": tls.ca_data,
    }
    return {key: value for key, value in fields.items() if value}


def configuration(values: InstallValues) -> dict[str, Any]:
    """The KubeSchedulerConfiguration; without ``extender_url`` it has no extender (a lab
    started without vslice's services)."""
    scheduler = values.kube_scheduler
    connection: dict[str, Any] = {"kubeconfig": scheduler.kubeconfig}
    if scheduler.qps is not None:
        connection["qps"] = scheduler.qps
    if scheduler.burst is not None:
        connection["burst"] = scheduler.burst
    document: dict[str, Any] = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": connection,
        "leaderElection": {"leaderElect": scheduler.leader_elect},
        "profiles": [{"schedulerName": DEFAULT_PROFILE}, vslice_profile(values)],
    }
    if scheduler.extender_url:
        vslice = extender(
            scheduler.extender_url,
            managed_resources(values.resources),
            http_timeout=scheduler.extender_http_timeout,
            tls=scheduler.extender_tls,
        )
        document["extenders"] = [vslice]
    return document


def vslice_profile(values: InstallValues) -> dict[str, Any]:
    """vslice's profile. Where the DeviceClass maps the GPU name, without the DynamicResources
    plugin: that plugin then checks every extended resource of a pod asking the name on every
    node, and refuses the nodes that advertise neither ``gpumem`` nor ``gpucores``, which is
    all of them ("cannot fit resource"). The profile's pods take the extender path, whose
    slices are no claims; a pod of it cannot use another driver's ResourceClaim either."""
    profile: dict[str, Any] = {"schedulerName": values.scheduler_name}
    if maps_gpu_name(values):
        profile["plugins"] = {"multiPoint": {"disabled": [{"name": DYNAMIC_RESOURCES}]}}
    return profile


def objects(values: InstallValues) -> list[dict[str, Any]]:
    return [configuration(values)]
