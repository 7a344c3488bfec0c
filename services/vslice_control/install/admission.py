"""The two webhook configurations that make the API server call vslice's webhook.

- ``vslice`` (MutatingWebhookConfiguration, webhook ``gpu-pods.vslice.io``): pods being
  created, selected by ``vslice_control.webhook.reach.match_conditions``: GPU pods and pods
  that set what the webhook checks; every other pod is created even while the webhook is down.
  ``sideEffects: NoneOnDryRun``: on the DRA path the webhook creates the ResourceClaimTemplate
  a pod references before admitting it, never on a dry run (docs/webhook.md "DRA path").
- ``vslice-claims`` (ValidatingWebhookConfiguration, webhook ``gpu-claims.vslice.io``): users'
  ResourceClaims and ResourceClaimTemplates that ask vslice's devices (``reach``'s claim
  conditions). Validating, so it sees each object after every mutating webhook has run and
  never changes it. It calls the same endpoint as the pods' configuration: the webhook tells
  the kinds apart by the object, and its answer for a claim never carries a patch.
  Its second webhook, ``gpu-claim-allocations.vslice.io``, sends kube-scheduler's writes of
  ``resourceclaims/status`` that newly allocate a vslice device (``reach``'s allocation
  condition), where the webhook holds the namespace's quota over all its allocated claims.

Both leave out the same namespaces by name (vslice's own, and the operator's list), and both
honour the one opt-out there is: the namespace label ``vslice.io/webhook: disabled``, which only
administrators can set. No ``objectSelector``: a pod label would let a tenant skip every rule.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from vslice_core.errors import InvalidRequest

from vslice_control.install.namespaces import OPT_OUT_LABEL, PART_OF, excluded_namespaces
from vslice_control.install.values import InstallValues
from vslice_control.webhook import reach

ADMISSION_API = "admissionregistration.k8s.io/v1"
POD_CONFIGURATION = "vslice"
POD_WEBHOOK = "gpu-pods.vslice.io"
"""The name the API server gives when it cannot call the webhook (``failed calling webhook
"gpu-pods.vslice.io"``): only the pods ``reach`` selects wait for it."""
CLAIM_CONFIGURATION = "vslice-claims"
CLAIM_WEBHOOK = "gpu-claims.vslice.io"
"""The name the API server gives when it cannot call the webhook for a claim."""
ALLOCATION_WEBHOOK = "gpu-claim-allocations.vslice.io"
"""The name the API server gives when it cannot call the webhook for an allocation (the pod
stays pending with it: with failurePolicy Fail nothing is allocated unchecked)."""


def client_config(values: InstallValues) -> dict[str, Any]:
    """Where the API server calls the webhook (URL or Service) and the CA it trusts."""
    webhook = values.webhook
    config: dict[str, Any]
    if webhook.url is not None:
        config = {"url": webhook.url}
    elif webhook.service is not None:
        service = webhook.service
        config = {
            "service": {
                "namespace": service.namespace or values.namespace,
                "name": service.name,
                "port": service.port,
                "path": service.path,
            }
        }
    else:
        raise InvalidRequest(
            "webhook.url (or webhook.service) must be set: the API server needs to know where "
            "the webhook answers, got neither",
            field="webhook.url",
            value=None,
        )
    if webhook.ca_bundle:
        config["caBundle"] = webhook.ca_bundle
    return config


def webhook_address(values: InstallValues) -> str:
    """The webhook's host[:port] as the API server looks up its client credentials for it:
    the URL's, or ``<service>.<namespace>.svc[:port]`` (the port only when not 443)."""
    config = client_config(values)
    if "url" in config:
        return urlsplit(str(config["url"])).netloc
    service = config["service"]
    host = f"{service['name']}.{service['namespace']}.svc"
    return host if service["port"] == 443 else f"{host}:{service['port']}"


def _namespace_selector(values: InstallValues) -> dict[str, Any]:
    return {
        "matchExpressions": [
            {
                "key": "kubernetes.io/metadata.name",
                "operator": "NotIn",
                "values": excluded_namespaces(values),
            },
            {"key": OPT_OUT_LABEL, "operator": "NotIn", "values": ["disabled"]},
        ]
    }


def pod_configuration(values: InstallValues) -> dict[str, Any]:
    """The pods' MutatingWebhookConfiguration."""
    hook = {
        "name": POD_WEBHOOK,
        "clientConfig": client_config(values),
        "rules": reach.pod_rules(),
        "matchConditions": reach.match_conditions(values.resources),
        "failurePolicy": values.webhook.failure_policy,
        "matchPolicy": "Equivalent",
        "sideEffects": "NoneOnDryRun",
        "timeoutSeconds": values.webhook.timeout_seconds,
        "admissionReviewVersions": ["v1"],
        "reinvocationPolicy": "Never",
        "namespaceSelector": _namespace_selector(values),
    }
    return _configuration("MutatingWebhookConfiguration", POD_CONFIGURATION, hook)


def claim_configuration(values: InstallValues) -> dict[str, Any]:
    """The claims' ValidatingWebhookConfiguration: users' claims, then allocations."""
    hooks = [
        _claim_hook(values, CLAIM_WEBHOOK, reach.claim_rules(), reach.claim_match_conditions()),
        _claim_hook(
            values,
            ALLOCATION_WEBHOOK,
            reach.allocation_rules(),
            reach.allocation_match_conditions(),
        ),
    ]
    return _configuration("ValidatingWebhookConfiguration", CLAIM_CONFIGURATION, *hooks)


def _claim_hook(
    values: InstallValues, name: str, rules: list[dict[str, Any]], conditions: list[dict[str, str]]
) -> dict[str, Any]:
    return {
        "name": name,
        "clientConfig": client_config(values),
        "rules": rules,
        "matchConditions": conditions,
        "failurePolicy": values.webhook.failure_policy,
        "matchPolicy": "Equivalent",
        "sideEffects": "None",
        "timeoutSeconds": values.webhook.timeout_seconds,
        "admissionReviewVersions": ["v1"],
        "namespaceSelector": _namespace_selector(values),
    }


def _configuration(kind: str, name: str, *hooks: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": ADMISSION_API,
        "kind": kind,
        "metadata": {"name": name, "labels": dict(PART_OF)},
        "webhooks": list(hooks),
    }
