"""The ValidatingWebhookConfiguration that sends users' ResourceClaims and ResourceClaimTemplates
to the webhook (``claimpolicy.review_claim``).

A validating configuration, separate from the pods' mutating one: it sees each object after
every mutating webhook has run, so what it checks is what is stored, and it never changes the
object. It calls the same URL as the pods' configuration (``/mutate``): the webhook tells the
kinds apart by the object, and its answer for a claim never carries a patch.

Its ``matchConditions`` keep every other claim off the webhook, so claims of other drivers are
created even while the webhook is down; all conditions of the list must hold:

- the claim (or the template's claim) has a request, or a ``firstAvailable`` subrequest,
  whose ``deviceClassName`` is ``gpu.vslice.io`` or ends in ``.gpu.vslice.io``;
- it is a CREATE, or an UPDATE that changes the spec (the spec of both kinds is immutable in
  ``resource.k8s.io/v1``, so an UPDATE is the finalizer and label changes of kube-scheduler
  and the claim controller, which must never wait for the webhook or the claim's deletion
  would hang while it is down).

The lab and the Ansible role register the same object (the role's template
``claims-webhook.yaml.j2`` is compared with this module by the tests).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from vslice_core.dra import DRIVER

CONFIGURATION_NAME = "vslice-claims"
WEBHOOK_NAME = "gpu-claims.vslice.io"
"""The name the API server gives when it cannot call the webhook for a claim."""
CLASS_CONDITION = "asks-vslice-devices"
SPEC_CONDITION = "creates-or-changes-the-spec"
OPT_OUT_LABEL = "vslice.io/webhook"


def rules() -> list[dict[str, Any]]:
    """The configuration's ``rules``: v1 ResourceClaims and ResourceClaimTemplates."""
    return [
        {
            "operations": ["CREATE", "UPDATE"],
            "apiGroups": ["resource.k8s.io"],
            "apiVersions": ["v1"],
            "resources": ["resourceclaims", "resourceclaimtemplates"],
            "scope": "Namespaced",
        }
    ]


def _ours(value: str) -> str:
    return f"({value} == '{DRIVER}' || {value}.endsWith('.{DRIVER}'))"


def _asks_vslice(spec: str) -> str:
    exactly = (
        "(has(r.exactly) && has(r.exactly.deviceClassName) && "
        f"{_ours('r.exactly.deviceClassName')})"
    )
    first = (
        "(has(r.firstAvailable) && r.firstAvailable.exists(s, has(s.deviceClassName) && "
        f"{_ours('s.deviceClassName')}))"
    )
    return (
        f"(has({spec}.devices) && has({spec}.devices.requests) && "
        f"{spec}.devices.requests.exists(r, {exactly} || {first}))"
    )


def class_expression() -> str:
    """CEL over ``object`` (a claim or a template) that is true when it asks vslice's devices."""
    return (
        f"(has(object.spec) && {_asks_vslice('object.spec')}) || "
        f"(has(object.spec) && has(object.spec.spec) && {_asks_vslice('object.spec.spec')})"
    )


SPEC_EXPRESSION = (
    "request.operation == 'CREATE' || oldObject == null || object.spec != oldObject.spec"
)


def match_conditions() -> list[dict[str, str]]:
    return [
        {"name": CLASS_CONDITION, "expression": class_expression()},
        {"name": SPEC_CONDITION, "expression": SPEC_EXPRESSION},
    ]


def claims_webhook_configuration(
    client_config: Mapping[str, Any],
    *,
    failure_policy: str = "Fail",
    timeout_seconds: int = 10,
    excluded_namespaces: Sequence[str] = ("kube-system",),
) -> dict[str, Any]:
    """The whole configuration; ``client_config`` is the pods' configuration's (url or service,
    and caBundle), and the namespaces the pods' configuration leaves out are left out here."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": CONFIGURATION_NAME, "labels": {"app.kubernetes.io/part-of": "vslice"}},
        "webhooks": [
            {
                "name": WEBHOOK_NAME,
                "clientConfig": dict(client_config),
                "rules": rules(),
                "matchConditions": match_conditions(),
                "failurePolicy": failure_policy,
                "matchPolicy": "Equivalent",
                "sideEffects": "None",
                "timeoutSeconds": timeout_seconds,
                "admissionReviewVersions": ["v1"],
                "namespaceSelector": {
                    "matchExpressions": [
                        {
                            "key": "kubernetes.io/metadata.name",
                            "operator": "NotIn",
                            "values": list(excluded_namespaces),
                        },
                        {"key": OPT_OUT_LABEL, "operator": "NotIn", "values": ["disabled"]},
                    ]
                },
            }
        ],
    }
