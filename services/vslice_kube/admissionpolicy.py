"""Installing a ValidatingAdmissionPolicy and its binding (``admissionregistration.k8s.io/v1``),
create or replace, so a lab or installer run twice leaves the newest definition."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from vslice_kube.apierrors import cluster_error, translated


def apply_validating_admission_policy(
    api_client: k8s.ApiClient, policy: Mapping[str, Any], binding: Mapping[str, Any]
) -> None:
    """Create or replace the policy, then its binding (a binding to a missing policy would
    be ignored by the API server until the policy exists)."""
    api: Any = k8s.AdmissionregistrationV1Api(api_client)  # stubs reject dict bodies
    _apply(
        "validatingadmissionpolicy",
        policy,
        api.create_validating_admission_policy,
        api.read_validating_admission_policy,
        api.replace_validating_admission_policy,
    )
    _apply(
        "validatingadmissionpolicybinding",
        binding,
        api.create_validating_admission_policy_binding,
        api.read_validating_admission_policy_binding,
        api.replace_validating_admission_policy_binding,
    )


def _apply(
    kind: str,
    body: Mapping[str, Any],
    create: Callable[..., Any],
    read: Callable[..., Any],
    replace: Callable[..., Any],
) -> None:
    name = str(body["metadata"]["name"])
    try:
        create(dict(body), _preload_content=False)
        return
    except ApiException as exc:
        if exc.status != 409:
            raise cluster_error(exc, f"create {kind} {name}") from exc
    with translated(f"replace {kind} {name}"):
        current = read(name)
        replacement = {
            **body,
            "metadata": {**body["metadata"], "resourceVersion": current.metadata.resource_version},
        }
        replace(name, replacement, _preload_content=False)
