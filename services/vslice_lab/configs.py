"""Configuration files the lab writes: kubeconfigs, the scheduler's configuration, service settings.

The KubeSchedulerConfiguration runs two profiles, ``default-scheduler`` and
``vslice-scheduler``, and (when an extender URL is given) registers the vslice extender for
both: filter + bind, ``nodeCacheCapable`` (node names only, the extender keeps its own node
cache), and the vslice resource names as managed resources. Only ``nvidia.com/gpu`` is left to
kube-scheduler's own fit check too (each node advertises one device per GPU slot); memory,
percentage and cores are ``ignoredByScheduler`` because no node advertises them. An
``https://`` extender URL is called with ``enableHTTPS`` and kube-scheduler's own client
certificate (the extender accepts only that one), verifying the extender against the lab CA.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from vslice_core.errors import InvalidRequest
from vslice_core.resources import DEFAULT_RESOURCE_NAMES

from vslice_lab.pki import KeyPair

SCHEDULER_PROFILES = ("default-scheduler", "vslice-scheduler")


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def write_kubeconfig(path: Path, server: str, ca: Path, client: KeyPair, user: str) -> Path:
    """A kubeconfig with the certificates embedded, so it can be copied anywhere."""
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "vslice-lab",
                "cluster": {"server": server, "certificate-authority-data": _b64(ca)},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": _b64(client.cert),
                    "client-key-data": _b64(client.key),
                },
            }
        ],
        "contexts": [{"name": "vslice-lab", "context": {"cluster": "vslice-lab", "user": user}}],
        "current-context": "vslice-lab",
    }
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    path.chmod(0o600)
    return path


@dataclass(frozen=True)
class ExtenderTls:
    """How kube-scheduler calls an ``https://`` extender: the CA that signed the extender's
    certificate, and the client certificate it presents."""

    ca: Path
    client: KeyPair


@dataclass(frozen=True)
class ExtraExtender:
    """Another filter + bind extender kube-scheduler calls, for pods asking ``resource``
    (which every node must advertise: kube-scheduler checks it as well)."""

    url: str
    resource: str


def extender_entry(
    url: str, tls: ExtenderTls | None = None, resource: str | None = None
) -> dict[str, Any]:
    """The ``extenders`` item that sends GPU pods to the vslice extender at ``url``; with
    ``resource``, pods asking that resource alone (an ``ExtraExtender``)."""
    if resource is not None:
        managed = [{"name": resource, "ignoredByScheduler": False}]
    else:
        names = DEFAULT_RESOURCE_NAMES
        managed = [{"name": names.gpu, "ignoredByScheduler": False}]
        managed += [
            {"name": name, "ignoredByScheduler": True}
            for name in (names.memory, names.memory_percent, names.cores)
        ]
    entry: dict[str, Any] = {
        "urlPrefix": url,
        "filterVerb": "filter",
        "bindVerb": "bind",
        "nodeCacheCapable": True,
        "enableHTTPS": False,
        "httpTimeout": "10s",
        "managedResources": managed,
        "ignorable": False,
    }
    if url.startswith("https://"):
        entry["enableHTTPS"] = True
        if tls is not None:
            entry["tlsConfig"] = {
                "caFile": str(tls.ca),
                "certFile": str(tls.client.cert),
                "keyFile": str(tls.client.key),
            }
    return entry


def write_scheduler_config(
    path: Path,
    kubeconfig: Path,
    extender_url: str | None,
    tls: ExtenderTls | None = None,
    extra: Sequence[ExtraExtender] = (),
) -> Path:
    """The KubeSchedulerConfiguration (see the module docstring)."""
    document: dict[str, Any] = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig), "qps": 500, "burst": 1000},
        "leaderElection": {"leaderElect": False},
        "profiles": [{"schedulerName": name} for name in SCHEDULER_PROFILES],
    }
    if extender_url and extra:
        # kube-scheduler refuses to start with two extenders that bind.
        raise InvalidRequest(
            f"extra_extenders: {extra[0].url} would be a second extender that binds beside "
            f"vslice's at {extender_url}; kube-scheduler allows one: start the lab without "
            "the vslice services (services=False) to register another",
            field="extra_extenders",
            value=extra[0].url,
        )
    extenders = [extender_entry(extender_url, tls)] if extender_url else []
    extenders += [extender_entry(e.url, tls, e.resource) for e in extra]
    if extenders:
        document["extenders"] = extenders
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def write_settings(path: Path, settings: dict[str, Any]) -> Path:
    """A flat YAML settings file for ``vslice serve <service> --config``."""
    path.write_text(yaml.safe_dump(settings, sort_keys=True))
    return path


ADMISSION_CONFIG = "admission.yaml"
WEBHOOK_CLIENT_NAME = "kube-apiserver-webhook-client"
"""Common name of the API server's client certificate towards the webhook."""


def write_admission_config(directory: Path, webhook: str, client: KeyPair) -> Path:
    """kube-apiserver's AdmissionConfiguration (``--admission-control-config-file``): the
    webhook admission plugins present ``client`` to the webhook at ``webhook`` (host:port, the
    name the API server looks the credentials up by), so the webhook can refuse any other
    caller."""
    kubeconfig = directory / "admission-webhooks.kubeconfig"
    credentials = {
        "apiVersion": "v1",
        "kind": "Config",
        "users": [
            {
                "name": webhook,
                "user": {
                    "client-certificate-data": _b64(client.cert),
                    "client-key-data": _b64(client.key),
                },
            }
        ],
    }
    kubeconfig.write_text(yaml.safe_dump(credentials, sort_keys=False))
    kubeconfig.chmod(0o600)
    plugin = {
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "WebhookAdmissionConfiguration",
        "kubeConfigFile": str(kubeconfig),
    }
    document = {
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "AdmissionConfiguration",
        "plugins": [
            {"name": name, "configuration": plugin}
            for name in ("MutatingAdmissionWebhook", "ValidatingAdmissionWebhook")
        ],
    }
    path = directory / ADMISSION_CONFIG
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path
