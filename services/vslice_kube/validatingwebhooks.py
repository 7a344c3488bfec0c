"""Registering a validating admission webhook (ValidatingWebhookConfiguration), create or
replace: how the lab registers ``vslice_control.webhook.claimconfig``'s configuration."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubernetes import client as k8s

from vslice_kube.applying import create_or_replace


def apply_validating_webhook(api_client: k8s.ApiClient, body: Mapping[str, Any]) -> None:
    """Create the configuration, or replace an existing one of the same name."""
    api: Any = k8s.AdmissionregistrationV1Api(api_client)  # stubs reject dict bodies
    create_or_replace(
        "validatingwebhookconfiguration",
        body,
        api.create_validating_webhook_configuration,
        api.read_validating_webhook_configuration,
        api.replace_validating_webhook_configuration,
    )
