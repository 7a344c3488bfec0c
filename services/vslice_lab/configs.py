"""Configuration files the lab writes: kubeconfigs, the scheduler's and the API server's
configuration, service settings.

kube-scheduler's and kube-apiserver's files are built by ``vslice_control.install`` (the source
the Ansible role renders from too) with the lab's values: kube-scheduler talks to the lab's
API server at a higher rate and without leader election, gives the extender 10 s, and reads
its TLS material from the lab's files; an ``https://`` extender is called with
kube-scheduler's own client certificate (the extender accepts only that one), verifying the
extender against the lab CA. Extra extenders (``ExtraExtender``) are the lab's own: tests
register another extender with them.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from vslice_control.install import apiserver, scheduler
from vslice_control.install.manifests import to_yaml
from vslice_control.install.values import ExtenderTls as TlsValues
from vslice_control.install.values import parse_values
from vslice_core.errors import InvalidRequest

from vslice_lab.pki import KeyPair

EXTENDER_TIMEOUT = "10s"
CLIENT_CONNECTION = {"qps": 500, "burst": 1000}


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


def _tls(url: str, tls: ExtenderTls | None) -> TlsValues | None:
    if tls is None or not url.startswith("https://"):
        return None
    return TlsValues(
        ca_file=str(tls.ca), cert_file=str(tls.client.cert), key_file=str(tls.client.key)
    )


def write_scheduler_config(
    path: Path,
    kubeconfig: Path,
    extender_url: str | None,
    tls: ExtenderTls | None = None,
    extra: Sequence[ExtraExtender] = (),
    *,
    device_class: bool = False,
) -> Path:
    """The KubeSchedulerConfiguration (see the module docstring); ``device_class``: the lab
    installs the DeviceClass (which maps the GPU name), so vslice's profile goes without the
    DynamicResources plugin (``vslice_control.install.scheduler.vslice_profile``)."""
    if extender_url and extra:
        # kube-scheduler refuses to start with two extenders that bind.
        raise InvalidRequest(
            f"extra_extenders: {extra[0].url} would be a second extender that binds beside "
            f"vslice's at {extender_url}; kube-scheduler allows one: start the lab without "
            "the vslice services (services=False) to register another",
            field="extra_extenders",
            value=extra[0].url,
        )
    vslice_tls = _tls(extender_url or "", tls)
    settings: dict[str, Any] = {
        "kubeconfig": str(kubeconfig),
        **CLIENT_CONNECTION,
        "leader_elect": False,
        "extender_url": extender_url or None,
        "extender_http_timeout": EXTENDER_TIMEOUT,
        "extender_tls": vslice_tls.model_dump() if vslice_tls else None,
    }
    values = parse_values({"kube_scheduler": settings, "device_class": device_class})
    document = scheduler.configuration(values)
    others = [
        scheduler.extender(
            e.url,
            [{"name": e.resource, "ignoredByScheduler": False}],
            http_timeout=EXTENDER_TIMEOUT,
            tls=_tls(e.url, tls),
        )
        for e in extra
    ]
    if others:
        document["extenders"] = document.get("extenders", []) + others
    path.write_text(to_yaml([document]))
    return path


def write_settings(path: Path, settings: dict[str, Any]) -> Path:
    """A flat YAML settings file for ``vslice serve <service> --config``."""
    path.write_text(yaml.safe_dump(settings, sort_keys=True))
    return path


ADMISSION_CONFIG = apiserver.CONFIG_FILE
WEBHOOK_CLIENT_NAME = apiserver.CLIENT_NAME
"""Common name of the API server's client certificate towards the webhook."""


def write_admission_config(directory: Path, webhook_url: str, client: KeyPair) -> Path:
    """kube-apiserver's AdmissionConfiguration (``--admission-control-config-file``): the
    webhook admission plugins present ``client`` to the webhook at ``webhook_url``, so the
    webhook can refuse any other caller."""
    values = parse_values(
        {
            "webhook": {"url": webhook_url},
            "kube_apiserver": {
                "admission_config_dir": str(directory),
                "webhook_client_cert_data": _b64(client.cert),
                "webhook_client_key_data": _b64(client.key),
            },
        }
    )
    kubeconfig = directory / apiserver.KUBECONFIG_FILE
    kubeconfig.write_text(to_yaml([apiserver.webhook_credentials(values)]))
    kubeconfig.chmod(0o600)
    path = directory / ADMISSION_CONFIG
    path.write_text(to_yaml([apiserver.admission_configuration(values)]))
    return path
