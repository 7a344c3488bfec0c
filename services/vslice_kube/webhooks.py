"""Registering a mutating admission webhook (MutatingWebhookConfiguration), create or replace."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from vslice_kube.apierrors import cluster_error, translated


def apply_mutating_webhook(api_client: k8s.ApiClient, body: Mapping[str, Any]) -> None:
    """Create the configuration, or replace an existing one of the same name."""
    api: Any = k8s.AdmissionregistrationV1Api(api_client)  # stubs reject dict bodies
    name = str(body["metadata"]["name"])
    try:
        api.create_mutating_webhook_configuration(dict(body), _preload_content=False)
        return
    except ApiException as exc:
        if exc.status != 409:
            raise cluster_error(exc, f"create mutatingwebhookconfiguration {name}") from exc
    with translated(f"replace mutatingwebhookconfiguration {name}"):
        current = api.read_mutating_webhook_configuration(name)
        replacement = {
            **body,
            "metadata": {**body["metadata"], "resourceVersion": current.metadata.resource_version},
        }
        api.replace_mutating_webhook_configuration(name, replacement, _preload_content=False)
