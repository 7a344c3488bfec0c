"""Installing a ValidatingAdmissionPolicy and its binding (``admissionregistration.k8s.io/v1``),
create or replace, so a lab or installer run twice leaves the newest definition."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubernetes import client as k8s

from vslice_kube.applying import create_or_replace


def apply_validating_admission_policy(
    api_client: k8s.ApiClient, policy: Mapping[str, Any], binding: Mapping[str, Any]
) -> None:
    """Create or replace the policy, then its binding (a binding to a missing policy would
    be ignored by the API server until the policy exists)."""
    api: Any = k8s.AdmissionregistrationV1Api(api_client)  # stubs reject dict bodies
    create_or_replace(
        "validatingadmissionpolicy",
        policy,
        api.create_validating_admission_policy,
        api.read_validating_admission_policy,
        api.replace_validating_admission_policy,
    )
    create_or_replace(
        "validatingadmissionpolicybinding",
        binding,
        api.create_validating_admission_policy_binding,
        api.read_validating_admission_policy_binding,
        api.replace_validating_admission_policy_binding,
    )
